use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[rlx::model]
fn pair<'g>(x: Tensor<'g, (Batch, Const<4>)>) -> (Tensor<'g, (Batch, Const<4>)>, usize) {
    (x, 4)
}

fn main() {}

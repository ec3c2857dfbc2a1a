use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[rlx::model]
fn count<'g>(x: Tensor<'g, (Batch, Const<4>)>) -> Vec<Tensor<'g, (Batch, Const<4>)>> {
    vec![x]
}

fn main() {}

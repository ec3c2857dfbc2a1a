use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[rlx::model]
fn double<'g>(x: Tensor<'g, (Batch, Const<4>)>) {
    let _ = x + x;
}

fn main() {}

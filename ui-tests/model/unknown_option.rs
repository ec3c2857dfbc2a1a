use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[rlx::model(backend = "cpu")]
fn double<'g>(x: Tensor<'g, (Batch, Const<4>)>) -> Tensor<'g, (Batch, Const<4>)> {
    x + x
}

fn main() {}

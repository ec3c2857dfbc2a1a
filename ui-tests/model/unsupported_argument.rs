use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[rlx::model]
fn scale<'g>(x: Tensor<'g, (Batch, Const<4>)>, factor: f32) -> Tensor<'g, (Batch, Const<4>)> {
    x * factor
}

fn main() {}

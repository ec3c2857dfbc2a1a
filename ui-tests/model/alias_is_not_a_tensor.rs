use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

type Features = Vec<f32>;

#[rlx::model]
fn double<'g>(x: Tensor<'g, (Batch, Const<4>)>, extra: Features) -> Tensor<'g, (Batch, Const<4>)> {
    let _ = extra;
    x + x
}

fn main() {}

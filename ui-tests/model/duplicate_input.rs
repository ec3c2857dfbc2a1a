use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[rlx::model]
fn add<'g>(
    x: Tensor<'g, (Batch, Const<4>)>,
    #[input(rename = "x")] y: Tensor<'g, (Batch, Const<4>)>,
) -> Tensor<'g, (Batch, Const<4>)> {
    x + y
}

fn main() {}

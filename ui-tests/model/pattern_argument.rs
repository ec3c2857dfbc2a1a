use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

type Pair<'g> = (Tensor<'g, (Batch, Const<4>)>, Tensor<'g, (Batch, Const<4>)>);

#[rlx::model]
fn add<'g>((a, b): Pair<'g>) -> Tensor<'g, (Batch, Const<4>)> {
    a + b
}

fn main() {}

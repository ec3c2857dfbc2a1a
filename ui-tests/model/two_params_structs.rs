use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[derive(rlx::Params)]
struct A<'g> {
    w: Tensor<'g, (Const<4>,)>,
}

#[rlx::model]
fn add<'g>(a: &A<'g>, b: &A<'g>, x: Tensor<'g, (Batch, Const<4>)>) -> Tensor<'g, (Batch, Const<4>)> {
    x + a.w + b.w
}

fn main() {}

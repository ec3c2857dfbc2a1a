use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[derive(rlx::Params)]
struct Weights<'g>(Tensor<'g, (Const<4>,)>);

fn main() {}

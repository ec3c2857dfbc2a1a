use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[derive(rlx::Params)]
enum Weights<'g> {
    Small(Tensor<'g, (Const<4>,)>),
}

fn main() {}

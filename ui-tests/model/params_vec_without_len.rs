use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[derive(rlx::Params)]
struct Layer<'g> {
    w: Tensor<'g, (Const<4>,)>,
}

#[derive(rlx::Params)]
struct Stack<'g> {
    layers: Vec<Layer<'g>>,
}

fn main() {}

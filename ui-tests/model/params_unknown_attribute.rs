use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[derive(rlx::Params)]
struct Dense<'g> {
    #[param(transposed)]
    weight: Tensor<'g, (Const<4>, Const<4>)>,
}

fn main() {}

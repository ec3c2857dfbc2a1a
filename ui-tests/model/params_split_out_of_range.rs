use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

#[derive(rlx::Params)]
struct Attention<'g> {
    #[param(rename = "qkv", split(parts = 3, index = 3))]
    q: Tensor<'g, (Const<4>, Const<4>)>,
}

fn main() {}

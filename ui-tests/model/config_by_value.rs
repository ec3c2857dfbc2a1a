use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

struct Cfg;

#[rlx::model]
fn double<'g>(#[config] cfg: Cfg, x: Tensor<'g, (Batch, Const<4>)>) -> Tensor<'g, (Batch, Const<4>)> {
    let _ = cfg;
    x + x
}

fn main() {}

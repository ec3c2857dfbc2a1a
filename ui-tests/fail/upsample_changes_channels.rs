use rlx::ir::UpsampleMode;
use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<3>, Const<8>, Const<8>)> = g.input("x");
        let y: Tensor<(Batch, Const<4>, Const<16>, Const<16>)> = x.upsample2d(UpsampleMode::Nearest);
        g.output("y", y);
    });
}

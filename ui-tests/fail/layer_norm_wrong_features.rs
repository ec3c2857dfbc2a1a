use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<4>)> = g.input("x");
        let w: Tensor<(Const<5>,)> = g.param("w");
        let b: Tensor<(Const<5>,)> = g.param("b");
        g.output("y", x.layer_norm(w, b, 1e-5));
    });
}

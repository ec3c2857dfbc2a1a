use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<6>, Const<5>)> = g.input("x");
        let mean: Tensor<(Const<5>,)> = g.param("bn.running_mean");
        let var: Tensor<(Const<5>,)> = g.param("bn.running_var");
        let w: Tensor<(Const<5>,)> = g.param("bn.weight");
        let b: Tensor<(Const<5>,)> = g.param("bn.bias");
        g.output("y", x.batch_norm(mean, var, w, b, 1e-5));
    });
}

use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<384>)> = g.input("x");
        let w: Tensor<(Const<1536>, Const<383>)> = g.param("w");
        g.output("y", x.matmul_t(w));
    });
}

use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Const<4>, Batch)> = g.input("x");
        let w: Tensor<(Const<8>, Const<2>)> = g.param("w");
        g.output("y", x.matmul(w));
    });
}

use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<784>)> = g.input("x");
        let w: Tensor<(Const<785>, Const<128>)> = g.param("w");
        g.output("y", x.matmul(w));
    });
}

use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let v: Tensor<(Const<8>,)> = g.input("v");
        let w: Tensor<(Const<8>, Const<2>)> = g.param("w");
        g.output("y", v.matmul(w));
    });
}

use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let mut kept = None;
    let _ = build(|g| {
        let x: Tensor<(Const<3>,)> = g.input("x");
        kept = Some(x);
        g.output("x", x);
    });
    let _ = kept;
}

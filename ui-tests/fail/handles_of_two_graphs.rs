use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Const<3>,)> = g.input("x");
        let _ = build(|h| {
            let y: Tensor<(Const<3>,)> = h.input("y");
            h.output("z", x + y);
        });
        g.output("x", x);
    });
}

use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let a: Tensor<(Const<3>,)> = g.input("a");
        let b: Tensor<(Const<3>,), half::f16> = g.input("b");
        g.output("y", a + b);
    });
}

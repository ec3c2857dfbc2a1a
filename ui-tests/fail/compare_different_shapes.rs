use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let a: Tensor<(Batch, Const<3>)> = g.input("a");
        let b: Tensor<(Batch, Const<2>)> = g.input("b");
        g.output("y", a.lt(b));
    });
}

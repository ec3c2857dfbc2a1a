use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<2>), i32> = g.input("x");
        g.output("y", x.mean::<1>());
    });
}

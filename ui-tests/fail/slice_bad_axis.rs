use rlx::typed::{Axis, Const, Dyn, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<4>)> = g.input("x");
        let y: Tensor<(Batch, Dyn)> = x.slice(Axis::<2>, 0, None, 2);
        g.output("y", y);
    });
}

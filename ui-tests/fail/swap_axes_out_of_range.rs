use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<4>)> = g.input("x");
        g.output("y", x.swap_axes::<0, 2>());
    });
}

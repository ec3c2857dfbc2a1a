use rlx::typed::{Axis, Const, Tensor, build};

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Const<4>, Const<10>)> = g.input("x");
        let cols: Tensor<(Const<3>,)> = g.input("cols");
        g.output("y", x.take(Axis::<1>, cols));
    });
}

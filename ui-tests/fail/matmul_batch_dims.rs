use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let a: Tensor<(Batch, Const<3>, Const<4>)> = g.input("a");
        let b: Tensor<(Const<2>, Const<4>, Const<5>)> = g.input("b");
        g.output("y", a.matmul(b));
    });
}

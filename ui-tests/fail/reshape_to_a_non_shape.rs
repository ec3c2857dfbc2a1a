use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<2>)> = g.input("x");
        g.output("y", x.reshape::<[usize; 2]>());
    });
}

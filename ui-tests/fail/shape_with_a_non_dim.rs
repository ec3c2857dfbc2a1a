use rlx::typed::{Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, usize)> = g.input("x");
        g.output("y", x);
    });
}

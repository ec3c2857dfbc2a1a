use rlx::typed::{Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let a: Tensor<(Batch,), bool> = g.input("a");
        let b: Tensor<(Batch,), bool> = g.input("b");
        g.output("y", a + b);
    });
}

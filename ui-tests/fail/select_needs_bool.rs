use rlx::typed::{Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let c: Tensor<(Batch,)> = g.input("c");
        let a: Tensor<(Batch,)> = g.input("a");
        g.output("y", c.select(a, a));
    });
}

use rlx::typed::{Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let m: Tensor<(Batch,), bool> = g.input("mask");
        g.output("y", m.exp());
    });
}

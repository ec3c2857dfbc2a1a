use rlx::typed::{Const, Rope, Tensor, build};
rlx::dims!(Seq);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Seq, Const<8>), i64> = g.input("x");
        g.output("y", x.rope(Rope::new(8, 10_000.0)));
    });
}

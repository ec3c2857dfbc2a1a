use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch, Seq);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Seq, Const<8>)> = g.input("x");
        g.output("y", x.permute::<1, 0>());
    });
}

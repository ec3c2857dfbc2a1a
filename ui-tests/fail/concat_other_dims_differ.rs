use rlx::typed::{Axis, Const, Dyn, Tensor, build};
rlx::dims!(Batch, Seq);

fn main() {
    let _ = build(|g| {
        let a: Tensor<(Batch, Const<3>)> = g.input("a");
        let b: Tensor<(Seq, Const<3>)> = g.input("b");
        let ab: Tensor<(Batch, Dyn)> = a.concat(Axis::<1>, b);
        g.output("ab", ab);
    });
}

use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let q: Tensor<(Batch, Const<12>, Const<7>, Const<64>)> = g.input("q");
        let k: Tensor<(Batch, Const<12>, Const<65>, Const<7>)> = g.input("k");
        g.output("scores", q.matmul(k));
        let a: Tensor<(Batch, Const<7>, Const<64>)> = g.input("a");
        let b: Tensor<(Batch, Const<32>, Const<5>)> = g.input("b");
        g.output("y", a.matmul(b));
    });
}

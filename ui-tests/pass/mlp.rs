use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let graph = build(|g| {
        let x: Tensor<(Batch, Const<784>)> = g.input("x");
        let w1: Tensor<(Const<128>, Const<784>)> = g.param("fc1.weight");
        let b1: Tensor<(Const<128>,)> = g.param("fc1.bias");
        let w2: Tensor<(Const<10>, Const<128>)> = g.param("fc2.weight");
        let h = (x.matmul_t(w1) + b1).relu();
        let logits = h.matmul_t(w2) * 0.5f32;
        g.output("probs", logits.softmax::<1>());
        g.output("class", logits.argmax::<1>());
    })
    .expect("builds");
    assert_eq!(graph.outputs().len(), 2);
}

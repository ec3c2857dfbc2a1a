use rlx::nn::Linear;
use rlx::typed::{Const, Tensor, build};
rlx::dims!(Batch);

#[derive(rlx::Params)]
struct Head<'g> {
    fc: Linear<'g, Const<128>, Const<10>>,
}

fn main() {
    let _ = build(|g| {
        let p: Head = g.params();
        let x: Tensor<(Batch, Const<784>)> = g.input("x");
        g.output("y", p.fc.forward(x));
    });
}

use rlx::typed::{Const, Tensor};
rlx::dims!(Batch);

struct Net;

impl Net {
    #[rlx::model]
    fn double<'g>(&self, x: Tensor<'g, (Batch, Const<4>)>) -> Tensor<'g, (Batch, Const<4>)> {
        x + x
    }
}

fn main() {}

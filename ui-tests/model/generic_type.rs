use rlx::typed::Tensor;
rlx::dims!(Batch);

#[rlx::model]
fn double<'g, D: rlx::typed::Dim>(x: Tensor<'g, (Batch, D)>) -> Tensor<'g, (Batch, D)> {
    x + x
}

fn main() {}

use rlx::typed::{Const, Quantization, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<64>)> = g.input("x");
        let w: Tensor<(Const<16>, Const<32>), u8> = g.param("w");
        let scales: Tensor<(Const<8>, Const<2>)> = g.param("scales");
        let q = Quantization { bits: 4, group_size: 32 };
        g.output("y", x.quantized_matmul(w, scales, scales, q));
    });
}

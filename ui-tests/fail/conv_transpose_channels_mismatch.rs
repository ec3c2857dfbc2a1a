use rlx::typed::{Const, ConvTransposeConfig, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let x: Tensor<(Batch, Const<16>, Const<7>, Const<7>)> = g.input("x");
        // PyTorch's layout is [in, out, kh, kw]: this weight is written [out, in, kh, kw].
        let w: Tensor<(Const<8>, Const<16>, Const<3>, Const<3>)> = g.param("w");
        let y: Tensor<(Batch, Const<16>, Const<9>, Const<9>)> =
            x.conv_transpose2d(w, None, ConvTransposeConfig::default());
        g.output("y", y);
    });
}

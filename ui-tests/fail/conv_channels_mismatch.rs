use rlx::typed::{Const, ConvConfig, Tensor, build};
rlx::dims!(Batch);

fn main() {
    let _ = build(|g| {
        let image: Tensor<(Batch, Const<1>, Const<28>, Const<28>)> = g.input("image");
        let w: Tensor<(Const<8>, Const<3>, Const<3>, Const<3>)> = g.param("w");
        let y: Tensor<(Batch, Const<8>, Const<26>, Const<26>)> =
            image.conv2d(w, None, ConvConfig::default());
        g.output("y", y);
    });
}

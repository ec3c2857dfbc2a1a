//! The models the tests share.

use rlx::nn::Linear;
use rlx::typed::{Const, Scope, Sizes, Tensor};

rlx::dims!(Batch, Seq);
rlx::config_dims!(Hidden, Layers);

#[derive(rlx::Params)]
pub struct MlpParams<'g> {
    pub fc1: Linear<'g, Const<4>, Const<8>>,
    pub fc2: Linear<'g, Const<8>, Const<3>>,
}

/// A two-layer perceptron.
#[rlx::model]
pub fn mlp<'g>(
    p: &MlpParams<'g>,
    x: Tensor<'g, (Batch, Const<4>)>,
) -> Tensor<'g, (Batch, Const<3>)> {
    p.fc2.forward(p.fc1.forward(x).relu())
}

type Logits<'g> = Tensor<'g, (Batch, Const<3>)>;

/// Calls another model fn, adds a `#[param]` weight and returns two outputs.
#[rlx::model(outputs(logits, probs))]
pub fn classifier<'g>(
    p: &MlpParams<'g>,
    #[param] temperature: Tensor<'g, ()>,
    x: Tensor<'g, (Batch, Const<4>)>,
) -> (Logits<'g>, Logits<'g>) {
    let logits = mlp(p, x);
    (logits, (logits / temperature).softmax::<1>())
}

/// The config of [`deep`].
pub struct DeepConfig {
    pub hidden: usize,
    pub layers: usize,
}

impl rlx::model::Config for DeepConfig {
    fn sizes(&self) -> Sizes {
        Sizes::new()
            .with::<Hidden>(self.hidden)
            .with::<Layers>(self.layers)
    }
}

/// A fused `[3 * hidden, hidden]` QKV weight split into three params.
#[derive(rlx::Params)]
pub struct Fused<'g> {
    #[param(rename = "qkv", split(parts = 3, index = 0))]
    pub q: Linear<'g, Hidden, Hidden>,
    #[param(rename = "qkv", split(parts = 3, index = 1))]
    pub k: Linear<'g, Hidden, Hidden>,
    #[param(rename = "qkv", split(parts = 3, index = 2))]
    pub v: Linear<'g, Hidden, Hidden>,
}

#[derive(rlx::Params)]
pub struct DeepParams<'g> {
    #[param(len = Layers, rename = "layer")]
    pub layers: Vec<Fused<'g>>,
}

/// Config-bound dims, a `Vec` of layers and split weights; two inputs share `Batch` and `Seq`.
#[rlx::model]
pub fn deep<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &DeepConfig,
    p: &DeepParams<'g>,
    x: Tensor<'g, (Batch, Seq, Hidden)>,
    #[input(rename = "gate")] y: Tensor<'g, (Batch, Seq, Hidden)>,
) -> Tensor<'g, (Batch, Seq, Hidden)> {
    assert_eq!(g.size::<Hidden>(), cfg.hidden);
    let mut h = x * y;
    for layer in &p.layers {
        h = layer.q.forward(h) + layer.k.forward(h) * layer.v.forward(h);
    }
    h
}

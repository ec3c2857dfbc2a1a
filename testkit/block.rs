//! One BERT-style encoder block (hidden 384, 12 heads, FFN 1536, GELU-erf, post-LayerNorm),
//! the model of `mlx_block_bench` and `data_parallel_bench` (and of `bench/mlx_block.py`).

use rlx::model::Config;
use rlx::nn::{FeedForward, LayerNorm, SelfAttention};
use rlx::tensor::HostTensor;
use rlx::typed::{Sizes, Tensor};

rlx::dims!(Batch, Seq);
rlx::config_dims!(Hidden, Heads, HeadDim, Ffn);

/// Its sizes: hidden 384, 12 heads of 32, FFN 1536 (MiniLM's layer).
pub struct BlockConfig;

impl Config for BlockConfig {
    fn sizes(&self) -> Sizes {
        Sizes::new()
            .with::<Hidden>(384)
            .with::<Heads>(12)
            .with::<HeadDim>(32)
            .with::<Ffn>(1536)
    }
}

/// Its weights.
#[derive(rlx::Params)]
pub struct BlockParams<'g> {
    attention: SelfAttention<'g, Hidden, Heads, HeadDim>,
    norm1: LayerNorm<'g, Hidden>,
    ffn: FeedForward<'g, Hidden, Ffn>,
    norm2: LayerNorm<'g, Hidden>,
}

/// The block: self-attention and a feed-forward layer, each followed by a residual add and
/// LayerNorm.
#[rlx::model]
pub fn block<'g>(
    #[config] _cfg: &BlockConfig,
    p: &BlockParams<'g>,
    x: Tensor<'g, (Batch, Seq, Hidden)>,
) -> Tensor<'g, (Batch, Seq, Hidden)> {
    let x = p.norm1.forward(x + p.attention.forward(x), 1e-12);
    p.norm2.forward(x + p.ffn.forward(x), 1e-12)
}

/// Deterministic weights for the benchmarks (ones for the LayerNorm scales).
pub fn weights(spec: &rlx::params::ParamSpec) -> HostTensor {
    let shape = spec.static_shape().expect("static weights");
    let n: usize = shape.iter().product();
    let values = if spec.name.ends_with("norm1.weight") || spec.name.ends_with("norm2.weight") {
        vec![1.0f32; n]
    } else {
        (0..n)
            .map(|i| ((i * 7919 % 997) as f32 / 997.0 - 0.5) * 0.1)
            .collect()
    };
    HostTensor::from_vec(values, shape).expect("length matches the shape")
}

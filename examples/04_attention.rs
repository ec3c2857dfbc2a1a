//! Tutorial 04: a transformer encoder block from the `rlx::nn` layers — multi-head
//! self-attention with a padding mask, a GELU feed-forward block and post-LayerNorm — with
//! the model dims read from a config at build time.
//!
//! ```text
//! cargo run --example 04_attention [-- HIDDEN HEADS]
//! ```

use std::error::Error;

use rlx::cpu::CpuBackend;
use rlx::model::Config;
use rlx::nn::{FeedForward, LayerNorm, SelfAttention};
use rlx::tensor::HostTensor;
use rlx::typed::{Sizes, Tensor};

// Runtime dims: bound per run from the inputs.
rlx::dims!(Batch, Seq);
// Config dims: fixed when the graph is built, so the weights have static shapes.
rlx::config_dims!(Hidden, Heads, HeadDim, Ffn);

/// The block's config, as it might be read from a `config.json`.
struct BlockConfig {
    hidden: usize,
    heads: usize,
    eps: f64,
}

impl Config for BlockConfig {
    fn sizes(&self) -> Sizes {
        Sizes::new()
            .with::<Hidden>(self.hidden)
            .with::<Heads>(self.heads)
            .with::<HeadDim>(self.hidden / self.heads)
            .with::<Ffn>(4 * self.hidden)
    }
}

/// BERT's layer layout; `rename` maps the Rust field names onto BERT's checkpoint names.
#[derive(rlx::Params)]
struct BlockParams<'g> {
    attention: SelfAttention<'g, Hidden, Heads, HeadDim>,
    #[param(rename = "attention_norm")]
    norm1: LayerNorm<'g, Hidden>,
    ffn: FeedForward<'g, Hidden, Ffn>,
    #[param(rename = "output_norm")]
    norm2: LayerNorm<'g, Hidden>,
}

type Hiddens<'g> = Tensor<'g, (Batch, Seq, Hidden)>;

/// One post-norm encoder block. `mask[b, j]` is false at padding positions: no query
/// attends to them, so real positions come out the same however much padding follows.
#[rlx::model]
fn block<'g>(
    #[config] cfg: &BlockConfig,
    p: &BlockParams<'g>,
    x: Hiddens<'g>,
    mask: Tensor<'g, (Batch, Seq), bool>,
) -> Hiddens<'g> {
    let x = p
        .norm1
        .forward(x + p.attention.forward_masked(x, mask), cfg.eps);
    p.norm2.forward(x + p.ffn.forward(x), cfg.eps)
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let hidden = args.next().transpose()?.unwrap_or(64);
    let heads = args.next().transpose()?.unwrap_or(4);
    let cfg = BlockConfig {
        hidden,
        heads,
        eps: 1e-12,
    };

    let graph = Block::build(&cfg)?;
    println!(
        "block: hidden {hidden}, {heads} heads, {} nodes, {} weights",
        graph.len(),
        graph.params().count()
    );
    let model = Block::compile(&CpuBackend::default(), &cfg)?;
    model.init_weights(|spec| {
        let shape = spec.static_shape().expect("static weights");
        let n: usize = shape.iter().product();
        let values = if spec.name.ends_with("norm.weight") {
            vec![1.0f32; n]
        } else {
            (0..n)
                .map(|i| ((i * 7919 % 997) as f32 / 997.0 - 0.5) * 0.2)
                .collect()
        };
        HostTensor::from_vec(values, shape).expect("length matches the shape")
    })?;

    // Two sequences of lengths 5 and 3, right-padded to 5.
    let (batch, seq) = (2, 5);
    let lengths = [5, 3];
    let x: Vec<f32> = (0..batch * seq * hidden)
        .map(|i| ((i % 23) as f32 - 11.0) / 11.0)
        .collect();
    let x = HostTensor::from_vec(x, [batch, seq, hidden])?;
    let mask: Vec<bool> = (0..batch * seq)
        .map(|i| i % seq < lengths[i / seq])
        .collect();
    let mask = HostTensor::from_vec(mask, [batch, seq])?;
    let out = model.run(&x, &mask)?;
    println!("output shape {:?}", out.shape());

    // The second sequence run alone, unpadded, gives the same rows.
    let alone = HostTensor::from_vec(
        x.as_slice::<f32>()?[seq * hidden..(seq + 3) * hidden].to_vec(),
        [1, 3, hidden],
    )?;
    let alone_mask = HostTensor::from_vec(vec![true; 3], [1, 3])?;
    let single = model.run(&alone, &alone_mask)?;
    let padded_rows = &out.as_slice::<f32>()?[seq * hidden..(seq + 3) * hidden];
    let max_diff = padded_rows
        .iter()
        .zip(single.as_slice::<f32>()?)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("padded vs unpadded, max |diff| over the real positions: {max_diff:.2e}");
    Ok(())
}

//! Llama-family decoders: token embeddings, then blocks of RMSNorm → grouped-query
//! attention with rotary positions → residual, RMSNorm → gated feed-forward → residual, a
//! final RMSNorm and the output projection. One graph covers the family's variants, each a
//! feature of [`LlamaConfig`]: Llama and SmolLM2 as they are; Qwen2's query/key/value
//! biases; Qwen3's per-head query and key norms; Gemma 3's scaled embeddings, norms after
//! attention and feed-forward, GeGLU, its own attention scale and local sliding-window
//! layers between global ones.
//!
//! Param names are GGUF's (`blk.0.attn_q.weight`), so a GGUF file loads as it is
//! ([`load_gguf_checkpoint`]); a Hugging Face checkpoint loads through
//! [`load_hf_checkpoint`], which renames its tensors. llama.cpp's converter
//! stores Llama's query and key projections with the rows of each head interleaved for its
//! rotary layout (rotating adjacent feature pairs); the model rotates adjacent pairs for
//! those files ([`LlamaConfig::rope_traditional`]), so the weights need no permutation.
//!
//! ```
//! use rlx::models::llama::{Llama, LlamaConfig};
//! let mut config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
//! config.qkv_bias = true;
//! let manifest = Llama::manifest(&config)?;
//! assert_eq!(manifest.get("blk.1.attn_k.weight").unwrap().file_shape(), Some(vec![32, 64]));
//! assert!(manifest.get("blk.1.attn_k.bias").is_some());
//! assert!(manifest.get("blk.1.attn_k_norm.weight").is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod checkpoint;
mod config;
mod decoder;
mod expert_tensors;
mod files;
mod finetune;
mod lora;
mod peft;
mod step;

pub use checkpoint::{hf_tensor_name, load_gguf_checkpoint, load_hf_checkpoint};
pub use config::{
    Activation, KvCacheFormat, LlamaConfig, LlamaConfigError, MAX_EXPERTS, MAX_HEAD_DIM,
    MAX_LAYERS, Mixture, SlidingWindow,
};
pub use decoder::{LlamaBatchDecoder, LlamaDecoder, LlamaLoadError, Quantization};
pub use files::LlamaFiles;
pub use finetune::{LlamaLoss, llama_loss};
pub use lora::{LoraAdapter, LoraConfig, LoraError, LoraTarget};
pub use step::{
    Cache, LlamaBatchConfig, LlamaBatchStep, LlamaCacheConfig, LlamaStep, llama_batch_step,
    llama_step,
};

use crate::Params;
use crate::nn::{
    Bias, Experts, LoraRank, Projection, RmsNorm, TokenEmbedding, combine_experts, route,
};
use crate::typed::{Const, Dim, Rope, Scope, Sizes, Tensor};

crate::dims!(
    /// Sequences in a batch.
    Batch,
    /// Tokens per sequence.
    Seq
);
crate::config_dims!(
    /// `embedding_length`: the width of the residual stream.
    Hidden,
    /// Query heads.
    Heads,
    /// Key and value heads (grouped-query attention shares each among `Heads / KvHeads`
    /// query heads).
    KvHeads,
    /// Features per head.
    HeadDim,
    /// `Heads × HeadDim`.
    QueryWidth,
    /// `KvHeads × HeadDim`.
    KvWidth,
    /// `feed_forward_length`.
    Intermediate,
    /// Token vocabulary.
    Vocab,
    /// `block_count`.
    Layers,
    /// Positions a key/value cache holds.
    Capacity,
    /// Sequences a batched step holds, each in caches of its own.
    Slots,
    /// Experts of a mixture block.
    ExpertCount,
    /// Experts each token goes through.
    ExpertsPerToken,
    /// The hidden width of one expert.
    ExpertIntermediate,
    /// The hidden width of a mixture's shared expert.
    SharedIntermediate
);

impl crate::model::Config for LlamaConfig {
    fn sizes(&self) -> Sizes {
        let sizes = self
            .block_formats
            .iter()
            .fold(Sizes::new(), |sizes, (key, format)| {
                sizes.with_block_format(key, *format)
            });
        let sizes = sizes
            .with_block_activations(self.block_activations)
            .with::<Hidden>(self.hidden_size)
            .with::<Heads>(self.num_heads)
            .with::<KvHeads>(self.num_kv_heads)
            .with::<HeadDim>(self.head_dim)
            .with::<QueryWidth>(self.num_heads * self.head_dim)
            .with::<KvWidth>(self.num_kv_heads * self.head_dim)
            .with::<Intermediate>(self.intermediate_size)
            .with::<Vocab>(self.vocab_size)
            .with::<Layers>(self.num_layers)
            .with_flag("qkv_bias", self.qkv_bias)
            .with_flag("qk_norm", self.qk_norm)
            .with_flag("separate_output", !self.tied_output)
            .with_flag("sandwich_norms", self.sandwich_norms)
            .with_flag("dense_ffn", self.mixture.is_none())
            .with_flag("mixture", self.mixture.is_some())
            .with_flag(
                "shared_expert",
                (self.mixture.as_ref())
                    .is_some_and(|m| m.shared_expert_intermediate_size.is_some()),
            );
        let sizes = match &self.mixture {
            Some(m) => {
                let sizes = sizes
                    .with::<ExpertCount>(m.experts)
                    .with::<ExpertsPerToken>(m.experts_per_token)
                    .with::<ExpertIntermediate>(m.expert_intermediate_size);
                match m.shared_expert_intermediate_size {
                    Some(width) => sizes.with::<SharedIntermediate>(width),
                    None => sizes,
                }
            }
            None => sizes,
        };
        match &self.lora {
            Some(lora) => (0..self.num_layers)
                .flat_map(|layer| {
                    let present = lora.targets.iter().filter(|t| t.present_in(self));
                    present.map(move |t| (layer, t))
                })
                .fold(sizes.with::<LoraRank>(lora.rank), |sizes, (layer, t)| {
                    sizes.with_adapter(
                        &format!("blk.{layer}.{}.weight", t.gguf_name()),
                        lora.scale(),
                    )
                }),
            None => sizes,
        }
    }
}

/// `blk.N.*`: one decoder block.
#[derive(Params)]
pub struct LlamaBlock<'g> {
    /// Norm before attention.
    pub attn_norm: RmsNorm<'g, Hidden>,
    /// Query projection.
    pub attn_q: Projection<'g, Hidden, QueryWidth>,
    /// Its bias (Qwen2).
    #[param(rename = "attn_q", when = "qkv_bias")]
    pub attn_q_bias: Option<Bias<'g, QueryWidth>>,
    /// Key projection.
    pub attn_k: Projection<'g, Hidden, KvWidth>,
    /// Its bias (Qwen2).
    #[param(rename = "attn_k", when = "qkv_bias")]
    pub attn_k_bias: Option<Bias<'g, KvWidth>>,
    /// Value projection.
    pub attn_v: Projection<'g, Hidden, KvWidth>,
    /// Its bias (Qwen2).
    #[param(rename = "attn_v", when = "qkv_bias")]
    pub attn_v_bias: Option<Bias<'g, KvWidth>>,
    /// Per-head norm of the queries (Qwen3, Gemma 3).
    #[param(when = "qk_norm")]
    pub attn_q_norm: Option<RmsNorm<'g, HeadDim>>,
    /// Per-head norm of the keys (Qwen3, Gemma 3).
    #[param(when = "qk_norm")]
    pub attn_k_norm: Option<RmsNorm<'g, HeadDim>>,
    /// Attention output projection.
    pub attn_output: Projection<'g, QueryWidth, Hidden>,
    /// Norm of the attention's output before the residual addition (Gemma 3).
    #[param(when = "sandwich_norms")]
    pub post_attention_norm: Option<RmsNorm<'g, Hidden>>,
    /// Norm before the feed-forward block.
    pub ffn_norm: RmsNorm<'g, Hidden>,
    /// The gate (dense models).
    #[param(when = "dense_ffn")]
    pub ffn_gate: Option<Projection<'g, Hidden, Intermediate>>,
    /// The up projection (dense models).
    #[param(when = "dense_ffn")]
    pub ffn_up: Option<Projection<'g, Hidden, Intermediate>>,
    /// The down projection (dense models).
    #[param(when = "dense_ffn")]
    pub ffn_down: Option<Projection<'g, Intermediate, Hidden>>,
    /// The mixture's router (mixtures of experts).
    #[param(when = "mixture")]
    pub ffn_gate_inp: Option<Projection<'g, Hidden, ExpertCount>>,
    /// The experts' gates.
    #[param(when = "mixture")]
    pub ffn_gate_exps: Option<Experts<'g, ExpertCount, Hidden, ExpertIntermediate>>,
    /// The experts' up projections.
    #[param(when = "mixture")]
    pub ffn_up_exps: Option<Experts<'g, ExpertCount, Hidden, ExpertIntermediate>>,
    /// The experts' down projections.
    #[param(when = "mixture")]
    pub ffn_down_exps: Option<Experts<'g, ExpertCount, ExpertIntermediate, Hidden>>,
    /// The shared expert's gate (Qwen2-MoE).
    #[param(when = "shared_expert")]
    pub ffn_gate_shexp: Option<Projection<'g, Hidden, SharedIntermediate>>,
    /// The shared expert's up projection.
    #[param(when = "shared_expert")]
    pub ffn_up_shexp: Option<Projection<'g, Hidden, SharedIntermediate>>,
    /// The shared expert's down projection.
    #[param(when = "shared_expert")]
    pub ffn_down_shexp: Option<Projection<'g, SharedIntermediate, Hidden>>,
    /// The sigmoid gate on the shared expert's output.
    #[param(when = "shared_expert")]
    pub ffn_gate_inp_shexp: Option<Projection<'g, Hidden, Const<1>>>,
    /// Norm of the feed-forward output before the residual addition (Gemma 3).
    #[param(when = "sandwich_norms")]
    pub post_ffw_norm: Option<RmsNorm<'g, Hidden>>,
}

/// Every weight of a Llama-family decoder.
#[derive(Params)]
pub struct LlamaParams<'g> {
    /// Token vectors (also the output projection unless `output` is present).
    pub token_embd: TokenEmbedding<'g, Vocab, Hidden>,
    /// The blocks.
    #[param(len = Layers)]
    pub blk: Vec<LlamaBlock<'g>>,
    /// The final norm.
    pub output_norm: RmsNorm<'g, Hidden>,
    /// The output projection, when it is not the embedding table.
    #[param(when = "separate_output")]
    pub output: Option<Projection<'g, Hidden, Vocab>>,
}

/// Hidden states of a batch.
pub type Hiddens<'g> = Tensor<'g, (Batch, Seq, Hidden)>;

/// Per-head values of `B` sequences: `(B, N, Seq, HeadDim)` for `N` heads.
type Heads4<'g, B, N> = Tensor<'g, (B, N, Seq, HeadDim)>;

/// How one block attends: `attend` rotates the queries and keys of the new tokens by
/// their positions (`rope`) and turns them and the values into the attention's output,
/// within `window` positions when the layer is local.
trait Attend<'g, B: Dim> {
    fn attend(
        &mut self,
        layer: usize,
        rope: Rope,
        q: Heads4<'g, B, Heads>,
        k: Heads4<'g, B, KvHeads>,
        v: Heads4<'g, B, KvHeads>,
        window: Option<usize>,
    ) -> Heads4<'g, B, Heads>;
}

/// The token vectors of `input_ids`, scaled as the config says.
fn embed<'g, B: Dim>(
    cfg: &LlamaConfig,
    p: &LlamaParams<'g>,
    input_ids: Tensor<'g, (B, Seq), i64>,
) -> Tensor<'g, (B, Seq, Hidden)> {
    let x = p.token_embd.forward(input_ids);
    if cfg.embedding_scale == 1.0 {
        x
    } else {
        // Gemma scales in the weights' dtype: the factor rounded to f32.
        x * cfg.embedding_scale as f32
    }
}

/// Every block over `x` (`B` sequences of `Seq` new tokens), attending as `attend` does;
/// the routing of mixture blocks is pushed onto `routings`.
fn blocks<'g, B: Dim>(
    cfg: &LlamaConfig,
    p: &LlamaParams<'g>,
    mut x: Tensor<'g, (B, Seq, Hidden)>,
    attend: &mut impl Attend<'g, B>,
    routings: &mut Vec<Routing<'g, B>>,
) -> Tensor<'g, (B, Seq, Hidden)> {
    let eps = cfg.rms_norm_eps;
    let sandwich = |norm: &Option<RmsNorm<'g, Hidden>>, t: Tensor<'g, (B, Seq, Hidden)>| match norm
    {
        Some(n) => n.forward(t, eps),
        None => t,
    };
    for (i, p) in p.blk.iter().enumerate() {
        let (rope, window) = cfg.layer(i);
        let h = p.attn_norm.forward(x, eps);
        let q = Bias::forward_optional(p.attn_q.forward(h), &p.attn_q_bias)
            .reshape::<(B, Seq, Heads, HeadDim)>();
        let k =
            Bias::forward_optional(p.attn_k.forward(h), &p.attn_k_bias)
                .reshape::<(B, Seq, KvHeads, HeadDim)>();
        let v =
            Bias::forward_optional(p.attn_v.forward(h), &p.attn_v_bias)
                .reshape::<(B, Seq, KvHeads, HeadDim)>();
        let q = head_norm(&p.attn_q_norm, q, eps).swap_axes::<1, 2>();
        let k = head_norm(&p.attn_k_norm, k, eps).swap_axes::<1, 2>();
        let v = v.swap_axes::<1, 2>();
        let context = attend
            .attend(i, rope, q, k, v, window)
            .swap_axes::<1, 2>()
            .reshape::<(B, Seq, QueryWidth)>();
        x = x + sandwich(&p.post_attention_norm, p.attn_output.forward(context));
        let h = p.ffn_norm.forward(x, eps);
        let out = feed_forward(cfg, p, h, &mut *routings);
        // Each layer's output is what a training step that recomputes activations keeps.
        x = (x + sandwich(&p.post_ffw_norm, out)).checkpoint();
    }
    x
}

/// The activation of the gated feed-forward blocks.
fn activate<'g, S: crate::typed::Shape>(cfg: &LlamaConfig, gate: Tensor<'g, S>) -> Tensor<'g, S> {
    match cfg.activation {
        Activation::Silu => gate.silu(),
        Activation::GeluTanh => gate.gelu_tanh(),
    }
}

/// What a mixture block's router decided: its logits and the experts it chose (what the
/// load-balancing loss reads).
pub(super) struct Routing<'g, B: Dim> {
    pub logits: Tensor<'g, (B, Seq, ExpertCount)>,
    pub experts: Tensor<'g, (B, Seq, ExpertsPerToken), i64>,
}

/// `down(activation(gate(h)) · up(h))`: the dense feed-forward, and a mixture's shared
/// expert.
fn gated<'g, B: Dim, I: Dim>(
    cfg: &LlamaConfig,
    gate: &Projection<'g, Hidden, I>,
    up: &Projection<'g, Hidden, I>,
    down: &Projection<'g, I, Hidden>,
    h: Tensor<'g, (B, Seq, Hidden)>,
) -> Tensor<'g, (B, Seq, Hidden)> {
    down.forward(activate(cfg, gate.forward(h)) * up.forward(h))
}

/// A block's feed-forward over its normed input `h`: the dense gated one, or the mixture
/// of experts (its routing pushed onto `routings`).
fn feed_forward<'g, B: Dim>(
    cfg: &LlamaConfig,
    p: &LlamaBlock<'g>,
    h: Tensor<'g, (B, Seq, Hidden)>,
    routings: &mut Vec<Routing<'g, B>>,
) -> Tensor<'g, (B, Seq, Hidden)> {
    if let (Some(gate), Some(up), Some(down)) = (&p.ffn_gate, &p.ffn_up, &p.ffn_down) {
        return gated(cfg, gate, up, down, h);
    }
    let (Some(m), Some(router), Some(gate), Some(up), Some(down)) = (
        &cfg.mixture,
        &p.ffn_gate_inp,
        &p.ffn_gate_exps,
        &p.ffn_up_exps,
        &p.ffn_down_exps,
    ) else {
        // The params follow the config's flags, so one of the two sets is declared.
        let reason = "the block has no feed-forward weights".to_string();
        let scope = h.scope();
        return Tensor::from_id(scope, scope.reject("feed_forward", h.id(), reason));
    };
    let logits = router.forward(h);
    let routes = route::<_, _, _, ExpertsPerToken, _>(logits, m.normalize_weights);
    routings.push(Routing {
        logits,
        experts: routes.experts,
    });
    let hidden = activate(cfg, gate.forward(h, routes.experts)) * up.forward(h, routes.experts);
    let outputs = down.forward_pairs(hidden, routes.experts);
    let mixed = combine_experts(outputs, routes.weights);
    match (
        &p.ffn_gate_shexp,
        &p.ffn_up_shexp,
        &p.ffn_down_shexp,
        &p.ffn_gate_inp_shexp,
    ) {
        (Some(gate), Some(up), Some(down), Some(share)) => {
            let shared = gated(cfg, gate, up, down, h);
            let share = share.forward(h).sigmoid().broadcast::<(B, Seq, Hidden)>();
            mixed + shared * share
        }
        _ => mixed,
    }
}

fn head_norm<'g, B: Dim, N: Dim>(
    norm: &Option<RmsNorm<'g, HeadDim>>,
    t: Tensor<'g, (B, Seq, N, HeadDim)>,
    eps: f64,
) -> Tensor<'g, (B, Seq, N, HeadDim)> {
    match norm {
        Some(n) => n.forward(t, eps),
        None => t,
    }
}

/// The final norm, the output projection and the soft cap over hidden states `x`.
fn logits<'g, B: Dim, Q: Dim>(
    cfg: &LlamaConfig,
    p: &LlamaParams<'g>,
    x: Tensor<'g, (B, Q, Hidden)>,
) -> Tensor<'g, (B, Q, Vocab)> {
    let x = p.output_norm.forward(x, cfg.rms_norm_eps);
    let logits = match &p.output {
        Some(output) => output.forward(x),
        None => p.token_embd.project_out(x),
    };
    match cfg.final_logit_softcap {
        Some(cap) => (logits * (1.0 / cap) as f32).tanh() * cap as f32,
        None => logits,
    }
}

/// Causal attention over the new tokens alone (the whole sequence at once).
struct Causal(f64);

impl<'g> Attend<'g, Batch> for Causal {
    fn attend(
        &mut self,
        _: usize,
        rope: Rope,
        q: Heads4<'g, Batch, Heads>,
        k: Heads4<'g, Batch, KvHeads>,
        v: Heads4<'g, Batch, KvHeads>,
        window: Option<usize>,
    ) -> Heads4<'g, Batch, Heads> {
        let (q, k) = (q.rope(rope.clone()), k.rope(rope));
        match window {
            Some(w) => q.attention_windowed_grouped(k, v, w, self.0),
            None => q.attention_causal_grouped(k, v, self.0),
        }
    }
}

/// The decoder over a batch of token sequences (positions from 0, each token attending to
/// itself and those before it): the logits of the next token at every position.
#[crate::model(outputs(logits))]
pub fn llama<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &LlamaConfig,
    p: &LlamaParams<'g>,
    input_ids: Tensor<'g, (Batch, Seq), i64>,
) -> Tensor<'g, (Batch, Seq, Vocab)> {
    let _ = g;
    let x = embed(cfg, p, input_ids);
    let x = blocks(cfg, p, x, &mut Causal(cfg.attention_scale), &mut Vec::new());
    logits(cfg, p, x)
}

//! What a Llama-family decoder is made of, read from a GGUF file's metadata or a Hugging
//! Face `config.json`: sizes, and the features that tell the family's variants apart.

mod gguf;
mod hf;

use crate::gguf::GgmlType;

/// The most blocks a config may ask for (the largest Llama models have about a hundred).
pub const MAX_LAYERS: usize = 4096;

/// The most features a head may have (the widest models use 256): bounds the per-pair
/// tables a config makes before anything checks it against memory.
pub const MAX_HEAD_DIM: usize = 1 << 16;

/// The nonlinearity of the gated feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) · up` (SwiGLU: Llama, Qwen).
    Silu,
    /// `gelu_tanh(gate) · up` (GeGLU with GELU's tanh approximation: Gemma).
    GeluTanh,
}

/// Local attention: the layers that see only the last `size` positions.
#[derive(Clone, Debug, PartialEq)]
pub struct SlidingWindow {
    /// Positions a local layer's query sees, its own included.
    pub size: usize,
    /// Per block: `true` for a local (windowed) layer, `false` for a global one.
    pub local: Vec<bool>,
    /// The rotary frequency base of local layers (Gemma 3 gives them their own; the others
    /// share the global base).
    pub rope_base: f64,
}

/// The sizes and constants of a Llama-family decoder, and the features that make it
/// Llama, Qwen2, Qwen3 or Gemma 3.
///
/// ```
/// use rlx::models::llama::{Activation, LlamaConfig};
/// let config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
/// assert_eq!(config.head_dim, 16);
/// assert_eq!(config.activation, Activation::Silu);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Decoder blocks.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (a divisor of `num_heads`).
    pub num_kv_heads: usize,
    /// Features per head.
    pub head_dim: usize,
    /// Width of the feed-forward block.
    pub intermediate_size: usize,
    /// Token vocabulary.
    pub vocab_size: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Rotary frequency base (of global layers).
    pub rope_base: f64,
    /// Features of each head the rotation applies to (even, at most `head_dim`).
    pub rope_dims: usize,
    /// Rotate adjacent feature pairs instead of the two halves of each head. llama.cpp's
    /// converter permutes the query and key rows of Llama models into this layout; Hugging
    /// Face checkpoints and GGUF files of the other architectures keep the halves.
    pub rope_traditional: bool,
    /// Positions are multiplied by this in global layers before rotating: 1 / the factor
    /// of linear RoPE scaling, 1 without scaling.
    pub rope_scale: f64,
    /// The frequency of each rotated pair in global layers (radians per position), when
    /// scaling sets them one by one (Llama 3's and YaRN's long-context rotations); `None`:
    /// `rope_base`'s.
    pub rope_freqs: Option<std::sync::Arc<[f64]>>,
    /// The longest context the model was trained for.
    pub context_length: usize,
    /// The query, key and value projections add a bias (Qwen2).
    pub qkv_bias: bool,
    /// Queries and keys are RMS-normalized per head before rotating (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// The output projection is the embedding table (no separate `output.weight`).
    pub tied_output: bool,
    /// The feed-forward block's nonlinearity.
    pub activation: Activation,
    /// Token vectors are multiplied by this (Gemma: √hidden; 1 elsewhere).
    pub embedding_scale: f64,
    /// The attention and feed-forward outputs are RMS-normalized before the residual
    /// addition too (Gemma's `post_attention_norm` and `post_ffw_norm`).
    pub sandwich_norms: bool,
    /// Attention scores are multiplied by this (1/√`head_dim`, or Gemma's
    /// 1/√`query_pre_attn_scalar`).
    pub attention_scale: f64,
    /// Local layers, if the model has any.
    pub sliding_window: Option<SlidingWindow>,
    /// Logits become `cap · tanh(logits / cap)` (Gemma's final soft-capping), if set.
    pub final_logit_softcap: Option<f64>,
    /// Projection weights kept in a GGUF block format (checkpoint name and format), read in
    /// place by [`block_matmul`](crate::ir::BlockMatMul); the others are float32. Empty
    /// unless [`LlamaConfig::keep_gguf_blocks`] fills it.
    pub block_formats: Vec<(String, GgmlType)>,
    /// How products with weights kept in blocks take their activations (exact float32, or
    /// int8 per block as llama.cpp decodes; see
    /// [`ActivationPrecision`](crate::ir::ActivationPrecision)).
    pub block_activations: crate::ir::ActivationPrecision,
    /// How the key/value caches of a decoding step hold their rows.
    pub kv_cache: KvCacheFormat,
    /// Low-rank adapters on the blocks' projections, if the model has room for them
    /// (see [`LoraConfig`](super::LoraConfig)).
    pub lora: Option<super::LoraConfig>,
    /// A mixture of experts in place of every block's feed-forward (Qwen2-MoE, Qwen3-MoE,
    /// Mixtral); `None` for a dense model.
    pub mixture: Option<Mixture>,
}

/// The most experts a mixture may have.
pub const MAX_EXPERTS: usize = 4096;

/// A mixture-of-experts feed-forward: a router picks `experts_per_token` of `experts`
/// gated feed-forward experts for each token (see [`crate::nn::route`]), optionally beside
/// a shared expert every token goes through.
///
/// ```
/// use rlx::models::llama::{LlamaConfig, Mixture};
/// let mut config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
/// config.mixture = Some(Mixture::new(8, 2, 32));
/// assert!(rlx::models::llama::Llama::manifest(&config)?.get("blk.0.ffn_up_exps.weight").is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Mixture {
    /// Experts per block.
    pub experts: usize,
    /// Experts each token goes through.
    pub experts_per_token: usize,
    /// The hidden width of each expert.
    pub expert_intermediate_size: usize,
    /// Whether a token's expert weights are divided by their sum (Mixtral, usually
    /// Qwen3-MoE) or kept as the router's probabilities (Qwen2-MoE).
    pub normalize_weights: bool,
    /// The hidden width of the expert every token goes through, its output scaled by a
    /// sigmoid gate of its own (Qwen2-MoE); `None` without one.
    pub shared_expert_intermediate_size: Option<usize>,
    /// The weight of the load-balancing loss ([`crate::nn::load_balancing_loss`]) in
    /// [`llama_loss`](super::llama_loss); 0 leaves it out (transformers adds it only with
    /// `output_router_logits`).
    pub balance_loss_weight: f64,
}

impl Mixture {
    /// `experts` experts of width `expert_intermediate_size`, `experts_per_token` per token,
    /// weights renormalized, no shared expert, no balancing loss.
    pub fn new(
        experts: usize,
        experts_per_token: usize,
        expert_intermediate_size: usize,
    ) -> Mixture {
        Mixture {
            experts,
            experts_per_token,
            expert_intermediate_size,
            normalize_weights: true,
            shared_expert_intermediate_size: None,
            balance_loss_weight: 0.0,
        }
    }
}

/// How key/value caches hold the rows of keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvCacheFormat {
    /// Float32, as the model computes them.
    #[default]
    F32,
    /// Each row of a head (`head_dim` values) as int8 with one float32 scale (its largest
    /// magnitude over 127, rounded to nearest): a little over a quarter of the memory; the
    /// attention reads the rows scaled back (exactly the stored values).
    Int8,
}

/// Why a config could not be read: the key at fault and what is wrong with it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LlamaConfigError {
    /// A key the model needs is absent.
    #[error("the file has no {key}")]
    Missing {
        /// The metadata key.
        key: String,
    },
    /// A key's value does not describe a model RLX can build.
    #[error("{key}: {reason}")]
    Invalid {
        /// The metadata key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// YaRN's long-context rotation (as transformers and llama.cpp compute it): per pair of
/// `dims` rotated features, base `base`, the frequency divided by `factor` for pairs that
/// turn fewer than `beta_slow` times over the `original` context, kept for those that turn
/// more than `beta_fast` times, and ramped linearly between (the ramp's ends rounded out to
/// whole pairs when `truncate`).
struct Yarn {
    factor: f64,
    original: f64,
    beta_fast: f64,
    beta_slow: f64,
    truncate: bool,
}

impl Yarn {
    fn freqs(&self, base: f64, dims: usize) -> Vec<f64> {
        let d = dims as f64;
        let correction = |rotations: f64| {
            d * (self.original / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
        };
        let (mut low, mut high) = (correction(self.beta_fast), correction(self.beta_slow));
        if self.truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
        if low == high {
            high += 0.001;
        }
        (0..dims / 2)
            .map(|i| {
                let f = base.powf(-2.0 * i as f64 / d);
                let extrapolate = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                f / self.factor * (1.0 - extrapolate) + f * extrapolate
            })
            .collect()
    }

    /// The factor on rotated queries and keys for a context stretched by `scale` and a
    /// multiplier `m`: `0.1 · m · ln(scale) + 1` (1 without stretching).
    fn magnitude(scale: f64, m: f64) -> f64 {
        if scale <= 1.0 {
            1.0
        } else {
            0.1 * m * scale.ln() + 1.0
        }
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> LlamaConfigError {
    LlamaConfigError::Invalid {
        key: key.to_string(),
        reason: reason.into(),
    }
}

impl LlamaConfig {
    /// A plain Llama of the given sizes: heads of `hidden_size / num_heads` features all
    /// rotated in halves with base 10,000, epsilon 1e-5, a 2,048-token context, SwiGLU,
    /// a tied output projection and no extra norms or biases. Change fields to describe
    /// a variant.
    pub fn new(
        hidden_size: usize,
        num_layers: usize,
        num_heads: usize,
        num_kv_heads: usize,
        intermediate_size: usize,
        vocab_size: usize,
    ) -> LlamaConfig {
        let head_dim = hidden_size / num_heads.max(1);
        LlamaConfig {
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size,
            vocab_size,
            rms_norm_eps: 1e-5,
            rope_base: 10_000.0,
            rope_dims: head_dim,
            rope_traditional: false,
            rope_scale: 1.0,
            rope_freqs: None,
            context_length: 2048,
            qkv_bias: false,
            qk_norm: false,
            tied_output: true,
            activation: Activation::Silu,
            embedding_scale: 1.0,
            sandwich_norms: false,
            attention_scale: 1.0 / (head_dim as f64).sqrt(),
            sliding_window: None,
            final_logit_softcap: None,
            block_formats: Vec::new(),
            block_activations: crate::ir::ActivationPrecision::Exact,
            kv_cache: KvCacheFormat::F32,
            lora: None,
            mixture: None,
        }
    }

    /// Checks what every source must satisfy; `prefix` goes before the key names.
    fn check(&self, prefix: &str) -> Result<(), LlamaConfigError> {
        let key = |k: &str| format!("{prefix}{k}");
        if self.num_layers > MAX_LAYERS {
            return Err(invalid(
                &key("block_count"),
                format!("{} blocks are more than {MAX_LAYERS}", self.num_layers),
            ));
        }
        if self.head_dim > MAX_HEAD_DIM {
            return Err(invalid(
                &key("key_length"),
                format!(
                    "{} features a head are more than {MAX_HEAD_DIM}",
                    self.head_dim
                ),
            ));
        }
        for (name, heads) in [
            ("head_count", self.num_heads),
            ("head_count_kv", self.num_kv_heads),
        ] {
            if heads.checked_mul(self.head_dim).is_none() {
                return Err(invalid(
                    &key(name),
                    format!("{heads} heads of {} features overflow", self.head_dim),
                ));
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(invalid(
                &key("head_count_kv"),
                format!(
                    "{} key/value heads do not divide {} query heads",
                    self.num_kv_heads, self.num_heads
                ),
            ));
        }
        if let Some(m) = &self.mixture {
            if m.experts == 0 || m.experts > MAX_EXPERTS {
                return Err(invalid(
                    &key("expert_count"),
                    format!("{} experts is not between 1 and {MAX_EXPERTS}", m.experts),
                ));
            }
            if m.experts_per_token == 0 || m.experts_per_token > m.experts {
                return Err(invalid(
                    &key("expert_used_count"),
                    format!(
                        "{} experts a token is not between 1 and the {} experts",
                        m.experts_per_token, m.experts
                    ),
                ));
            }
            if !m.balance_loss_weight.is_finite() || m.balance_loss_weight < 0.0 {
                return Err(invalid(
                    &key("router_aux_loss_coef"),
                    format!("{} is not a weight of 0 or more", m.balance_loss_weight),
                ));
            }
        }
        if self.rope_dims > self.head_dim || !self.rope_dims.is_multiple_of(2) {
            return Err(invalid(
                &key("rope dimensions"),
                format!(
                    "{} is not an even number of at most {} features",
                    self.rope_dims, self.head_dim
                ),
            ));
        }
        Ok(())
    }

    /// How block `layer` attends: its rotary embedding and its window (`None`: global).
    pub(super) fn layer(&self, layer: usize) -> (crate::typed::Rope, Option<usize>) {
        let mut rope = crate::typed::Rope {
            dims: self.rope_dims,
            base: self.rope_base,
            scale: self.rope_scale,
            traditional: self.rope_traditional,
            freqs: self.rope_freqs.clone(),
        };
        let window = self.sliding_window.as_ref().and_then(|w| {
            let local = w.local.get(layer).copied().unwrap_or(false);
            local.then(|| {
                rope.base = w.rope_base;
                rope.scale = 1.0;
                rope.freqs = None;
                w.size
            })
        });
        (rope, window)
    }
}

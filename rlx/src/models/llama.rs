//! Llama-family decoders (Llama, SmolLM2, Mistral-style configs): token embeddings, then
//! blocks of RMSNorm → grouped-query attention with rotary positions → residual, RMSNorm →
//! SwiGLU feed-forward → residual, a final RMSNorm and the output projection (tied to the
//! embeddings when the file has no `output.weight`).
//!
//! Param names are GGUF's (`blk.0.attn_q.weight`), so a GGUF file loads as it is
//! ([`Compiled::load_gguf`](crate::model::Compiled::load_gguf)). llama.cpp's converter
//! stores the query and key projections with the rows of each head interleaved for its
//! rotary layout (rotating adjacent feature pairs); the model rotates adjacent pairs too, so
//! the weights need no permutation and the attention scores are those of the original
//! model.
//!
//! ```
//! use rlx::models::llama::{Llama, LlamaConfig};
//! let config = LlamaConfig {
//!     hidden_size: 64, num_layers: 2, num_heads: 4, num_kv_heads: 2, head_dim: 16,
//!     intermediate_size: 128, vocab_size: 100, rms_norm_eps: 1e-5, rope_base: 10_000.0,
//!     rope_dims: 16, context_length: 256,
//! };
//! let manifest = Llama::manifest(&config)?;
//! assert_eq!(manifest.get("blk.1.attn_k.weight").unwrap().file_shape(), Some(vec![32, 64]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::Params;
use crate::gguf::{Gguf, MetadataValue};
use crate::nn::{Embedding, Projection, RmsNorm};
use crate::typed::{Axis, Const, Dim, Rope, Scope, Sizes, State, Tensor};

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
    Capacity
);

/// The most blocks a config may ask for (the largest Llama models have about a hundred).
pub const MAX_LAYERS: usize = 4096;

/// The sizes and constants of a Llama-family decoder.
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
    /// Rotary frequency base.
    pub rope_base: f64,
    /// Features of each head the rotation applies to (even, at most `head_dim`).
    pub rope_dims: usize,
    /// The longest context the model was trained for.
    pub context_length: usize,
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

impl LlamaConfig {
    /// Reads the config from a GGUF file's metadata (`general.architecture` must be
    /// `llama`; its keys are `llama.*`).
    pub fn from_gguf(file: &Gguf) -> Result<LlamaConfig, LlamaConfigError> {
        let invalid = |key: &str, reason: String| LlamaConfigError::Invalid {
            key: key.to_string(),
            reason,
        };
        let arch_key = "general.architecture";
        let arch = file.get(arch_key).and_then(MetadataValue::as_str);
        match arch {
            Some("llama") => {}
            Some(other) => {
                return Err(invalid(
                    arch_key,
                    format!("architecture {other:?} is not a Llama-family model RLX builds"),
                ));
            }
            None => {
                return Err(LlamaConfigError::Missing {
                    key: arch_key.to_string(),
                });
            }
        }
        let value = |name: &str| -> Result<Option<&MetadataValue>, LlamaConfigError> {
            Ok(file.get(&format!("llama.{name}")))
        };
        let size = |name: &str, default: Option<usize>| -> Result<usize, LlamaConfigError> {
            let key = format!("llama.{name}");
            match value(name)? {
                None => default.ok_or(LlamaConfigError::Missing { key }),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| invalid(&key, format!("{v:?} is not a positive integer"))),
            }
        };
        let float = |name: &str, default: Option<f64>| -> Result<f64, LlamaConfigError> {
            let key = format!("llama.{name}");
            match value(name)? {
                None => default.ok_or(LlamaConfigError::Missing { key }),
                Some(v) => v
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| invalid(&key, format!("{v:?} is not a positive number"))),
            }
        };
        if let Some(kind) = value("rope.scaling.type")?.and_then(MetadataValue::as_str)
            && kind != "none"
        {
            return Err(invalid(
                "llama.rope.scaling.type",
                format!("rope scaling {kind:?} is not supported yet"),
            ));
        }
        let hidden_size = size("embedding_length", None)?;
        let num_layers = size("block_count", None)?;
        if num_layers > MAX_LAYERS {
            return Err(invalid(
                "llama.block_count",
                format!("{num_layers} blocks are more than {MAX_LAYERS}"),
            ));
        }
        let num_heads = size("attention.head_count", None)?;
        let num_kv_heads = size("attention.head_count_kv", Some(num_heads))?;
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(invalid(
                "llama.attention.head_count_kv",
                format!("{num_kv_heads} key/value heads do not divide {num_heads} query heads"),
            ));
        }
        if !hidden_size.is_multiple_of(num_heads) {
            return Err(invalid(
                "llama.attention.head_count",
                format!("{num_heads} heads do not divide the width {hidden_size}"),
            ));
        }
        let head_dim = size("attention.key_length", Some(hidden_size / num_heads))?;
        let rope_dims = size("rope.dimension_count", Some(head_dim))?;
        if rope_dims > head_dim || !rope_dims.is_multiple_of(2) {
            return Err(invalid(
                "llama.rope.dimension_count",
                format!("{rope_dims} is not an even number of at most {head_dim} features"),
            ));
        }
        let tokens = file
            .get("tokenizer.ggml.tokens")
            .and_then(MetadataValue::as_array)
            .map(|a| a.len());
        Ok(LlamaConfig {
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size: size("feed_forward_length", None)?,
            vocab_size: size("vocab_size", tokens)?,
            rms_norm_eps: float("attention.layer_norm_rms_epsilon", None)?,
            rope_base: float("rope.freq_base", Some(10_000.0))?,
            rope_dims,
            context_length: size("context_length", None)?,
        })
    }
}

impl crate::model::Config for LlamaConfig {
    fn sizes(&self) -> Sizes {
        Sizes::new()
            .with::<Hidden>(self.hidden_size)
            .with::<Heads>(self.num_heads)
            .with::<KvHeads>(self.num_kv_heads)
            .with::<HeadDim>(self.head_dim)
            .with::<QueryWidth>(self.num_heads * self.head_dim)
            .with::<KvWidth>(self.num_kv_heads * self.head_dim)
            .with::<Intermediate>(self.intermediate_size)
            .with::<Vocab>(self.vocab_size)
            .with::<Layers>(self.num_layers)
    }
}

/// `blk.N.*`: one decoder block.
#[derive(Params)]
pub struct LlamaBlock<'g> {
    /// Norm before attention.
    pub attn_norm: RmsNorm<'g, Hidden>,
    /// Query projection.
    pub attn_q: Projection<'g, Hidden, QueryWidth>,
    /// Key projection.
    pub attn_k: Projection<'g, Hidden, KvWidth>,
    /// Value projection.
    pub attn_v: Projection<'g, Hidden, KvWidth>,
    /// Attention output projection.
    pub attn_output: Projection<'g, QueryWidth, Hidden>,
    /// Norm before the feed-forward block.
    pub ffn_norm: RmsNorm<'g, Hidden>,
    /// The gate of SwiGLU.
    pub ffn_gate: Projection<'g, Hidden, Intermediate>,
    /// The up projection.
    pub ffn_up: Projection<'g, Hidden, Intermediate>,
    /// The down projection.
    pub ffn_down: Projection<'g, Intermediate, Hidden>,
}

/// Every weight of a Llama-family decoder whose output projection is the embedding table.
#[derive(Params)]
pub struct LlamaParams<'g> {
    /// Token vectors, also the output projection.
    pub token_embd: Embedding<'g, Vocab, Hidden>,
    /// The blocks.
    #[param(len = Layers)]
    pub blk: Vec<LlamaBlock<'g>>,
    /// The final norm.
    pub output_norm: RmsNorm<'g, Hidden>,
}

/// Hidden states of a batch.
pub type Hiddens<'g> = Tensor<'g, (Batch, Seq, Hidden)>;

/// One block over `x` (`B` sequences of `Seq` new tokens); `offset`, when given, is the
/// position of the first new token (0 otherwise), and `attend` turns the rotated queries,
/// keys and values of the new tokens into the attention's output.
fn block<'g, B: Dim>(
    cfg: &LlamaConfig,
    p: &LlamaBlock<'g>,
    x: Tensor<'g, (B, Seq, Hidden)>,
    offset: Option<Tensor<'g, (), i64>>,
    attend: impl FnOnce(
        Heads4<'g, B, Heads>,
        Heads4<'g, B, KvHeads>,
        Heads4<'g, B, KvHeads>,
    ) -> Heads4<'g, B, Heads>,
) -> Tensor<'g, (B, Seq, Hidden)> {
    let rope = Rope {
        dims: cfg.rope_dims,
        base: cfg.rope_base,
        scale: 1.0,
        traditional: true,
    };
    let h = p.attn_norm.forward(x, cfg.rms_norm_eps);
    let q = p
        .attn_q
        .forward(h)
        .reshape::<(B, Seq, Heads, HeadDim)>()
        .swap_axes::<1, 2>();
    let k = p
        .attn_k
        .forward(h)
        .reshape::<(B, Seq, KvHeads, HeadDim)>()
        .swap_axes::<1, 2>();
    let v = p
        .attn_v
        .forward(h)
        .reshape::<(B, Seq, KvHeads, HeadDim)>()
        .swap_axes::<1, 2>();
    let context = attend(rotate(rope, offset, q), rotate(rope, offset, k), v)
        .swap_axes::<1, 2>()
        .reshape::<(B, Seq, QueryWidth)>();
    let x = x + p.attn_output.forward(context);
    let h = p.ffn_norm.forward(x, cfg.rms_norm_eps);
    let gated = p.ffn_gate.forward(h).silu() * p.ffn_up.forward(h);
    x + p.ffn_down.forward(gated)
}

/// Per-head values of `B` sequences: `(B, N, Seq, HeadDim)` for `N` heads.
type Heads4<'g, B, N> = Tensor<'g, (B, N, Seq, HeadDim)>;

/// Rotary positions from `offset` (0 when absent) on the heads of `t`.
fn rotate<'g, B: Dim, N: Dim>(
    rope: Rope,
    offset: Option<Tensor<'g, (), i64>>,
    t: Heads4<'g, B, N>,
) -> Heads4<'g, B, N> {
    match offset {
        Some(offset) => t.rope_from(rope, offset),
        None => t.rope(rope),
    }
}

fn scale(cfg: &LlamaConfig) -> f64 {
    1.0 / (cfg.head_dim as f64).sqrt()
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
    let mut x = p.token_embd.forward(input_ids);
    for b in &p.blk {
        x = block(cfg, b, x, None, |q, k, v| {
            q.attention_causal_grouped(k, v, scale(cfg))
        });
    }
    p.output_norm
        .forward(x, cfg.rms_norm_eps)
        .project_t(p.token_embd.weight)
}

/// A [`LlamaConfig`] with the capacity of its key/value caches: the most positions (prompt
/// and generated tokens) a sequence can reach.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaCacheConfig {
    /// The model.
    pub model: LlamaConfig,
    /// Positions each cache holds.
    pub capacity: usize,
}

impl crate::model::Config for LlamaCacheConfig {
    fn sizes(&self) -> Sizes {
        self.model.sizes().with::<Capacity>(self.capacity)
    }
}

/// One block's key or value cache: every position of one sequence so far, per key/value
/// head. Named `blk.N.k_cache` and `blk.N.v_cache`.
pub type Cache<'g> = State<'g, (Const<1>, KvHeads, Capacity, HeadDim)>;

/// One step of generation for one sequence: the `Seq` new tokens `input_ids` (the prompt,
/// or one sampled token) at positions `pos..pos + Seq` are appended to every block's
/// caches, attend to everything cached before them and to each other causally, and the
/// logits of the token after position `pos + last` (`last` = `Seq - 1`: the last new
/// token; tokens after `last` are padding, written to the caches and overwritten by the
/// next step before any token reads them) come out. The caches are states: the step runs in a
/// [`Context`](crate::backend::Context) that holds them between steps, so one compiled
/// step serves every position, and a context per sequence serves many sequences.
#[crate::model(outputs(logits), states)]
pub fn llama_step<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &LlamaCacheConfig,
    p: &LlamaParams<'g>,
    input_ids: Tensor<'g, (Const<1>, Seq), i64>,
    pos: Tensor<'g, (), i64>,
    last: Tensor<'g, (), i64>,
) -> Tensor<'g, (Const<1>, Const<1>, Vocab)> {
    let model = &cfg.model;
    // Every new token is in the cache after this step, padding included: the queries are
    // the last `Seq` of the `filled` positions, and causality keeps padding after `last`
    // out of sight of the real tokens.
    let filled = pos + g.full::<(Seq,), i64>(1).sum::<0>();
    let mut x = p.token_embd.forward(input_ids);
    for (i, b) in p.blk.iter().enumerate() {
        let keys: Cache<'g> = g.state(&format!("blk.{i}.k_cache"));
        let values: Cache<'g> = g.state(&format!("blk.{i}.v_cache"));
        x = block(model, b, x, Some(pos), |q, k, v| {
            let k = keys.read().slice_update(Axis::<2>, k, pos);
            let v = values.read().slice_update(Axis::<2>, v, pos);
            keys.write(k);
            values.write(v);
            q.attention_causal_grouped_upto(k, v, filled, scale(model))
        });
    }
    let x: Tensor<'g, (Const<1>, Const<1>, Hidden)> = x.dynamic_slice(Axis::<1>, last);
    p.output_norm
        .forward(x, model.rms_norm_eps)
        .project_t(p.token_embd.weight)
}

/// Why a Llama-family decoder could not be made from a file.
#[derive(Debug, thiserror::Error)]
pub enum LlamaLoadError {
    /// The file's metadata does not describe a model this code builds.
    #[error(transparent)]
    Config(#[from] LlamaConfigError),
    /// The step did not build or compile.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// The weights did not load.
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightsError),
    /// The cache holds no position, or more than the model was trained for.
    #[error("a cache of {capacity} positions: the model takes 1 to {context_length}")]
    Capacity {
        /// Positions asked for.
        capacity: usize,
        /// The model's context length.
        context_length: usize,
    },
}

/// A Llama-family decoder ready to generate: its compiled [`llama_step`] with the weights
/// bound, as a [`Decoder`](crate::generate::Decoder) for
/// [`Generator`](crate::generate::Generator).
pub struct LlamaDecoder {
    step: LlamaStep,
    config: LlamaCacheConfig,
}

impl std::fmt::Debug for LlamaDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaDecoder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl LlamaDecoder {
    /// The model `file` describes, compiled for `backend` with caches of `capacity`
    /// positions, its weights loaded (dequantized to float32).
    pub fn from_gguf<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        let model = LlamaConfig::from_gguf(file)?;
        if capacity == 0 || capacity > model.context_length {
            return Err(LlamaLoadError::Capacity {
                capacity,
                context_length: model.context_length,
            });
        }
        let config = LlamaCacheConfig { model, capacity };
        let step = LlamaStep::compile(backend, &config)?;
        step.load_gguf(file)?;
        Ok(LlamaDecoder { step, config })
    }

    /// The model and cache configuration.
    pub fn config(&self) -> &LlamaCacheConfig {
        &self.config
    }

    /// The compiled step.
    pub fn compiled(&self) -> &LlamaStep {
        &self.step
    }
}

impl crate::generate::Decoder for LlamaDecoder {
    fn vocab_size(&self) -> usize {
        self.config.model.vocab_size
    }

    fn capacity(&self) -> usize {
        self.config.capacity
    }

    fn new_context(&self) -> Result<crate::backend::Context, crate::backend::RunError> {
        self.step.new_context()
    }

    fn step(
        &self,
        context: &mut crate::backend::Context,
        tokens: &[i64],
        pos: usize,
        last: usize,
    ) -> Result<crate::tensor::HostTensor, crate::backend::RunError> {
        use crate::ir::DType;
        use crate::tensor::TensorRef;
        let shape = [1, tokens.len()];
        let ids =
            TensorRef::new(DType::I64, &shape, bytemuck::cast_slice(tokens)).map_err(|e| {
                crate::backend::RunError::Custom {
                    name: "llama".into(),
                    message: e.to_string(),
                }
            })?;
        let (pos, last) = ([pos as i64], [last as i64]);
        fn scalar(v: &[i64; 1]) -> TensorRef<'_> {
            TensorRef {
                dtype: DType::I64,
                shape: &[],
                bytes: bytemuck::cast_slice(v),
            }
        }
        let [logits] = self.step.run_in_outputs(
            context,
            &[
                ("input_ids", ids),
                ("pos", scalar(&pos)),
                ("last", scalar(&last)),
            ],
        )?;
        Ok(logits)
    }
}

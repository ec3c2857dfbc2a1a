//! BERT: token, position and segment embeddings, post-LayerNorm encoder layers, and mean
//! pooling with L2 normalisation on top (the sentence-transformers recipe).
//!
//! Param names are those of Hugging Face's `BertModel` checkpoints
//! (`encoder.layer.0.attention.self.query.weight`, ...), mapped by `#[param]` attributes, so
//! a checkpoint loads without a renaming table. Its sizes come from `config.json`:
//!
//! ```
//! use rlx::models::bert::{Bert, BertConfig};
//!
//! let config = BertConfig::from_json(r#"{
//!     "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
//!     "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 16,
//!     "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"
//! }"#)?;
//! let manifest = Bert::manifest(&config)?;
//! assert_eq!(manifest.get("encoder.layer.1.output.dense.weight").unwrap().file_shape(), Some(vec![32, 64]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

use crate::Params;
use crate::nn::{Embedding, LayerNorm, Linear};
use crate::typed::{Const, Scope, Sizes, Tensor};

crate::dims!(
    /// Sentences in a batch.
    Batch,
    /// Tokens per sentence (after padding).
    Seq
);
crate::config_dims!(
    /// `hidden_size`.
    Hidden,
    /// `num_attention_heads`.
    Heads,
    /// `hidden_size / num_attention_heads`.
    HeadDim,
    /// `intermediate_size`.
    Intermediate,
    /// `vocab_size`.
    Vocab,
    /// `max_position_embeddings`.
    MaxPositions,
    /// `type_vocab_size`.
    TypeVocab,
    /// `num_hidden_layers`.
    Layers
);

/// The most encoder layers a config may ask for (the largest BERT-style models have a few
/// dozen).
pub const MAX_LAYERS: usize = 4096;

/// The activation between a layer's two feed-forward projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `gelu`: the exact, erf form.
    Gelu,
    /// `gelu_new` / `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
}

/// The fields of a Hugging Face BERT `config.json` the model uses.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward block.
    pub intermediate_size: usize,
    /// Token vocabulary.
    pub vocab_size: usize,
    /// Longest sequence the position table covers.
    pub max_position_embeddings: usize,
    /// Segment vocabulary.
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Feed-forward activation.
    pub hidden_act: Activation,
}

/// Why a config could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The JSON is malformed or a field is missing or of the wrong type.
    #[error("invalid BERT config: {0}")]
    Json(String),
    /// The values do not describe a model RLX can build.
    #[error("invalid BERT config: {0}")]
    Invalid(String),
}

#[derive(serde::Deserialize)]
struct RawConfig {
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    vocab_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default)]
    position_embedding_type: Option<String>,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".to_string()
}

impl BertConfig {
    /// Reads a `config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<BertConfig, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        BertConfig::from_json(&text)
    }

    /// Parses the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<BertConfig, ConfigError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| ConfigError::Json(e.to_string()))?;
        let hidden_act = match raw.hidden_act.as_str() {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            other => {
                return Err(ConfigError::Invalid(format!(
                    "hidden_act {other:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh)"
                )));
            }
        };
        if let Some(kind) = raw.position_embedding_type.as_deref()
            && kind != "absolute"
        {
            return Err(ConfigError::Invalid(format!(
                "position_embedding_type {kind:?} is not supported (absolute)"
            )));
        }
        // Each layer is a few dozen graph nodes and a `Vec` entry, built before any weight
        // is sized: a corrupt count must not allocate billions of them. (Weight sizes are
        // bounded where they are allocated, by the backend.)
        if raw.num_hidden_layers > MAX_LAYERS {
            return Err(ConfigError::Invalid(format!(
                "num_hidden_layers {} is more than {MAX_LAYERS}",
                raw.num_hidden_layers
            )));
        }
        if raw.num_attention_heads == 0 || !raw.hidden_size.is_multiple_of(raw.num_attention_heads)
        {
            return Err(ConfigError::Invalid(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                raw.hidden_size, raw.num_attention_heads
            )));
        }
        Ok(BertConfig {
            hidden_size: raw.hidden_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: raw.num_attention_heads,
            intermediate_size: raw.intermediate_size,
            vocab_size: raw.vocab_size,
            max_position_embeddings: raw.max_position_embeddings,
            type_vocab_size: raw.type_vocab_size,
            layer_norm_eps: raw.layer_norm_eps,
            hidden_act,
        })
    }

    /// Features per attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

impl crate::model::Config for BertConfig {
    fn sizes(&self) -> Sizes {
        Sizes::new()
            .with::<Hidden>(self.hidden_size)
            .with::<Heads>(self.num_attention_heads)
            .with::<HeadDim>(self.head_dim())
            .with::<Intermediate>(self.intermediate_size)
            .with::<Vocab>(self.vocab_size)
            .with::<MaxPositions>(self.max_position_embeddings)
            .with::<TypeVocab>(self.type_vocab_size)
            .with::<Layers>(self.num_hidden_layers)
    }
}

/// `embeddings.*`.
#[derive(Params)]
pub struct BertEmbeddings<'g> {
    /// Token vectors.
    pub word_embeddings: Embedding<'g, Vocab, Hidden>,
    /// Position vectors.
    pub position_embeddings: Embedding<'g, MaxPositions, Hidden>,
    /// Segment vectors.
    pub token_type_embeddings: Embedding<'g, TypeVocab, Hidden>,
    /// Norm of their sum.
    #[param(rename = "LayerNorm")]
    pub layer_norm: LayerNorm<'g, Hidden>,
}

/// `attention.self.*`.
#[derive(Params)]
pub struct BertSelfAttention<'g> {
    /// Query projection.
    pub query: Linear<'g, Hidden, Hidden>,
    /// Key projection.
    pub key: Linear<'g, Hidden, Hidden>,
    /// Value projection.
    pub value: Linear<'g, Hidden, Hidden>,
}

/// A projection followed by a residual post-LayerNorm (`attention.output`, `output`).
#[derive(Params)]
pub struct BertResidual<'g, I: crate::typed::Dim> {
    /// The projection back to `Hidden`.
    pub dense: Linear<'g, I, Hidden>,
    /// The norm after the residual sum.
    #[param(rename = "LayerNorm")]
    pub layer_norm: LayerNorm<'g, Hidden>,
}

/// `attention.*`.
#[derive(Params)]
pub struct BertAttention<'g> {
    /// Queries, keys and values.
    #[param(rename = "self")]
    pub self_attention: BertSelfAttention<'g>,
    /// Output projection and norm.
    pub output: BertResidual<'g, Hidden>,
}

/// `intermediate.*`.
#[derive(Params)]
pub struct BertIntermediate<'g> {
    /// The up projection.
    pub dense: Linear<'g, Hidden, Intermediate>,
}

/// `encoder.layer.N.*`.
#[derive(Params)]
pub struct BertLayer<'g> {
    /// Self-attention block.
    pub attention: BertAttention<'g>,
    /// Feed-forward up projection.
    pub intermediate: BertIntermediate<'g>,
    /// Feed-forward down projection and norm.
    pub output: BertResidual<'g, Intermediate>,
}

/// `encoder.*`.
#[derive(Params)]
pub struct BertEncoder<'g> {
    /// The layers, `num_hidden_layers` of them.
    #[param(len = Layers)]
    pub layer: Vec<BertLayer<'g>>,
}

/// Every weight of a `BertModel` checkpoint except the pooler, which sentence embeddings
/// do not use.
#[derive(Params)]
pub struct BertParams<'g> {
    /// Embedding tables.
    pub embeddings: BertEmbeddings<'g>,
    /// Encoder layers.
    pub encoder: BertEncoder<'g>,
}

/// Hidden states of a batch.
pub type Hiddens<'g> = Tensor<'g, (Batch, Seq, Hidden)>;
/// Token ids (or a 0/1 mask) of a batch.
pub type Tokens<'g> = Tensor<'g, (Batch, Seq), i64>;

fn layer<'g>(
    cfg: &BertConfig,
    p: &BertLayer<'g>,
    x: Hiddens<'g>,
    mask: Tensor<'g, (Batch, Seq), bool>,
) -> Hiddens<'g> {
    let heads = |t: Hiddens<'g>| {
        t.reshape::<(Batch, Seq, Heads, HeadDim)>()
            .swap_axes::<1, 2>()
    };
    let a = &p.attention.self_attention;
    let (q, k, v) = (
        heads(a.query.forward(x)),
        heads(a.key.forward(x)),
        heads(a.value.forward(x)),
    );
    let scale = 1.0 / (cfg.head_dim() as f64).sqrt();
    let context = q
        .attention_masked(k, v, mask, scale)
        .swap_axes::<1, 2>()
        .reshape::<(Batch, Seq, Hidden)>();
    let out = &p.attention.output;
    let x = out
        .layer_norm
        .forward(x + out.dense.forward(context), cfg.layer_norm_eps);
    let up = p.intermediate.dense.forward(x);
    let up = match cfg.hidden_act {
        Activation::Gelu => up.gelu(),
        Activation::GeluTanh => up.gelu_tanh(),
    };
    let out = &p.output;
    out.layer_norm
        .forward(x + out.dense.forward(up), cfg.layer_norm_eps)
}

/// The BERT encoder over a right-padded batch, and its sentence embeddings: the hidden
/// states averaged over the real tokens (`attention_mask == 1`), L2-normalised.
///
/// Positions count from 0 in every row. Padded positions attend nowhere and are attended
/// by no one, so the real rows match running each sentence alone.
#[crate::model(outputs(last_hidden_state, embeddings))]
pub fn bert<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &BertConfig,
    p: &BertParams<'g>,
    input_ids: Tokens<'g>,
    attention_mask: Tokens<'g>,
    token_type_ids: Tokens<'g>,
) -> (Hiddens<'g>, Tensor<'g, (Batch, Hidden)>) {
    let e = &p.embeddings;
    let positions = g.full::<(Batch, Seq), i64>(1).cumsum::<1>() - 1;
    let x = e.word_embeddings.forward(input_ids)
        + e.position_embeddings.forward(positions)
        + e.token_type_embeddings.forward(token_type_ids);
    let mut x = e.layer_norm.forward(x, cfg.layer_norm_eps);
    let keep = attention_mask.cast::<bool>();
    for l in &p.encoder.layer {
        x = layer(cfg, l, x, keep);
    }
    (x, mean_pool_normalized(x, attention_mask))
}

/// Mean of the rows where `mask` is 1, divided by its L2 norm (at least 1e-12).
fn mean_pool_normalized<'g>(x: Hiddens<'g>, mask: Tokens<'g>) -> Tensor<'g, (Batch, Hidden)> {
    let m = mask.cast::<f32>();
    let weights = m.reshape::<(Batch, Const<1>, Seq)>();
    let sum = weights.matmul(x).reshape::<(Batch, Hidden)>();
    let count = m.sum::<1>().clamp_min(1e-9).reshape::<(Batch, Const<1>)>();
    let mean = sum / count.broadcast::<(Batch, Hidden)>();
    let norm = (mean * mean).sum::<1>().sqrt().clamp_min(1e-12);
    mean / norm
        .reshape::<(Batch, Const<1>)>()
        .broadcast::<(Batch, Hidden)>()
}

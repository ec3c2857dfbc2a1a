//! What a Llama-family decoder is made of, read from a GGUF file's metadata or a Hugging
//! Face `config.json`: sizes, and the features that tell the family's variants apart.

use serde_json::Value;

use crate::gguf::{GgmlType, Gguf, MetadataArray, MetadataValue};

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

fn invalid(key: &str, reason: impl Into<String>) -> LlamaConfigError {
    LlamaConfigError::Invalid {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// The projections of a block, by their GGUF names (`blk.N.{name}.weight`).
const PROJECTIONS: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// The per-pair rotary frequencies of a GGUF file that has `rope_freqs.weight` (llama.cpp
/// stores Llama 3's long-context scaling as one divisor per rotated pair).
fn gguf_rope_freqs(
    file: &Gguf,
    base: f64,
    dims: usize,
) -> Result<Option<std::sync::Arc<[f64]>>, LlamaConfigError> {
    const NAME: &str = "rope_freqs.weight";
    if file.tensor(NAME).is_err() {
        return Ok(None);
    }
    let factors = file
        .tensor_f32(NAME)
        .map_err(|e| invalid(NAME, e.to_string()))?
        .to_f64_vec();
    if factors.len() != dims / 2 {
        return Err(invalid(
            NAME,
            format!("{} factors for {} rotated pairs", factors.len(), dims / 2),
        ));
    }
    if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(invalid(
            NAME,
            format!("factor {bad} is not a positive number"),
        ));
    }
    Ok(Some(
        factors
            .iter()
            .enumerate()
            .map(|(i, factor)| base.powf(-2.0 * i as f64 / dims as f64) / factor)
            .collect(),
    ))
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
        }
    }

    /// Keeps the projection weights `file` stores in a format
    /// [`block_matmul`](crate::ir::BlockMatMul) multiplies in place (`Q8_0`, `Q4_0`, `Q4_1`)
    /// in that format: a step then reads a quarter to an eighth of the bytes of float32
    /// weights. The embedding table and the norms stay float32 (dequantized at load).
    ///
    /// ```no_run
    /// use rlx::models::llama::LlamaConfig;
    /// let file = rlx::gguf::Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let mut config = LlamaConfig::from_gguf(&file)?;
    /// config.keep_gguf_blocks(&file);
    /// assert!(!config.block_formats.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keep_gguf_blocks(&mut self, file: &Gguf) {
        let projection = |name: &str| {
            name == "output.weight"
                || name
                    .strip_prefix("blk.")
                    .and_then(|rest| rest.split_once('.'))
                    .and_then(|(_, rest)| rest.strip_suffix(".weight"))
                    .is_some_and(|p| PROJECTIONS.contains(&p))
        };
        self.block_formats = file
            .tensors()
            .iter()
            .filter(|t| projection(&t.name) && crate::ir::block_matmul_supports(t.kind))
            .map(|t| (t.name.clone(), t.kind))
            .collect();
    }

    /// Reads the config from a GGUF file's metadata. `general.architecture` names the
    /// variant — `llama`, `qwen2`, `qwen3` or `gemma3` — and prefixes its keys
    /// (`llama.block_count`); the output projection is tied unless the file has
    /// `output.weight`, and Llama 3's per-pair rotary factors come from `rope_freqs.weight`.
    /// Gemma 3 follows llama.cpp where its files are silent: every sixth layer global unless
    /// `attention.sliding_window_pattern` says otherwise, local layers rotating with base
    /// 10,000 (or `rope.freq_base_swa`), and queries scaled by the head width but for the
    /// 62-block (27B) model, scaled by `embedding_length / head_count`.
    pub fn from_gguf(file: &Gguf) -> Result<LlamaConfig, LlamaConfigError> {
        let arch_key = "general.architecture";
        let arch = match file.get(arch_key).and_then(MetadataValue::as_str) {
            Some(a @ ("llama" | "qwen2" | "qwen3" | "gemma3")) => a,
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
        };
        let value = |name: &str| file.get(&format!("{arch}.{name}"));
        let size = |name: &str, default: Option<usize>| -> Result<usize, LlamaConfigError> {
            let key = format!("{arch}.{name}");
            match value(name) {
                None => default.ok_or(LlamaConfigError::Missing { key }),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| invalid(&key, format!("{v:?} is not a positive integer"))),
            }
        };
        let float = |name: &str, default: Option<f64>| -> Result<f64, LlamaConfigError> {
            let key = format!("{arch}.{name}");
            match value(name) {
                None => default.ok_or(LlamaConfigError::Missing { key }),
                Some(v) => v
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| invalid(&key, format!("{v:?} is not a positive number"))),
            }
        };
        let mut rope_scale = 1.0;
        match value("rope.scaling.type").and_then(MetadataValue::as_str) {
            None | Some("none") => {}
            Some("linear") => rope_scale = 1.0 / float("rope.scaling.factor", None)?,
            Some(kind) => {
                return Err(invalid(
                    &format!("{arch}.rope.scaling.type"),
                    format!("rope scaling {kind:?} is not supported yet"),
                ));
            }
        }
        let hidden_size = size("embedding_length", None)?;
        let num_heads = size("attention.head_count", None)?;
        let head_dim = match value("attention.key_length") {
            Some(_) => size("attention.key_length", None)?,
            None if hidden_size.is_multiple_of(num_heads) => hidden_size / num_heads,
            None => {
                return Err(invalid(
                    &format!("{arch}.attention.head_count"),
                    format!("{num_heads} heads do not divide the width {hidden_size}"),
                ));
            }
        };
        let tokens = file
            .get("tokenizer.ggml.tokens")
            .and_then(MetadataValue::as_array)
            .map(|a| a.len());
        let mut config = LlamaConfig::new(
            hidden_size,
            size("block_count", None)?,
            num_heads,
            size("attention.head_count_kv", Some(num_heads))?,
            size("feed_forward_length", None)?,
            size("vocab_size", tokens)?,
        );
        let gemma = arch == "gemma3";
        config.head_dim = head_dim;
        config.rope_dims = size("rope.dimension_count", Some(head_dim))?;
        config.rms_norm_eps = float("attention.layer_norm_rms_epsilon", gemma.then_some(1e-6))?;
        config.rope_base = float(
            "rope.freq_base",
            Some(if gemma { 1_000_000.0 } else { 10_000.0 }),
        )?;
        config.rope_scale = rope_scale;
        config.rope_freqs = gguf_rope_freqs(file, config.rope_base, config.rope_dims)?;
        config.context_length = size("context_length", None)?;
        config.attention_scale = 1.0 / (head_dim as f64).sqrt();
        config.tied_output = file.tensor("output.weight").is_err();
        // llama.cpp permutes only Llama's query and key rows into the adjacent-pair layout.
        config.rope_traditional = arch == "llama";
        config.qkv_bias = arch == "qwen2";
        config.qk_norm = matches!(arch, "qwen3" | "gemma3");
        if value("final_logit_softcapping").is_some() {
            config.final_logit_softcap = Some(float("final_logit_softcapping", None)?);
        }
        if gemma {
            config.activation = Activation::GeluTanh;
            config.embedding_scale = (hidden_size as f64).sqrt();
            config.sandwich_norms = true;
            // llama.cpp's rule: the 27B model (62 blocks) scales queries by the width per
            // head, the others by the head width (transformers' `query_pre_attn_scalar`).
            let scalar = if config.num_layers == 62 {
                (hidden_size / num_heads) as f64
            } else {
                head_dim as f64
            };
            config.attention_scale = 1.0 / scalar.sqrt();
            let key = format!("{arch}.attention.sliding_window_pattern");
            let local: Vec<bool> = match value("attention.sliding_window_pattern") {
                Some(MetadataValue::Array(MetadataArray::Bool(v)))
                    if v.len() == config.num_layers =>
                {
                    v.clone()
                }
                Some(v @ MetadataValue::Array(_)) => {
                    return Err(invalid(&key, format!("{v:?} is not one bool per block")));
                }
                Some(_) => {
                    let period = size("attention.sliding_window_pattern", None)?;
                    (0..config.num_layers)
                        .map(|i| (i + 1) % period != 0)
                        .collect()
                }
                None => (0..config.num_layers).map(|i| (i + 1) % 6 != 0).collect(),
            };
            if local.contains(&true) {
                config.sliding_window = Some(SlidingWindow {
                    size: size("attention.sliding_window", None)?,
                    local,
                    rope_base: float("rope.freq_base_swa", Some(10_000.0))?,
                });
            }
        }
        config.check(&format!("{arch}."))?;
        Ok(config)
    }

    /// Parses a Hugging Face `config.json` of a `LlamaForCausalLM`, `Qwen2ForCausalLM`,
    /// `Qwen3ForCausalLM` or `Gemma3ForCausalLM` (`model_type` `llama`, `qwen2`, `qwen3`,
    /// `gemma3_text`, or `gemma3` with the decoder under `text_config`). Keys absent take
    /// transformers' defaults; a key RLX cannot build (a bias on the output projection,
    /// RoPE scaling other than linear) is an error naming it.
    ///
    /// ```
    /// use rlx::models::llama::LlamaConfig;
    /// let config = LlamaConfig::from_hf_json(r#"{
    ///     "model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
    ///     "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
    ///     "vocab_size": 100, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    ///     "max_position_embeddings": 512, "tie_word_embeddings": true
    /// }"#)?;
    /// assert!(config.qkv_bias && config.tied_output);
    /// assert!(LlamaConfig::from_hf_json(r#"{"model_type": "bert"}"#).is_err());
    /// # Ok::<(), rlx::models::llama::LlamaConfigError>(())
    /// ```
    pub fn from_hf_json(text: &str) -> Result<LlamaConfig, LlamaConfigError> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| invalid("config.json", format!("not JSON: {e}")))?;
        let (json, prefix) = match root.get("model_type").and_then(Value::as_str) {
            Some("gemma3") => match root.get("text_config") {
                Some(t) if t.is_object() => (t, "text_config."),
                _ => return Err(missing("text_config")),
            },
            _ => (&root, ""),
        };
        let model_type = match json.get("model_type").and_then(Value::as_str) {
            Some(t @ ("llama" | "qwen2" | "qwen3" | "gemma3_text")) => t,
            Some(other) => {
                return Err(invalid(
                    &format!("{prefix}model_type"),
                    format!("{other:?} is not a Llama-family model RLX builds"),
                ));
            }
            None if prefix.is_empty() => return Err(missing("model_type")),
            None => "gemma3_text",
        };
        let gemma = model_type == "gemma3_text";
        let hf = HfKeys { json, prefix };
        let hidden_size = hf.size("hidden_size", None)?;
        let num_heads = hf.size("num_attention_heads", None)?;
        let mut config = LlamaConfig::new(
            hidden_size,
            hf.size("num_hidden_layers", None)?,
            num_heads,
            hf.size("num_key_value_heads", Some(num_heads))?,
            hf.size("intermediate_size", None)?,
            hf.size("vocab_size", None)?,
        );
        let head_dim = match hf.size("head_dim", None) {
            Ok(d) => d,
            Err(LlamaConfigError::Missing { .. }) if hidden_size.is_multiple_of(num_heads) => {
                hidden_size / num_heads
            }
            Err(LlamaConfigError::Missing { .. }) => {
                return Err(hf.invalid(
                    "num_attention_heads",
                    format!("{num_heads} heads do not divide the width {hidden_size}"),
                ));
            }
            Err(e) => return Err(e),
        };
        if head_dim > MAX_HEAD_DIM {
            return Err(hf.invalid(
                "head_dim",
                format!("{head_dim} features a head are more than {MAX_HEAD_DIM}"),
            ));
        }
        config.head_dim = head_dim;
        config.rope_dims = head_dim;
        if let Some(f) = hf.float_opt("partial_rotary_factor")?
            && f != 1.0
        {
            return Err(hf.invalid("partial_rotary_factor", "partial rotation is not supported"));
        }
        config.rms_norm_eps = hf.float("rms_norm_eps", Some(if gemma { 1e-6 } else { 1e-5 }))?;
        config.context_length = hf.size("max_position_embeddings", Some(2048))?;
        config.tied_output = hf.flag("tie_word_embeddings", gemma)?;
        config.qkv_bias = model_type == "qwen2";
        config.qk_norm = matches!(model_type, "qwen3" | "gemma3_text");
        for (key, what) in [
            ("attention_bias", "biases on every attention projection"),
            ("mlp_bias", "biases in the feed-forward block"),
        ] {
            if model_type != "qwen2" && hf.flag(key, false)? {
                return Err(hf.invalid(key, format!("{what} are not supported")));
            }
        }
        if let Some(cap) = hf.float_opt("attn_logit_softcapping")? {
            return Err(hf.invalid(
                "attn_logit_softcapping",
                format!("soft-capping attention scores ({cap}) is not supported"),
            ));
        }
        config.final_logit_softcap = hf.float_opt("final_logit_softcapping")?;
        let act_key = if gemma {
            "hidden_activation"
        } else {
            "hidden_act"
        };
        config.activation = match hf.get(act_key).and_then(Value::as_str) {
            None if gemma => Activation::GeluTanh,
            None | Some("silu") => Activation::Silu,
            Some("gelu_pytorch_tanh") => Activation::GeluTanh,
            Some(other) => {
                return Err(hf.invalid(act_key, format!("activation {other:?} is not supported")));
            }
        };

        // Rotary settings: transformers 5 writes `rope_parameters` (per layer type for
        // Gemma 3); earlier files `rope_theta` and `rope_scaling`.
        let (global_key, local_key) = match hf.get("rope_parameters") {
            Some(p) if gemma && p.get("full_attention").is_some() => (
                "rope_parameters.full_attention",
                Some("rope_parameters.sliding_attention"),
            ),
            Some(_) => ("rope_parameters", None),
            None => ("rope_scaling", None),
        };
        let default_base = if gemma { 1_000_000.0 } else { 10_000.0 };
        let context = config.context_length;
        let global = hf.rope(global_key, "rope_theta", default_base, head_dim, context)?;
        config.rope_base = global.base;
        config.rope_scale = global.scale;
        config.rope_freqs = global.freqs.map(Into::into);
        let local_base = match local_key {
            Some(key) => {
                hf.rope(key, "rope_local_base_freq", 10_000.0, head_dim, context)?
                    .base
            }
            None if gemma => hf.float("rope_local_base_freq", Some(10_000.0))?,
            None => global.base,
        };

        if gemma {
            config.embedding_scale = (hidden_size as f64).sqrt();
            config.sandwich_norms = true;
            let scalar = hf.float("query_pre_attn_scalar", Some(head_dim as f64))?;
            config.attention_scale = 1.0 / scalar.sqrt();
        } else {
            config.attention_scale = 1.0 / (head_dim as f64).sqrt();
        }
        // YaRN scales the rotated queries and keys by its attention factor: the scores by
        // its square (every feature is rotated: partial rotation is refused above).
        config.attention_scale *= global.attention_factor * global.attention_factor;
        config.sliding_window = hf.sliding_window(model_type, config.num_layers, local_base)?;
        config.check(prefix)?;
        Ok(config)
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

fn missing(key: &str) -> LlamaConfigError {
    LlamaConfigError::Missing {
        key: key.to_string(),
    }
}

/// A rotary block of a `config.json`: what [`HfKeys::rope`] reads.
struct Rotary {
    base: f64,
    /// Position multiplier (linear scaling).
    scale: f64,
    /// Per-pair frequencies (Llama 3, YaRN).
    freqs: Option<Vec<f64>>,
    /// YaRN's factor on the rotated queries and keys.
    attention_factor: f64,
}

/// The keys of one `config.json` object, `prefix` naming it in errors.
struct HfKeys<'a> {
    json: &'a Value,
    prefix: &'a str,
}

impl HfKeys<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    fn invalid(&self, key: &str, reason: impl Into<String>) -> LlamaConfigError {
        invalid(&format!("{}{key}", self.prefix), reason)
    }

    fn size(&self, key: &str, default: Option<usize>) -> Result<usize, LlamaConfigError> {
        match self.get(key) {
            None => default.ok_or_else(|| missing(&format!("{}{key}", self.prefix))),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| self.invalid(key, format!("{v} is not a positive integer"))),
        }
    }

    fn float_opt(&self, key: &str) -> Result<Option<f64>, LlamaConfigError> {
        self.get(key)
            .map(|v| {
                v.as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| self.invalid(key, format!("{v} is not a positive number")))
            })
            .transpose()
    }

    fn float(&self, key: &str, default: Option<f64>) -> Result<f64, LlamaConfigError> {
        self.float_opt(key)?
            .or(default)
            .ok_or_else(|| missing(&format!("{}{key}", self.prefix)))
    }

    fn flag(&self, key: &str, default: bool) -> Result<bool, LlamaConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.invalid(key, format!("{v} is not true or false"))),
        }
    }

    /// The rotation a rotary block at `path` (dotted, inside this object) describes for
    /// heads of `dims` features: its `rope_theta` (else the top-level `theta_key`, else
    /// `default_base`) and its scaling — linear, Llama 3's or YaRN's (with the model's
    /// `context` as the original length where the block gives none); another `rope_type`
    /// is an error naming it.
    fn rope(
        &self,
        path: &str,
        theta_key: &str,
        default_base: f64,
        dims: usize,
        context: usize,
    ) -> Result<Rotary, LlamaConfigError> {
        let block = path
            .split('.')
            .try_fold(self.json, |v, k| v.get(k))
            .filter(|v| !v.is_null());
        let inner = HfKeys {
            json: block.unwrap_or(&Value::Null),
            prefix: &format!("{}{path}.", self.prefix),
        };
        let base = match inner.float_opt("rope_theta")? {
            Some(b) => b,
            None => self.float(theta_key, Some(default_base))?,
        };
        let kind = inner
            .get("rope_type")
            .or_else(|| inner.get("type"))
            .and_then(Value::as_str);
        let mut rotary = Rotary {
            base,
            scale: 1.0,
            freqs: None,
            attention_factor: 1.0,
        };
        // HF's frequencies before scaling: base^(−2i/dims) (`dims` is at most MAX_HEAD_DIM).
        let plain = || (0..dims / 2).map(|i| base.powf(-2.0 * i as f64 / dims as f64));
        let original = || inner.float("original_max_position_embeddings", Some(context as f64));
        match kind {
            None | Some("default") => {}
            Some("linear") => rotary.scale = 1.0 / inner.float("factor", None)?,
            Some("llama3") => {
                let factor = inner.float("factor", None)?;
                let low = inner.float("low_freq_factor", None)?;
                let high = inner.float("high_freq_factor", None)?;
                if high <= low {
                    return Err(inner.invalid(
                        "high_freq_factor",
                        format!("{high} is not above low_freq_factor {low}"),
                    ));
                }
                let old = original()?;
                let (low_wavelen, high_wavelen) = (old / low, old / high);
                let freqs = plain().map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low) / (high - low);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                });
                rotary.freqs = Some(freqs.collect());
            }
            Some("yarn") => {
                let factor = inner.float("factor", None)?;
                let mscale = |scale: f64, m: f64| {
                    if scale <= 1.0 {
                        1.0
                    } else {
                        0.1 * m * scale.ln() + 1.0
                    }
                };
                rotary.attention_factor = match inner.float_opt("attention_factor")? {
                    Some(a) => a,
                    None => match (
                        inner.float_opt("mscale")?,
                        inner.float_opt("mscale_all_dim")?,
                    ) {
                        (Some(m), Some(all)) => mscale(factor, m) / mscale(factor, all),
                        _ => mscale(factor, 1.0),
                    },
                };
                let fast = inner.float_opt("beta_fast")?.unwrap_or(32.0);
                let slow = inner.float_opt("beta_slow")?.unwrap_or(1.0);
                let old = original()?;
                let truncate = inner.flag("truncate", true)?;
                let d = dims as f64;
                let correction = |rotations: f64| {
                    d * (old / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln())
                };
                let (mut low, mut high) = (correction(fast), correction(slow));
                if truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
                if low == high {
                    high += 0.001;
                }
                let freqs = plain().enumerate().map(|(i, f)| {
                    let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    let extrapolate = 1.0 - ramp;
                    f / factor * (1.0 - extrapolate) + f * extrapolate
                });
                rotary.freqs = Some(freqs.collect());
            }
            Some(other) => {
                return Err(inner.invalid(
                    "rope_type",
                    format!("rope scaling {other:?} is not supported yet"),
                ));
            }
        }
        Ok(rotary)
    }

    /// The local layers: `layer_types` when the file lists them, else the family's rule
    /// (Gemma 3: every `sliding_window_pattern`-th layer global; Qwen with
    /// `use_sliding_window`: layers from `max_window_layers` on local).
    fn sliding_window(
        &self,
        model_type: &str,
        layers: usize,
        rope_base: f64,
    ) -> Result<Option<SlidingWindow>, LlamaConfigError> {
        let gemma = model_type == "gemma3_text";
        let local: Vec<bool> = match self.get("layer_types") {
            Some(Value::Array(kinds)) => {
                if kinds.len() != layers {
                    return Err(self.invalid(
                        "layer_types",
                        format!("{} entries for {layers} layers", kinds.len()),
                    ));
                }
                kinds
                    .iter()
                    .map(|k| match k.as_str() {
                        Some("sliding_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        _ => Err(self.invalid("layer_types", format!("unknown layer type {k}"))),
                    })
                    .collect::<Result<_, _>>()?
            }
            Some(other) => {
                return Err(self.invalid("layer_types", format!("{other} is not a list")));
            }
            None if gemma => {
                let pattern = self.size("sliding_window_pattern", Some(6))?;
                (0..layers).map(|i| (i + 1) % pattern != 0).collect()
            }
            None if self.flag("use_sliding_window", false)? => {
                let from = self.size("max_window_layers", Some(layers))?;
                (0..layers).map(|i| i >= from).collect()
            }
            None => return Ok(None),
        };
        if !local.contains(&true) {
            return Ok(None);
        }
        if !gemma && model_type != "qwen2" && model_type != "qwen3" {
            return Err(self.invalid(
                "layer_types",
                format!("sliding-window layers in a {model_type} model are not supported"),
            ));
        }
        let size = self.size("sliding_window", if gemma { Some(4096) } else { None })?;
        Ok(Some(SlidingWindow {
            size,
            local,
            rope_base,
        }))
    }
}

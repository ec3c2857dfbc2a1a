//! A Llama-family config from a GGUF file: its metadata, Llama 3's `rope_freqs.weight`,
//! and which projections stay in their blocks.

use super::{Activation, LlamaConfig, LlamaConfigError, SlidingWindow, Yarn, invalid};
use crate::gguf::{GgmlType, Gguf, MetadataArray, MetadataValue};

/// The projections of a block, by their GGUF names (`blk.N.{name}.weight`): attention's,
/// the dense feed-forward's, a mixture's shared expert's.
const PROJECTIONS: [&str; 10] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "ffn_gate_shexp",
    "ffn_up_shexp",
    "ffn_down_shexp",
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
    /// Keeps the projection weights and the token table that `file` stores in a format
    /// [`block_matmul`](crate::ir::BlockMatMul) multiplies in place (`Q8_0`, `Q4_*`, `Q5_*`)
    /// in that format: a step then reads a quarter to an eighth of the bytes of float32
    /// weights (the table's rows are dequantized as they are looked up, and a tied output
    /// projection multiplies its blocks). The norms stay float32.
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
                || name == "token_embd.weight"
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

    /// Keeps every projection weight and the token table in `format` (`Q8_0`, `Q4_0`,
    /// `Q4_1`, `Q5_0` or `Q5_1`; see [`crate::gguf::quantize`]) where their rows are whole
    /// blocks, quantized from the checkpoint's floats as they load — a safetensors model, or
    /// the float tensors of a GGUF file — beside the formats
    /// [`keep_gguf_blocks`](Self::keep_gguf_blocks) kept already.
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// use rlx::models::llama::LlamaConfig;
    /// let mut config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
    /// config.quantize_projections(GgmlType::Q8_0)?;
    /// // Seven projections in each of 2 blocks, and the token table (the output is tied).
    /// assert_eq!(config.block_formats.len(), 15);
    /// assert!(config.quantize_projections(GgmlType::Q4K).is_err());
    /// # Ok::<(), rlx::gguf::QuantizeError>(())
    /// ```
    pub fn quantize_projections(
        &mut self,
        format: GgmlType,
    ) -> Result<(), crate::gguf::QuantizeError> {
        if !crate::gguf::quantizes(format) {
            return Err(crate::gguf::QuantizeError::Unsupported(format));
        }
        let hidden = self.hidden_size;
        let mut weights = vec![("token_embd.weight".to_string(), hidden)];
        if !self.tied_output {
            weights.push(("output.weight".to_string(), hidden));
        }
        // The feed-forward projections the model has: dense, or a mixture's shared expert
        // (the experts and the router stay float).
        let (feed_forward, down_width) = match &self.mixture {
            None => (&PROJECTIONS[4..7], self.intermediate_size),
            Some(m) => match m.shared_expert_intermediate_size {
                Some(width) => (&PROJECTIONS[7..], width),
                None => (&PROJECTIONS[..0], 0),
            },
        };
        for layer in 0..self.num_layers {
            for projection in PROJECTIONS[..4].iter().chain(feed_forward) {
                let width = match *projection {
                    "attn_output" => self.num_heads * self.head_dim,
                    "ffn_down" | "ffn_down_shexp" => down_width,
                    _ => hidden,
                };
                weights.push((format!("blk.{layer}.{projection}.weight"), width));
            }
        }
        for (name, width) in weights {
            let kept = self.block_formats.iter().any(|(n, _)| *n == name);
            if !kept && width.is_multiple_of(format.block_values()) {
                self.block_formats.push((name, format));
            }
        }
        Ok(())
    }

    /// Reads the config from a GGUF file's metadata. `general.architecture` names the
    /// variant — `llama`, `qwen2`, `qwen3`, `gemma3`, `qwen2moe` or `qwen3moe` — and
    /// prefixes its keys (`llama.block_count`); `expert_count` makes it a mixture
    /// (`expert_used_count`, `expert_feed_forward_length`,
    /// `expert_shared_feed_forward_length`; weights renormalized but for `qwen2moe`, as
    /// llama.cpp does, unless `expert_weights_norm` says); the output projection is tied unless the file has
    /// `output.weight`, and Llama 3's per-pair rotary factors come from `rope_freqs.weight`.
    /// RoPE scaling (`rope.scaling.type`) is linear or YaRN (`factor`,
    /// `original_context_length`, and optionally `attn_factor`, `yarn_beta_fast`,
    /// `yarn_beta_slow`), computed as llama.cpp computes it.
    /// Gemma 3 follows llama.cpp where its files are silent: every sixth layer global unless
    /// `attention.sliding_window_pattern` says otherwise, local layers rotating with base
    /// 10,000 (or `rope.freq_base_swa`), and queries scaled by the head width but for the
    /// 62-block (27B) model, scaled by `embedding_length / head_count`.
    pub fn from_gguf(file: &Gguf) -> Result<LlamaConfig, LlamaConfigError> {
        let arch_key = "general.architecture";
        let arch = match file.get(arch_key).and_then(MetadataValue::as_str) {
            Some(a @ ("llama" | "qwen2" | "qwen3" | "gemma3" | "qwen2moe" | "qwen3moe")) => a,
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
        let mut yarn = None;
        match value("rope.scaling.type").and_then(MetadataValue::as_str) {
            None | Some("none") => {}
            Some("linear") => rope_scale = 1.0 / float("rope.scaling.factor", None)?,
            // llama.cpp's keys; its ramp always rounds out to whole pairs.
            Some("yarn") => {
                let factor = float("rope.scaling.factor", None)?;
                let attention = float("rope.scaling.attn_factor", Some(1.0))?;
                yarn = Some((
                    Yarn {
                        factor,
                        original: float("rope.scaling.original_context_length", None)?,
                        beta_fast: float("rope.scaling.yarn_beta_fast", Some(32.0))?,
                        beta_slow: float("rope.scaling.yarn_beta_slow", Some(1.0))?,
                        truncate: true,
                    },
                    attention * Yarn::magnitude(factor, 1.0),
                ));
            }
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
        // A mixture's experts (Mixtral is a `llama` file with experts).
        let experts = match value("expert_count") {
            Some(v) if v.as_u64() != Some(0) => Some(size("expert_count", None)?),
            _ => None,
        };
        let expert_width = match experts {
            Some(_) if value("expert_feed_forward_length").is_some() => {
                Some(size("expert_feed_forward_length", None)?)
            }
            Some(_) => Some(size("feed_forward_length", None)?),
            None => None,
        };
        let mut config = LlamaConfig::new(
            hidden_size,
            size("block_count", None)?,
            num_heads,
            size("attention.head_count_kv", Some(num_heads))?,
            size("feed_forward_length", expert_width)?,
            size("vocab_size", tokens)?,
        );
        if let (Some(count), Some(width)) = (experts, expert_width) {
            let mut mixture = super::Mixture::new(count, size("expert_used_count", None)?, width);
            // llama.cpp's rule per architecture, unless the file says.
            mixture.normalize_weights = match value("expert_weights_norm") {
                Some(MetadataValue::Bool(b)) => *b,
                _ => arch != "qwen2moe",
            };
            if value("expert_shared_feed_forward_length").is_some() {
                let shared = size("expert_shared_feed_forward_length", None)?;
                mixture.shared_expert_intermediate_size = Some(shared);
            }
            config.mixture = Some(mixture);
        }
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
        let mut attention_factor = 1.0;
        if let Some((yarn, factor)) = yarn {
            if config.rope_freqs.is_some() {
                return Err(invalid(
                    &format!("{arch}.rope.scaling.type"),
                    "YaRN scaling beside per-pair factors in rope_freqs.weight",
                ));
            }
            config.rope_freqs = Some(yarn.freqs(config.rope_base, config.rope_dims).into());
            attention_factor = factor;
        }
        config.context_length = size("context_length", None)?;
        config.attention_scale = 1.0 / (head_dim as f64).sqrt();
        config.tied_output = file.tensor("output.weight").is_err();
        // llama.cpp permutes only Llama's query and key rows into the adjacent-pair layout.
        config.rope_traditional = arch == "llama";
        config.qkv_bias = matches!(arch, "qwen2" | "qwen2moe");
        config.qk_norm = matches!(arch, "qwen3" | "qwen3moe" | "gemma3");
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
        // YaRN scales rotated queries and keys: the scores by the factor's square.
        config.attention_scale *= attention_factor * attention_factor;
        config.check(&format!("{arch}."))?;
        Ok(config)
    }
}

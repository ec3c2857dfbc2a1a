//! A Llama-family config from a Hugging Face `config.json` (`llama`, `qwen2`, `qwen3`,
//! `gemma3_text`, `gemma3`), old and new key styles.

use serde_json::Value;

use super::{
    Activation, LlamaConfig, LlamaConfigError, MAX_HEAD_DIM, SlidingWindow, Yarn, invalid,
};

impl LlamaConfig {
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
            Some(
                t @ ("llama" | "qwen2" | "qwen3" | "gemma3_text" | "qwen2_moe" | "qwen3_moe"
                | "mixtral"),
            ) => t,
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
        config.qkv_bias = match model_type {
            "qwen2" => true,
            "qwen2_moe" => hf.flag("qkv_bias", true)?,
            _ => false,
        };
        config.qk_norm = matches!(model_type, "qwen3" | "qwen3_moe" | "gemma3_text");
        for (key, what) in [
            ("attention_bias", "biases on every attention projection"),
            ("mlp_bias", "biases in the feed-forward block"),
        ] {
            if !matches!(model_type, "qwen2" | "qwen2_moe") && hf.flag(key, false)? {
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
        config.mixture = hf.mixture(model_type)?;
        config.check(prefix)?;
        Ok(config)
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
                let magnitude = Yarn::magnitude;
                rotary.attention_factor = match inner.float_opt("attention_factor")? {
                    Some(a) => a,
                    None => match (
                        inner.float_opt("mscale")?,
                        inner.float_opt("mscale_all_dim")?,
                    ) {
                        (Some(m), Some(all)) => magnitude(factor, m) / magnitude(factor, all),
                        _ => magnitude(factor, 1.0),
                    },
                };
                let yarn = Yarn {
                    factor,
                    original: original()?,
                    beta_fast: inner.float_opt("beta_fast")?.unwrap_or(32.0),
                    beta_slow: inner.float_opt("beta_slow")?.unwrap_or(1.0),
                    truncate: inner.flag("truncate", true)?,
                };
                rotary.freqs = Some(yarn.freqs(base, dims));
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

    /// The mixture of experts of a `qwen2_moe`, `qwen3_moe` or `mixtral` model (`None` for
    /// the dense families), with transformers' defaults.
    fn mixture(&self, model_type: &str) -> Result<Option<super::Mixture>, LlamaConfigError> {
        let (default_experts, default_per_token) = match model_type {
            "qwen2_moe" => (60, 4),
            "qwen3_moe" => (128, 8),
            "mixtral" => (8, 2),
            _ => return Ok(None),
        };
        let mixtral = model_type == "mixtral";
        // transformers writes Qwen3-MoE's `num_experts` as `num_local_experts`, Mixtral's
        // name; either may appear.
        let experts_key = if self.get("num_local_experts").is_some() {
            "num_local_experts"
        } else {
            "num_experts"
        };
        let experts = self.size(experts_key, Some(default_experts))?;
        let per_token = self.size("num_experts_per_tok", Some(default_per_token))?;
        let width = if mixtral {
            self.size("intermediate_size", None)?
        } else {
            self.size("moe_intermediate_size", None)?
        };
        let mut mixture = super::Mixture::new(experts, per_token, width);
        mixture.normalize_weights = mixtral || self.flag("norm_topk_prob", false)?;
        if model_type == "qwen2_moe" {
            mixture.shared_expert_intermediate_size =
                match self.get("shared_expert_intermediate_size") {
                    Some(v) if v.as_u64() == Some(0) => None,
                    _ => Some(self.size("shared_expert_intermediate_size", Some(5632))?),
                };
        }
        if !mixtral {
            let step = self.size("decoder_sparse_step", Some(1))?;
            let dense = self
                .get("mlp_only_layers")
                .and_then(Value::as_array)
                .is_some_and(|layers| !layers.is_empty());
            if step != 1 || dense {
                return Err(self.invalid(
                    if dense {
                        "mlp_only_layers"
                    } else {
                        "decoder_sparse_step"
                    },
                    "dense feed-forward layers between mixture layers are not supported",
                ));
            }
        }
        if self.flag("output_router_logits", false)? {
            mixture.balance_loss_weight = match self.get("router_aux_loss_coef") {
                Some(v) if v.as_f64() == Some(0.0) => 0.0,
                _ => self.float("router_aux_loss_coef", Some(0.001))?,
            };
        }
        Ok(Some(mixture))
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
            // Mixtral, like Mistral, slides every layer's window when it has one.
            None if model_type == "mixtral" => match self.get("sliding_window") {
                Some(_) => vec![true; layers],
                None => return Ok(None),
            },
            None if self.flag("use_sliding_window", false)? => {
                let from = self.size("max_window_layers", Some(layers))?;
                (0..layers).map(|i| i >= from).collect()
            }
            None => return Ok(None),
        };
        if !local.contains(&true) {
            return Ok(None);
        }
        if !matches!(
            model_type,
            "gemma3_text" | "qwen2" | "qwen3" | "qwen2_moe" | "qwen3_moe" | "mixtral"
        ) {
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

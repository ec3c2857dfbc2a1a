//! Adapters in Hugging Face PEFT's format: a folder with `adapter_config.json` (the
//! `LoraConfig` PEFT saves) and `adapter_model.safetensors`, whose tensors are named
//! `base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`.

use std::path::Path;

use serde_json::{Value, json};

use super::lora::adapter_param;
use super::{LlamaConfig, LoraAdapter, LoraConfig, LoraError, LoraTarget, hf_tensor_name};

/// PEFT's file names.
const CONFIG_FILE: &str = "adapter_config.json";
const WEIGHTS_FILE: &str = "adapter_model.safetensors";
/// The prefix PEFT puts before the base model's own names.
const PREFIX: &str = "base_model.model.";

impl LoraAdapter {
    /// Reads the PEFT adapter in `dir` for a model of `model`: LoRA on any of a block's
    /// projections, of one rank (`r`) and scale (`lora_alpha / r`, or `/ √r` with
    /// `use_rslora`), tensors in f32, f16 or bf16. What the model cannot apply is an error
    /// naming the setting: DoRA, trained biases, per-module ranks or scales
    /// (`rank_pattern`, `alpha_pattern`), `modules_to_save`, a module outside the blocks'
    /// projections, factors whose dims do not fit the model.
    pub fn load_peft(dir: &Path, model: &LlamaConfig) -> Result<LoraAdapter, LoraError> {
        let config_path = dir.join(CONFIG_FILE);
        let bad = |message: String| LoraError::File {
            path: config_path.clone(),
            message,
        };
        let text = std::fs::read_to_string(&config_path).map_err(|e| bad(e.to_string()))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let config = peft_config(&json).map_err(bad)?;
        let weights_path = dir.join(WEIGHTS_FILE);
        let bad_tensor = |message: String| LoraError::File {
            path: weights_path.clone(),
            message,
        };
        // Names mapped here; dims, dtypes and pairs checked by `LoraAdapter::new`.
        let mut tensors = Vec::new();
        let mut foreign = None;
        crate::weights::read_tensors(&weights_path, &mut |name, value| {
            match our_name(name, model) {
                Some((layer, target, factor)) => {
                    tensors.push((adapter_param(layer, target, factor), value.to_host()));
                }
                None => {
                    foreign.get_or_insert_with(|| name.to_string());
                }
            }
            Ok(())
        })?;
        if let Some(name) = foreign {
            return Err(bad_tensor(format!(
                "{name} is not a factor of an adapted projection"
            )));
        }
        LoraAdapter::new(model, config, tensors).map_err(|e| match e {
            LoraError::Bind { name, message } => {
                bad_tensor(format!("{}: {message}", peft_name(&name)))
            }
            other => other,
        })
    }

    /// Writes the adapter as PEFT saves one (f32 tensors), so that PEFT's
    /// `PeftModel.from_pretrained(base, dir)` loads it onto `base_model` (the name recorded
    /// in `adapter_config.json`: a Hugging Face id or path of the base model).
    pub fn save_peft(&self, dir: &Path, base_model: &str) -> Result<(), LoraError> {
        let io = |path: &Path, e: std::io::Error| LoraError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for (name, value) in &self.tensors {
            tensors.push((peft_name(name), value.clone()));
        }
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        crate::weights::save_tensors(&dir.join(WEIGHTS_FILE), &tensors)?;
        let c = &self.config;
        let config = json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base_model,
            "r": c.rank,
            "lora_alpha": c.alpha,
            "lora_dropout": c.dropout,
            "target_modules": c.targets.iter().map(|t| t.peft_name()).collect::<Vec<_>>(),
            "bias": "none",
            "fan_in_fan_out": false,
            "use_rslora": false,
            "use_dora": false,
            "inference_mode": true,
            "modules_to_save": null,
            "layers_to_transform": null,
            "rank_pattern": {},
            "alpha_pattern": {},
        });
        let path = dir.join(CONFIG_FILE);
        let text = serde_json::to_string_pretty(&config).map_err(|e| LoraError::File {
            path: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(|e| io(&path, e))
    }
}

/// The settings of a PEFT `adapter_config.json`, or what the model cannot apply.
fn peft_config(json: &Value) -> Result<LoraConfig, String> {
    let field = |key: &str| json.get(key).filter(|v| !v.is_null());
    if let Some(kind) = field("peft_type").and_then(Value::as_str)
        && kind != "LORA"
    {
        return Err(format!("peft_type {kind:?}: only LORA adapters load"));
    }
    let rank = field("r")
        .and_then(Value::as_u64)
        .filter(|&r| r > 0 && r <= 1 << 16)
        .ok_or("r must be a whole number from 1 to 65536")?;
    let alpha = field("lora_alpha")
        .and_then(Value::as_f64)
        .filter(|a| a.is_finite())
        .ok_or("lora_alpha must be a finite number")?;
    for (key, off) in [
        ("use_dora", Value::Bool(false)),
        ("fan_in_fan_out", Value::Bool(false)),
        ("lora_bias", Value::Bool(false)),
    ] {
        if field(key).is_some_and(|v| *v != off) {
            return Err(format!("{key} is set: not supported"));
        }
    }
    if field("bias").is_some_and(|v| v != "none") {
        return Err("bias is not \"none\": trained biases are not supported".into());
    }
    for key in ["rank_pattern", "alpha_pattern"] {
        if field(key).is_some_and(|v| v.as_object().is_none_or(|m| !m.is_empty())) {
            return Err(format!(
                "{key} is set: per-module ranks and scales are not supported"
            ));
        }
    }
    if field("modules_to_save").is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty())) {
        return Err("modules_to_save is set: fully trained modules are not supported".into());
    }
    let modules = field("target_modules")
        .and_then(Value::as_array)
        .ok_or("target_modules must be a list of module names")?;
    let mut targets = Vec::new();
    for module in modules {
        let name = module.as_str().unwrap_or_default();
        let target = LoraTarget::from_peft_name(name).ok_or_else(|| {
            format!("target module {module}: only the blocks' projections (q_proj .. down_proj) take adapters")
        })?;
        targets.push(target);
    }
    // rsLoRA scales by alpha / √r: the same update as alpha · √r / r.
    let rslora = field("use_rslora")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let alpha = if rslora {
        alpha * (rank as f64).sqrt()
    } else {
        alpha
    };
    let dropout = match field("lora_dropout") {
        None => 0.0,
        Some(p) => p.as_f64().ok_or("lora_dropout must be a number")?,
    };
    let config = LoraConfig::new(rank as usize, alpha, &targets).with_dropout(dropout);
    config.check().map_err(|e| e.to_string())?;
    Ok(config)
}

/// `base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight` → (3, Query, "lora_a").
fn our_name(name: &str, model: &LlamaConfig) -> Option<(usize, LoraTarget, &'static str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (module, factor) = if let Some(m) = rest.strip_suffix(".lora_A.weight") {
        (m, "lora_a")
    } else {
        (rest.strip_suffix(".lora_B.weight")?, "lora_b")
    };
    let ours = hf_tensor_name(&format!("{module}.weight"), model)?;
    let (layer, gguf) = ours.strip_prefix("blk.")?.split_once('.')?;
    let gguf = gguf.strip_suffix(".weight")?;
    let target = LoraTarget::ALL
        .into_iter()
        .find(|t| t.gguf_name() == gguf)?;
    Some((layer.parse().ok()?, target, factor))
}

/// `blk.3.attn_q.lora_a` → `base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`.
fn peft_name(ours: &str) -> String {
    let parts: Vec<&str> = ours.splitn(4, '.').collect();
    let [_, layer, gguf, factor] = parts[..] else {
        return ours.to_string();
    };
    let factor = if factor == "lora_a" {
        "lora_A"
    } else {
        "lora_B"
    };
    match LoraTarget::ALL.into_iter().find(|t| t.gguf_name() == gguf) {
        Some(t) => format!(
            "{PREFIX}model.layers.{layer}.{}.{factor}.weight",
            t.hf_module()
        ),
        None => ours.to_string(),
    }
}

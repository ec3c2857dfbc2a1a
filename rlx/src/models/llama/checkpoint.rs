//! Checkpoints of the family: GGUF files, whose names the model's params carry, and Hugging
//! Face checkpoints (`model.safetensors`, or the shards a `model.safetensors.index.json`
//! lists), their tensor names mapped onto GGUF's.

use std::path::Path;

use super::LlamaConfig;
use super::expert_tensors::{expert_tensors, part_name, stack_experts, stack_mapped_experts};
use crate::backend::Executable;
use crate::gguf::Gguf;
use crate::ir::DType;
use crate::model::Compiled;
use crate::params::Manifest;
use crate::tensor::{HostTensor, TensorRef};
use crate::weights::{Binding, LoadReport, Mapped, WeightsError};

/// The GGUF name the model gives a Hugging Face tensor (`model.layers.3.self_attn.q_proj.weight`
/// → `blk.3.attn_q.weight`), or `None` for a name outside the decoder. Gemma's norms
/// (`sandwich_norms` set) are named by their place: its `post_attention_layernorm` follows
/// attention, where Llama's comes before the feed-forward block. Multimodal checkpoints'
/// language models (`model.language_model.`, `language_model.model.`) map too.
///
/// ```
/// use rlx::models::llama::{LlamaConfig, hf_tensor_name};
/// let llama = LlamaConfig::new(64, 2, 4, 2, 128, 100);
/// let name = hf_tensor_name("model.layers.1.post_attention_layernorm.weight", &llama);
/// assert_eq!(name.as_deref(), Some("blk.1.ffn_norm.weight"));
/// assert_eq!(hf_tensor_name("lm_head.weight", &llama).as_deref(), Some("output.weight"));
/// assert_eq!(hf_tensor_name("vision_tower.patch.weight", &llama), None);
/// ```
pub fn hf_tensor_name(name: &str, config: &LlamaConfig) -> Option<String> {
    if name == "lm_head.weight" || name == "language_model.lm_head.weight" {
        return Some("output.weight".into());
    }
    let rest = decoder_part(name)?;
    match rest {
        "embed_tokens.weight" => return Some("token_embd.weight".into()),
        "norm.weight" => return Some("output_norm.weight".into()),
        _ => {}
    }
    let rest = rest.strip_prefix("layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let gguf = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "post_attention_layernorm" if config.sandwich_norms => "post_attention_norm",
        "post_attention_layernorm" => "ffn_norm",
        "pre_feedforward_layernorm" => "ffn_norm",
        "post_feedforward_layernorm" => "post_ffw_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        "mlp.gate" | "block_sparse_moe.gate" => "ffn_gate_inp",
        "mlp.shared_expert.gate_proj" => "ffn_gate_shexp",
        "mlp.shared_expert.up_proj" => "ffn_up_shexp",
        "mlp.shared_expert.down_proj" => "ffn_down_shexp",
        "mlp.shared_expert_gate" => "ffn_gate_inp_shexp",
        _ => return None,
    };
    Some(format!("blk.{layer}.{gguf}.{kind}"))
}

/// A checkpoint name inside the decoder, after its prefix (`model.`, or a multimodal
/// checkpoint's `model.language_model.` or `language_model.model.`).
fn decoder_part(name: &str) -> Option<&str> {
    ["model.language_model.", "language_model.model.", "model."]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
}

/// Whether a checkpoint tensor outside the decoder may be left unused: rotary tables some
/// exports keep, and the vision parts of multimodal checkpoints.
fn unused(name: &str) -> bool {
    name.ends_with("rotary_emb.inv_freq")
        || [
            "vision_tower.",
            "multi_modal_projector.",
            "model.vision_tower.",
            "model.multi_modal_projector.",
        ]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Loads the Hugging Face checkpoint in `dir` (`model.safetensors` or the shards of
/// `model.safetensors.index.json`; f32, f16 or bf16) into `model`, a compiled
/// [`Llama`](super::Llama) or [`LlamaStep`](super::LlamaStep) of `config`: names are
/// mapped by [`hf_tensor_name`], values converted to f32, and Gemma's norm scales, stored
/// as offsets from 1, become `1 + w` (as llama.cpp's converter writes them). As strict as
/// every load: every declared weight must be there with its dims, and a decoder tensor the
/// model does not declare is an error. A model with room for adapters
/// ([`LlamaConfig::lora`]) gets zero adapters: it runs as the base model until one is bound.
pub fn load_hf_checkpoint(
    model: &Compiled,
    config: &LlamaConfig,
    dir: &Path,
) -> Result<LoadReport, WeightsError> {
    load_hf_bound(model, config, dir, Binding::AllAtOnce)
}

/// [`load_hf_checkpoint`], binding the weights as `binding` says ([`Binding::AsMade`] for a
/// model just compiled, which an error drops).
pub(super) fn load_hf_bound(
    model: &Compiled,
    config: &LlamaConfig,
    dir: &Path,
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    let report = load_hf_weights(model.executable(), model.manifest(), config, dir, binding)?;
    zero_adapters(model)?;
    Ok(report)
}

/// [`load_hf_checkpoint`] into any executable of a model of `config` whose params
/// `manifest` lists (a training step's, whose frozen weights are its params), adapters
/// left unbound.
pub(super) fn load_hf_weights(
    exe: &dyn Executable,
    manifest: &Manifest,
    config: &LlamaConfig,
    dir: &Path,
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    let manifest = &without_adapters(manifest);
    crate::weights::load_hf_folder(
        exe,
        manifest,
        dir,
        |name, value| map_hf_tensor(config, name, value),
        stack_mapped_experts,
        binding,
    )
}

/// What a Hugging Face checkpoint tensor binds as: its GGUF name and value (the file's
/// bytes, but for Gemma's norm scales, stored as offsets from 1), a mixture's expert part,
/// an unknown tensor under its own name (the load reports it as unexpected), or nothing
/// for a tensor the family knows it does not use.
fn map_hf_tensor<'a>(
    config: &LlamaConfig,
    name: &str,
    value: TensorRef<'a>,
) -> Option<Vec<(String, Mapped<'a>)>> {
    if let Some(experts) = experts_of(name, value) {
        let made = experts.into_iter().map(|(n, t)| (n, Mapped::Made(t)));
        return Some(made.collect());
    }
    let Some(gguf) = hf_tensor_name(name, config) else {
        return (!unused(name)).then(|| vec![(name.to_string(), Mapped::Stored(value))]);
    };
    // The load converts f16 and bf16 to the model's f32.
    let value = if config.sandwich_norms && gguf.ends_with("norm.weight") {
        Mapped::Made(plus_one(value))
    } else {
        Mapped::Stored(value)
    };
    Some(vec![(gguf, value)])
}

/// The stacked expert tensors a Hugging Face mixture tensor maps to, if it is one.
fn experts_of(name: &str, value: TensorRef<'_>) -> Option<Vec<(String, HostTensor)>> {
    let rest = decoder_part(name)?.strip_prefix("layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, kind) = rest.rsplit_once('.')?;
    expert_tensors(layer.parse().ok()?, module, kind, value)
}

/// The tensors of a GGUF file that [`LlamaConfig::from_gguf`] reads as configuration rather
/// than weights: Llama 3's per-pair rotary factors.
const GGUF_CONFIG_TENSORS: [&str; 1] = ["rope_freqs.weight"];

/// Loads the weights of a GGUF file into `model`, a compiled [`Llama`](super::Llama) or
/// [`LlamaStep`](super::LlamaStep) of `config`, as strictly as
/// [`Compiled::load_gguf`] (quantized tensors dequantized to f32), except that the tensors
/// `config` was read from (Llama 3's `rope_freqs.weight`) are not weights to bind.
///
/// ```no_run
/// use rlx::models::llama::{Llama, LlamaConfig, load_gguf_checkpoint};
/// let file = rlx::gguf::Gguf::open("Llama-3.2-1B-Instruct-Q8_0.gguf")?;
/// let config = LlamaConfig::from_gguf(&file)?;
/// let model = Llama::compile(&rlx::cpu::CpuBackend::default(), &config)?;
/// load_gguf_checkpoint(&model, &config, &file)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_gguf_checkpoint(
    model: &Compiled,
    config: &LlamaConfig,
    file: &Gguf,
) -> Result<LoadReport, WeightsError> {
    load_gguf_bound(model, config, file, Binding::AllAtOnce)
}

/// [`load_gguf_checkpoint`], binding the weights as `binding` says ([`Binding::AsMade`] for
/// a model just compiled, which an error drops).
pub(super) fn load_gguf_bound(
    model: &Compiled,
    config: &LlamaConfig,
    file: &Gguf,
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    let report = load_gguf_weights(model.executable(), model.manifest(), config, file, binding)?;
    zero_adapters(model)?;
    Ok(report)
}

/// [`load_gguf_checkpoint`] into any executable of a model of `config` whose params
/// `manifest` lists, adapters left unbound.
pub(super) fn load_gguf_weights(
    exe: &dyn Executable,
    manifest: &Manifest,
    config: &LlamaConfig,
    file: &Gguf,
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    let manifest = without_adapters(manifest);
    let mut read_elsewhere: Vec<String> = Vec::new();
    if config.rope_freqs.is_some() {
        read_elsewhere.extend(GGUF_CONFIG_TENSORS.map(String::from));
    }
    let assembled = gguf_assembled(&manifest, file, &mut read_elsewhere)?;
    let read_elsewhere: Vec<&str> = read_elsewhere.iter().map(String::as_str).collect();
    crate::weights::load_gguf_with(exe, &manifest, file, &read_elsewhere, &assembled, binding)
}

/// The weights a GGUF file stores in another layout than the params: a mixture's experts
/// one tensor per expert (`blk.N.ffn_gate.E.weight`, as older Mixtral files have them),
/// stacked; the shared expert's gate as a vector (`[H]` for the `[1, H]` projection).
/// Their source tensors are added to `read_elsewhere`.
fn gguf_assembled(
    manifest: &Manifest,
    file: &Gguf,
    read_elsewhere: &mut Vec<String>,
) -> Result<Vec<(String, HostTensor)>, WeightsError> {
    let path = || {
        file.path()
            .map_or_else(|| "<GGUF in memory>".into(), std::path::PathBuf::from)
    };
    let gguf_error = |source| WeightsError::Gguf {
        path: path(),
        source,
    };
    let mut assembled = Vec::new();
    for spec in &manifest.params {
        if file.tensor(&spec.name).is_ok() {
            if spec.name.ends_with("ffn_gate_inp_shexp.weight") {
                let value = file.tensor_f32(&spec.name).map_err(gguf_error)?;
                if let [width] = *value.shape() {
                    let shape = [1, width];
                    let row =
                        TensorRef::new(DType::F32, &shape, value.data().bytes()).map_err(|e| {
                            WeightsError::Format {
                                path: path(),
                                message: e.to_string(),
                            }
                        })?;
                    read_elsewhere.push(spec.name.clone());
                    assembled.push((spec.name.clone(), row.to_host()));
                }
            }
            continue;
        }
        let Some(stem) = spec.name.strip_suffix("_exps.weight") else {
            continue;
        };
        let experts = spec
            .static_shape()
            .and_then(|s| s.first().copied())
            .unwrap_or(0);
        let parts: Vec<String> = (0..experts).map(|e| format!("{stem}.{e}.weight")).collect();
        if experts == 0 || parts.iter().any(|p| file.tensor(p).is_err()) {
            continue;
        }
        let mut tensors = Vec::with_capacity(experts);
        for (e, part) in parts.iter().enumerate() {
            let value = file.tensor_f32(part).map_err(gguf_error)?;
            tensors.push((part_name(&spec.name, e), value));
        }
        let stacked = stack_experts(tensors).map_err(|message| WeightsError::Format {
            path: path(),
            message,
        })?;
        read_elsewhere.extend(parts);
        assembled.extend(stacked);
    }
    Ok(assembled)
}

/// Whether a param is a factor of an adapter.
fn is_adapter(name: &str) -> bool {
    name.ends_with(".lora_a") || name.ends_with(".lora_b")
}

/// `manifest` without the params of adapters, which come from an adapter's file, never
/// from the base checkpoint.
fn without_adapters(manifest: &Manifest) -> Manifest {
    Manifest {
        params: (manifest.params.iter())
            .filter(|p| !is_adapter(&p.name))
            .cloned()
            .collect(),
    }
}

/// Binds zeros to every adapter param `model` declares (none without
/// [`LlamaConfig::lora`]): the base model.
pub(super) fn zero_adapters(model: &Compiled) -> Result<(), crate::backend::RunError> {
    for spec in &model.manifest().params {
        if is_adapter(&spec.name) {
            let shape = spec.static_shape().unwrap_or_default();
            let zeros = HostTensor::zeros(spec.dtype, shape);
            model.set_weight(&spec.name, zeros.view())?;
        }
    }
    Ok(())
}

/// A float tensor as f32 plus one (integer tensors are kept as they are: the load then
/// reports their dtype).
fn plus_one(value: TensorRef<'_>) -> HostTensor {
    if !value.dtype.is_float() {
        return value.to_host();
    }
    let mut out = HostTensor::zeros(DType::F32, value.shape);
    if let Ok(dst) = out.as_mut_slice::<f32>() {
        for (d, v) in dst.iter_mut().zip(value.to_host().to_f64_vec()) {
            *d = (v + 1.0) as f32;
        }
    }
    out
}

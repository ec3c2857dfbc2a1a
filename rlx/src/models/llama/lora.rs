//! Low-rank adapters on a Llama-family decoder: which projections get one
//! ([`LoraConfig`]), and an adapter's weights ([`LoraAdapter`]) in Hugging Face PEFT's
//! format (`adapter_config.json` beside `adapter_model.safetensors`), bound to a compiled
//! model or a trainer, or merged into a base model's weights.
//!
//! A model compiled with [`LlamaConfig::lora`] set declares `blk.N.<target>.lora_a`
//! (`[rank, in]`) and `blk.N.<target>.lora_b` (`[out, rank]`) beside each targeted weight;
//! loading the base checkpoint binds them to zero (the model is the base until an adapter is
//! bound). Any adapter of a lower rank and of some of the targets binds to it exactly: its
//! factors are padded with zeros to the model's rank, those of targets it lacks are zero,
//! and its scale is folded into `B`. So one compiled model switches between adapters by
//! binding their few megabytes, without compiling again.

use std::collections::BTreeMap;

use super::LlamaConfig;
use crate::generate::sampling::Draws;
use crate::model::Compiled;
use crate::tensor::{HostTensor, TensorRef};
use crate::train::Trainer;

/// A projection of a decoder block that can carry an adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoraTarget {
    /// The query projection (`attn_q`, PEFT's `q_proj`).
    Query,
    /// The key projection (`attn_k`, `k_proj`).
    Key,
    /// The value projection (`attn_v`, `v_proj`).
    Value,
    /// The attention's output projection (`attn_output`, `o_proj`).
    Output,
    /// The feed-forward gate (`ffn_gate`, `gate_proj`).
    Gate,
    /// The feed-forward up projection (`ffn_up`, `up_proj`).
    Up,
    /// The feed-forward down projection (`ffn_down`, `down_proj`).
    Down,
}

impl LoraTarget {
    /// Every projection of a block.
    pub const ALL: [LoraTarget; 7] = [
        LoraTarget::Query,
        LoraTarget::Key,
        LoraTarget::Value,
        LoraTarget::Output,
        LoraTarget::Gate,
        LoraTarget::Up,
        LoraTarget::Down,
    ];

    /// The weight's name in a block (GGUF's: `attn_q`).
    pub fn gguf_name(self) -> &'static str {
        match self {
            LoraTarget::Query => "attn_q",
            LoraTarget::Key => "attn_k",
            LoraTarget::Value => "attn_v",
            LoraTarget::Output => "attn_output",
            LoraTarget::Gate => "ffn_gate",
            LoraTarget::Up => "ffn_up",
            LoraTarget::Down => "ffn_down",
        }
    }

    /// Whether blocks of `model` have this projection (a mixture of experts has no dense
    /// feed-forward).
    ///
    /// ```
    /// use rlx::models::llama::{LlamaConfig, LoraTarget, Mixture};
    /// let mut config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
    /// assert!(LoraTarget::Gate.present_in(&config));
    /// config.mixture = Some(Mixture::new(8, 2, 32));
    /// assert!(!LoraTarget::Gate.present_in(&config) && LoraTarget::Query.present_in(&config));
    /// ```
    pub fn present_in(self, model: &LlamaConfig) -> bool {
        let feed_forward = matches!(self, LoraTarget::Gate | LoraTarget::Up | LoraTarget::Down);
        !(feed_forward && model.mixture.is_some())
    }

    /// The module's name in PEFT's `target_modules` (`q_proj`).
    pub fn peft_name(self) -> &'static str {
        match self {
            LoraTarget::Query => "q_proj",
            LoraTarget::Key => "k_proj",
            LoraTarget::Value => "v_proj",
            LoraTarget::Output => "o_proj",
            LoraTarget::Gate => "gate_proj",
            LoraTarget::Up => "up_proj",
            LoraTarget::Down => "down_proj",
        }
    }

    /// The module's path in a transformers block (`self_attn.q_proj`).
    pub(super) fn hf_module(self) -> String {
        let parent = match self {
            LoraTarget::Query | LoraTarget::Key | LoraTarget::Value | LoraTarget::Output => {
                "self_attn"
            }
            LoraTarget::Gate | LoraTarget::Up | LoraTarget::Down => "mlp",
        };
        format!("{parent}.{}", self.peft_name())
    }

    /// The target PEFT calls `name`.
    pub fn from_peft_name(name: &str) -> Option<LoraTarget> {
        LoraTarget::ALL.into_iter().find(|t| t.peft_name() == name)
    }

    /// `(in, out)`: the widths of the projection in `model`.
    pub(super) fn dims(self, model: &LlamaConfig) -> (usize, usize) {
        let q = model.num_heads * model.head_dim;
        let kv = model.num_kv_heads * model.head_dim;
        let (h, f) = (model.hidden_size, model.intermediate_size);
        match self {
            LoraTarget::Query => (h, q),
            LoraTarget::Key | LoraTarget::Value => (h, kv),
            LoraTarget::Output => (q, h),
            LoraTarget::Gate | LoraTarget::Up => (h, f),
            LoraTarget::Down => (f, h),
        }
    }
}

/// Which projections of every block carry an adapter, of what rank and scale.
///
/// ```
/// use rlx::models::llama::{LlamaConfig, LoraConfig, LoraTarget};
/// let mut config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
/// config.lora = Some(LoraConfig::new(8, 16.0, &[LoraTarget::Query, LoraTarget::Value]));
/// let names = config.adapter_params();
/// assert_eq!(names.len(), 2 * 2 * 2);
/// assert_eq!(names[0], "blk.0.attn_q.lora_a");
/// assert_eq!(config.lora.as_ref().unwrap().scale(), 2.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// The inner width of the two factors.
    pub rank: usize,
    /// The update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// The projections adapted in every block.
    pub targets: Vec<LoraTarget>,
    /// The probability that fine-tuning zeroes each input of an adapter (PEFT's
    /// `lora_dropout`; 0 unless set). Only the loss model applies it
    /// ([`llama_loss`](super::llama_loss)), which then takes a graph input
    /// `dropout_seed` (an `i64` scalar): give it a new value every step.
    pub dropout: f64,
}

impl LoraConfig {
    /// Adapters of `rank` on `targets` (duplicates dropped), scaled by `alpha / rank`.
    pub fn new(rank: usize, alpha: f64, targets: &[LoraTarget]) -> LoraConfig {
        let mut targets = targets.to_vec();
        targets.sort();
        targets.dedup();
        LoraConfig {
            rank,
            alpha,
            targets,
            dropout: 0.0,
        }
    }

    /// With dropout `p` on the adapters' inputs during fine-tuning (see
    /// [`LoraConfig::dropout`]).
    ///
    /// ```
    /// use rlx::models::llama::{LoraConfig, LoraTarget};
    /// let lora = LoraConfig::new(8, 16.0, &LoraTarget::ALL).with_dropout(0.05);
    /// assert_eq!(lora.dropout, 0.05);
    /// ```
    pub fn with_dropout(mut self, p: f64) -> LoraConfig {
        self.dropout = p;
        self
    }

    /// The factor on the update: `alpha / rank`.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// [`check`](Self::check) and that every target is a projection `model` has: a
    /// mixture of experts has no dense feed-forward (adapters on experts are not
    /// supported yet).
    pub(super) fn check_for(&self, model: &LlamaConfig) -> Result<(), LoraError> {
        self.check()?;
        match self.targets.iter().find(|t| !t.present_in(model)) {
            Some(target) => Err(LoraError::Config(format!(
                "a mixture of experts has no dense feed-forward to adapt ({}): target its \
                 attention projections",
                target.peft_name()
            ))),
            _ => Ok(()),
        }
    }

    pub(super) fn check(&self) -> Result<(), LoraError> {
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(LoraError::Config(format!(
                "the adapters' dropout must be in [0, 1), got {}",
                self.dropout
            )));
        }
        if self.rank == 0 || self.targets.is_empty() || !self.alpha.is_finite() {
            return Err(LoraError::Config(format!(
                "an adapter needs a rank above 0, a finite alpha and a target: rank {}, \
                 alpha {}, {} targets",
                self.rank,
                self.alpha,
                self.targets.len()
            )));
        }
        Ok(())
    }
}

impl LlamaConfig {
    /// The names of the adapter params a model of this config declares (empty without
    /// [`LlamaConfig::lora`]): what a fine-tuning step trains
    /// ([`TrainConfig::train_only`](crate::train::TrainConfig::train_only)).
    pub fn adapter_params(&self) -> Vec<String> {
        let Some(lora) = &self.lora else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for layer in 0..self.num_layers {
            for target in lora.targets.iter().filter(|t| t.present_in(self)) {
                for factor in ["lora_a", "lora_b"] {
                    names.push(adapter_param(layer, *target, factor));
                }
            }
        }
        names
    }
}

pub(super) fn adapter_param(layer: usize, target: LoraTarget, factor: &str) -> String {
    format!("blk.{layer}.{}.{factor}", target.gguf_name())
}

/// Why an adapter could not be made, read, written or bound.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    /// The adapter's or the model's settings do not fit.
    #[error("{0}")]
    Config(String),
    /// An adapter file is not one this code reads.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing the tensors failed.
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightsError),
    /// Binding or reading a weight failed.
    #[error("{name}: {message}")]
    Bind {
        /// The param.
        name: String,
        /// What went wrong.
        message: String,
    },
}

/// The weights of one adapter: `A` and `B` of each adapted projection of each block, by
/// the model's param names (`blk.3.attn_q.lora_a`).
#[derive(Clone, Debug, PartialEq)]
pub struct LoraAdapter {
    pub(super) config: LoraConfig,
    pub(super) tensors: BTreeMap<String, HostTensor>,
}

impl LoraAdapter {
    /// A fresh adapter as PEFT starts one: `A` uniform in `±1/√in` (Kaiming's uniform with
    /// `a = √5`, PyTorch's default for a linear layer), `B` zero, so the adapted model is
    /// the base model until trained. Seeded: the same seed gives the same adapter.
    pub fn init(
        model: &LlamaConfig,
        config: LoraConfig,
        seed: u64,
    ) -> Result<LoraAdapter, LoraError> {
        config.check_for(model)?;
        let mut draws = Draws::new(seed);
        let mut tensors = BTreeMap::new();
        for layer in 0..model.num_layers {
            for &target in &config.targets {
                let (input, output) = target.dims(model);
                let bound = 1.0 / (input as f32).sqrt();
                let a: Vec<f32> = (0..config.rank * input)
                    .map(|_| (2.0 * draws.next_uniform() - 1.0) * bound)
                    .collect();
                tensors.insert(
                    adapter_param(layer, target, "lora_a"),
                    f32_tensor(a, [config.rank, input]),
                );
                tensors.insert(
                    adapter_param(layer, target, "lora_b"),
                    HostTensor::zeros(crate::ir::DType::F32, [output, config.rank]),
                );
            }
        }
        Ok(LoraAdapter { config, tensors })
    }

    /// An adapter of `config` made of `tensors`, by the model's param names
    /// (`blk.0.attn_q.lora_a` `[rank, in]`, `blk.0.attn_q.lora_b` `[out, rank]`) for the
    /// projections of `model` it adapts; any it leaves out are zero, and a projection has
    /// both factors or neither.
    pub fn new(
        model: &LlamaConfig,
        config: LoraConfig,
        tensors: impl IntoIterator<Item = (String, HostTensor)>,
    ) -> Result<LoraAdapter, LoraError> {
        config.check_for(model)?;
        let mut known = BTreeMap::new();
        for layer in 0..model.num_layers {
            for &target in &config.targets {
                let (input, output) = target.dims(model);
                known.insert(adapter_param(layer, target, "lora_a"), [config.rank, input]);
                known.insert(
                    adapter_param(layer, target, "lora_b"),
                    [output, config.rank],
                );
            }
        }
        let mut out = BTreeMap::new();
        for (name, value) in tensors {
            let Some(shape) = known.get(&name) else {
                return Err(LoraError::Bind {
                    name,
                    message: "not a factor of an adapted projection".into(),
                });
            };
            if value.shape() != shape || !value.dtype().is_float() {
                return Err(LoraError::Bind {
                    message: format!(
                        "{} {:?} where the model takes f32 {shape:?}",
                        value.dtype(),
                        value.shape()
                    ),
                    name,
                });
            }
            let values: Vec<f32> = value.to_f64_vec().iter().map(|&v| v as f32).collect();
            out.insert(name, f32_tensor(values, *shape));
        }
        for name in out.keys() {
            let other = match name.strip_suffix("lora_a") {
                Some(stem) => format!("{stem}lora_b"),
                None => format!("{}lora_a", name.trim_end_matches("lora_b")),
            };
            if !out.contains_key(&other) {
                return Err(LoraError::Bind {
                    name: name.clone(),
                    message: format!("no {other} beside it"),
                });
            }
        }
        Ok(LoraAdapter {
            config,
            tensors: out,
        })
    }

    /// Adds the adapter's update `scale·BA` to the base weights of `compiled`, a model of
    /// `model` (compiled without adapters, or with zero ones), so that it runs as the
    /// adapted model at the base model's cost. Float32 sums: [`unmerge_from`](Self::unmerge_from)
    /// restores the base to within their rounding. Weights kept in GGUF blocks cannot take
    /// an update: an error names the first.
    pub fn merge_into(&self, compiled: &Compiled, model: &LlamaConfig) -> Result<(), LoraError> {
        self.add_to_base(compiled, model, 1.0)
    }

    /// Subtracts what [`merge_into`](Self::merge_into) added.
    pub fn unmerge_from(&self, compiled: &Compiled, model: &LlamaConfig) -> Result<(), LoraError> {
        self.add_to_base(compiled, model, -1.0)
    }

    fn add_to_base(
        &self,
        compiled: &Compiled,
        model: &LlamaConfig,
        sign: f64,
    ) -> Result<(), LoraError> {
        let scale = sign * self.config.scale();
        let r = self.config.rank;
        for layer in 0..model.num_layers {
            for &target in &self.config.targets {
                let (Some(a), Some(b)) = (
                    self.tensors.get(&adapter_param(layer, target, "lora_a")),
                    self.tensors.get(&adapter_param(layer, target, "lora_b")),
                ) else {
                    continue;
                };
                let name = format!("blk.{layer}.{}.weight", target.gguf_name());
                let bind_error = |message: String| LoraError::Bind {
                    name: name.clone(),
                    message,
                };
                let spec = compiled
                    .manifest()
                    .get(&name)
                    .ok_or_else(|| bind_error("the model declares no such weight".into()))?;
                if spec.format.is_some() || spec.dtype != crate::ir::DType::F32 {
                    return Err(bind_error(
                        "the weight is kept in GGUF blocks, which cannot take an update".into(),
                    ));
                }
                let (input, output) = target.dims(model);
                let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
                let mut weight = compiled
                    .weight(&name)
                    .map_err(|e| bind_error(e.to_string()))?;
                let w = weight
                    .as_mut_slice::<f32>()
                    .map_err(|e| bind_error(e.to_string()))?;
                if w.len() != input * output {
                    return Err(bind_error(format!(
                        "{} values, not {input}×{output}",
                        w.len()
                    )));
                }
                // The graph holds the weight [in, out] when the checkpoint's [out, in] is
                // read transposed.
                for i in 0..input {
                    for o in 0..output {
                        let delta: f64 = (0..r).map(|k| a[k * input + i] * b[o * r + k]).sum();
                        let at = if spec.transpose {
                            i * output + o
                        } else {
                            o * input + i
                        };
                        w[at] = (f64::from(w[at]) + scale * delta) as f32;
                    }
                }
                compiled
                    .set_weight(&name, weight.view())
                    .map_err(|e| bind_error(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// The adapter's rank, scale and targets.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// The factor named `name` (`blk.0.attn_q.lora_a`), if the adapter has it.
    pub fn tensor(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.get(name)
    }

    /// The adapter `trainer` holds: the factors of `model.lora` as the trainer's weights
    /// (what fine-tuning a [`llama_loss`](super::llama_loss) of `model` leaves).
    pub fn from_trainer(trainer: &Trainer, model: &LlamaConfig) -> Result<LoraAdapter, LoraError> {
        let config = model.lora.clone().ok_or_else(|| {
            LoraError::Config("the model has no adapters (`lora` is unset)".into())
        })?;
        let mut tensors = BTreeMap::new();
        for name in model.adapter_params() {
            let value = trainer.weight(&name).map_err(|e| LoraError::Bind {
                name: name.clone(),
                message: e.to_string(),
            })?;
            tensors.insert(name, value);
        }
        Ok(LoraAdapter { config, tensors })
    }

    /// Binds the adapter to `compiled`, a model of `model` whose
    /// [`lora`](LlamaConfig::lora) has at least this adapter's rank and targets: replaces
    /// whatever adapter it ran with.
    pub fn bind(&self, compiled: &Compiled, model: &LlamaConfig) -> Result<(), LoraError> {
        self.bind_with(model, |name, value| {
            compiled.set_weight(name, value).map_err(|e| e.to_string())
        })
    }

    /// Binds the adapter to `trainer`, a training step of a model of `model` (to resume
    /// fine-tuning from it).
    pub fn bind_trainer(
        &self,
        trainer: &mut Trainer,
        model: &LlamaConfig,
    ) -> Result<(), LoraError> {
        self.bind_with(model, |name, value| {
            trainer.set_weight(name, value).map_err(|e| e.to_string())
        })
    }

    /// Binds zero adapters to `compiled` (the base model again).
    pub fn unbind(compiled: &Compiled) -> Result<(), LoraError> {
        super::checkpoint::zero_adapters(compiled).map_err(|e| LoraError::Bind {
            name: "adapters".into(),
            message: e.to_string(),
        })
    }

    fn bind_with(
        &self,
        model: &LlamaConfig,
        mut set: impl FnMut(&str, TensorRef<'_>) -> Result<(), String>,
    ) -> Result<(), LoraError> {
        let Some(room) = &model.lora else {
            return Err(LoraError::Config(
                "the model was compiled without adapters (`lora` is unset)".into(),
            ));
        };
        let missing: Vec<&str> = (self.config.targets.iter())
            .filter(|t| !room.targets.contains(t))
            .map(|t| t.peft_name())
            .collect();
        if self.config.rank > room.rank || !missing.is_empty() {
            return Err(LoraError::Config(format!(
                "an adapter of rank {} does not fit a model compiled for rank {}{}",
                self.config.rank,
                room.rank,
                if missing.is_empty() {
                    String::new()
                } else {
                    format!(" without adapters on {missing:?}")
                }
            )));
        }
        // The model multiplies by its own scale: fold the ratio into B.
        let ratio = (self.config.scale() / room.scale()) as f32;
        for layer in 0..model.num_layers {
            for &target in &room.targets {
                let (input, output) = target.dims(model);
                let a_name = adapter_param(layer, target, "lora_a");
                let b_name = adapter_param(layer, target, "lora_b");
                let mut a = vec![0.0f32; room.rank * input];
                let mut b = vec![0.0f32; output * room.rank];
                if let (Some(ta), Some(tb)) = (self.tensors.get(&a_name), self.tensors.get(&b_name))
                {
                    let r = self.config.rank;
                    for (name, t, shape) in [(&a_name, ta, [r, input]), (&b_name, tb, [output, r])]
                    {
                        if t.shape() != shape {
                            return Err(LoraError::Bind {
                                name: name.clone(),
                                message: format!(
                                    "the adapter holds {:?} where the model takes {shape:?}",
                                    t.shape()
                                ),
                            });
                        }
                    }
                    let (va, vb) = (ta.to_f64_vec(), tb.to_f64_vec());
                    for (dst, src) in a.iter_mut().zip(&va).take(r * input) {
                        *dst = *src as f32;
                    }
                    for o in 0..output {
                        for k in 0..r {
                            b[o * room.rank + k] = vb[o * r + k] as f32 * ratio;
                        }
                    }
                }
                for (name, data, shape) in [
                    (&a_name, a, [room.rank, input]),
                    (&b_name, b, [output, room.rank]),
                ] {
                    let value = f32_tensor(data, shape);
                    set(name, value.view()).map_err(|message| LoraError::Bind {
                        name: name.clone(),
                        message,
                    })?;
                }
            }
        }
        Ok(())
    }
}

/// A float32 tensor of `shape` holding `data` (whose length is the shape's product).
fn f32_tensor(data: Vec<f32>, shape: [usize; 2]) -> HostTensor {
    HostTensor::from_vec(data, shape).expect("the data fills the shape")
}

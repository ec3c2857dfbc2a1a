//! A compiled [`mamba_step`](super::mamba_step) with its weights: the family as a
//! [`Decoder`](crate::generate::Decoder).

use std::path::Path;

use super::{MambaConfig, MambaConfigError, MambaStep};
use crate::backend::{Context, Executable, RunError};
use crate::ir::DType;
use crate::params::Manifest;
use crate::tensor::{HostTensor, TensorRef};
use crate::weights::{LoadOptions, LoadReport, WeightsError};

/// Why a Mamba decoder could not be made from a folder.
#[derive(Debug, thiserror::Error)]
pub enum MambaLoadError {
    /// The config does not describe a model this code builds.
    #[error(transparent)]
    Config(#[from] MambaConfigError),
    /// The step did not build or compile.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// The weights did not load.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The folder has no readable `config.json`.
    #[error("{path}: {message}")]
    ConfigFile {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A context of no positions.
    #[error("a context of 0 positions")]
    Capacity,
}

/// A Mamba decoder ready to generate: its compiled [`mamba_step`](super::mamba_step) with
/// the weights bound, as a [`Decoder`](crate::generate::Decoder) for
/// [`Generator`](crate::generate::Generator). A context holds each block's convolution
/// inputs and scan state, a fixed size whatever the sequence's length.
pub struct MambaDecoder {
    step: MambaStep,
    config: MambaConfig,
    capacity: usize,
}

impl std::fmt::Debug for MambaDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MambaDecoder")
            .field("config", &self.config)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl MambaDecoder {
    /// The model of a Hugging Face folder (`config.json` beside `model.safetensors` or its
    /// shards; f32, f16 or bf16), compiled for `backend`, its weights loaded by
    /// [`load_mamba_checkpoint`](super::load_mamba_checkpoint). `capacity` bounds the
    /// positions a generation may reach (the state itself does not grow).
    ///
    /// ```no_run
    /// use rlx::models::mamba::MambaDecoder;
    /// let backend = rlx::cpu::CpuBackend::default();
    /// let decoder = MambaDecoder::from_hf_dir(&backend, "mamba-130m-hf".as_ref(), 4096)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_hf_dir<B: crate::backend::Backend>(
        backend: &B,
        dir: &Path,
        capacity: usize,
    ) -> Result<MambaDecoder, MambaLoadError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| MambaLoadError::ConfigFile {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let config = MambaConfig::from_hf_json(&text)?;
        let decoder = MambaDecoder::compile(backend, config, capacity)?;
        super::load_mamba_checkpoint(&decoder.step, &decoder.config, dir)?;
        Ok(decoder)
    }

    /// The step of `config`, compiled for `backend`, no weights bound.
    pub fn compile<B: crate::backend::Backend>(
        backend: &B,
        config: MambaConfig,
        capacity: usize,
    ) -> Result<MambaDecoder, MambaLoadError> {
        if capacity == 0 {
            return Err(MambaLoadError::Capacity);
        }
        config.check()?;
        let step = MambaStep::compile(backend, &config)?;
        Ok(MambaDecoder {
            step,
            config,
            capacity,
        })
    }

    /// The model's config.
    pub fn config(&self) -> &MambaConfig {
        &self.config
    }

    /// The compiled step.
    pub fn compiled(&self) -> &MambaStep {
        &self.step
    }
}

/// Loads the Hugging Face checkpoint in `dir` (`model.safetensors` or the shards of
/// `model.safetensors.index.json`; f32, f16 or bf16, converted to f32) into `model`, a
/// compiled [`Mamba`](super::Mamba) or [`MambaStep`](super::MambaStep) of `config`. As
/// strict as every load: every declared weight must be there with its dims, and a tensor
/// the model does not declare is an error, except a tied model's copy of its embeddings
/// as `lm_head.weight` (reported as ignored).
pub fn load_mamba_checkpoint(
    model: &crate::model::Compiled,
    config: &MambaConfig,
    dir: &Path,
) -> Result<LoadReport, WeightsError> {
    load_into(model.executable(), model.manifest(), config, dir)
}

fn load_into(
    exe: &dyn Executable,
    manifest: &Manifest,
    config: &MambaConfig,
    dir: &Path,
) -> Result<LoadReport, WeightsError> {
    let mut tensors: Vec<(String, HostTensor)> = Vec::new();
    let mut ignored = Vec::new();
    for path in crate::models::llama::shard_paths(dir)? {
        crate::weights::read_tensors(&path, &mut |name, value| {
            if config.tied_output && name == "lm_head.weight" {
                ignored.push(name.to_string());
            } else {
                tensors.push((name.to_string(), value.to_host()));
            }
            Ok(())
        })?;
    }
    let named: Vec<(&str, TensorRef<'_>)> = tensors
        .iter()
        .map(|(n, t)| (n.as_str(), t.view()))
        .collect();
    let mut report = crate::weights::load_tensors(
        exe,
        manifest,
        dir,
        &named,
        &LoadOptions {
            convert_floats: true,
            ..LoadOptions::default()
        },
    )?;
    report.ignored = ignored;
    Ok(report)
}

impl crate::generate::Decoder for MambaDecoder {
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn new_context(&self) -> Result<Context, RunError> {
        self.step.new_context()
    }

    fn step(
        &self,
        context: &mut Context,
        tokens: &[i64],
        pos: usize,
        last: usize,
    ) -> Result<HostTensor, RunError> {
        let shape = [1, tokens.len()];
        let ids =
            TensorRef::new(DType::I64, &shape, bytemuck::cast_slice(tokens)).map_err(|e| {
                RunError::Custom {
                    name: "mamba".into(),
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

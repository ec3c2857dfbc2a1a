//! A compiled [`mamba_step`](super::mamba_step) with its weights: the family as a
//! [`Decoder`](crate::generate::Decoder).

use std::path::Path;

use super::{MambaConfig, MambaConfigError, MambaStep};
use crate::backend::{Context, RunError};
use crate::tensor::HostTensor;
use crate::weights::{LoadReport, Mapped, WeightsError};

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
        // Just compiled: an error drops it, so each weight is bound as it is made.
        let binding = crate::weights::Binding::AsMade;
        load_mamba_bound(&decoder.step, &decoder.config, dir, binding)?;
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
    load_mamba_bound(model, config, dir, crate::weights::Binding::AllAtOnce)
}

/// [`load_mamba_checkpoint`], binding the weights as `binding` says.
fn load_mamba_bound(
    model: &crate::model::Compiled,
    config: &MambaConfig,
    dir: &Path,
    binding: crate::weights::Binding,
) -> Result<LoadReport, WeightsError> {
    let (exe, manifest) = (model.executable(), model.manifest());
    crate::weights::load_hf_folder(
        exe,
        manifest,
        dir,
        |name, value| {
            let copy_of_embeddings = config.tied_output && name == "lm_head.weight";
            (!copy_of_embeddings).then(|| vec![(name.to_string(), Mapped::Stored(value))])
        },
        |tensors| Ok(tensors),
        binding,
    )
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
        crate::generate::run_decoder_step(&self.step, context, tokens, pos, last)
    }
}

//! A compiled [`llama_step`](super::llama_step) with its weights: the family as a
//! [`Decoder`](crate::generate::Decoder).

use super::{
    LlamaBatchConfig, LlamaBatchStep, LlamaCacheConfig, LlamaConfig, LlamaConfigError, LlamaStep,
};
use crate::backend::{Context, RunError};
use crate::gguf::Gguf;
use crate::ir::{ActivationPrecision, DType};
use crate::tensor::{HostTensor, TensorRef};

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
    /// A Hugging Face folder has no readable `config.json`.
    #[error("{path}: {message}")]
    ConfigFile {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A batch decoder of no slots.
    #[error("a batch decoder needs at least one slot")]
    Slots,
    /// The cache holds no position, or more than the model was trained for.
    #[error("a cache of {capacity} positions: the model takes 1 to {context_length}")]
    Capacity {
        /// Positions asked for.
        capacity: usize,
        /// The model's context length.
        context_length: usize,
    },
}

/// A Llama-family decoder ready to generate: its compiled [`llama_step`](super::llama_step) with the weights
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
        LlamaDecoder::from_gguf_keeping(backend, file, capacity, None)
    }

    /// As [`from_gguf`](Self::from_gguf), with the projections the file stores in `Q8_0`,
    /// `Q4_0` or `Q4_1` kept in their blocks and multiplied in place
    /// ([`LlamaConfig::keep_gguf_blocks`]): a decode step reads a quarter to an eighth of
    /// the bytes. `activations` says how the products take their activations: exact
    /// float32, or int8 per block as llama.cpp decodes (faster, within the bound
    /// [`ActivationPrecision`] states).
    pub fn from_gguf_quantized<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
        activations: ActivationPrecision,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        LlamaDecoder::from_gguf_keeping(backend, file, capacity, Some(activations))
    }

    fn from_gguf_keeping<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
        blocks: Option<ActivationPrecision>,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        let decoder = LlamaDecoder::compile(backend, gguf_config(file, blocks)?, capacity)?;
        super::load_gguf_checkpoint(&decoder.step, &decoder.config.model, file)?;
        Ok(decoder)
    }

    /// The model of a Hugging Face folder (`config.json` beside `model.safetensors` or its
    /// shards), compiled for `backend` with caches of `capacity` positions, its weights
    /// loaded by [`load_hf_checkpoint`](super::load_hf_checkpoint).
    pub fn from_hf_dir<B: crate::backend::Backend>(
        backend: &B,
        dir: &std::path::Path,
        capacity: usize,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        let model = hf_config(dir)?;
        let decoder = LlamaDecoder::compile(backend, model, capacity)?;
        super::load_hf_checkpoint(&decoder.step, &decoder.config.model, dir)?;
        Ok(decoder)
    }

    /// The step of `model` with caches of `capacity` positions, compiled, no weights bound.
    fn compile<B: crate::backend::Backend>(
        backend: &B,
        model: LlamaConfig,
        capacity: usize,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        check_capacity(&model, capacity)?;
        let config = LlamaCacheConfig { model, capacity };
        let step = LlamaStep::compile(backend, &config)?;
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

/// The config `file` describes, its block-format projections kept when `keep_blocks`.
/// The config of `file`, its projections kept in blocks when `blocks` says how their
/// products take activations.
fn gguf_config(
    file: &Gguf,
    blocks: Option<ActivationPrecision>,
) -> Result<LlamaConfig, LlamaLoadError> {
    let mut config = LlamaConfig::from_gguf(file)?;
    if let Some(activations) = blocks {
        config.keep_gguf_blocks(file);
        config.block_activations = activations;
    }
    Ok(config)
}

/// The `config.json` of the Hugging Face folder `dir`.
fn hf_config(dir: &std::path::Path) -> Result<LlamaConfig, LlamaLoadError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| LlamaLoadError::ConfigFile {
        path: path.clone(),
        message: e.to_string(),
    })?;
    Ok(LlamaConfig::from_hf_json(&text)?)
}

/// Whether caches of `capacity` positions suit `model`.
fn check_capacity(model: &LlamaConfig, capacity: usize) -> Result<(), LlamaLoadError> {
    if capacity == 0 || capacity > model.context_length {
        return Err(LlamaLoadError::Capacity {
            capacity,
            context_length: model.context_length,
        });
    }
    Ok(())
}

impl crate::generate::Decoder for LlamaDecoder {
    fn vocab_size(&self) -> usize {
        self.config.model.vocab_size
    }

    fn capacity(&self) -> usize {
        self.config.capacity
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
            TensorRef::new(DType::I64, &shape, bytemuck::cast_slice(tokens)).map_err(run_error)?;
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

/// A Llama-family decoder that steps `slots` sequences at once: its compiled
/// [`llama_batch_step`](super::llama_batch_step) with the weights bound, as a
/// [`BatchDecoder`](crate::generate::BatchDecoder) for
/// [`BatchGenerator`](crate::generate::BatchGenerator).
pub struct LlamaBatchDecoder {
    step: LlamaBatchStep,
    config: LlamaBatchConfig,
}

impl std::fmt::Debug for LlamaBatchDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaBatchDecoder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl LlamaBatchDecoder {
    /// The model `file` describes, compiled for `backend` with `slots` sequences of caches
    /// of `capacity` positions each, its weights loaded (dequantized to float32).
    pub fn from_gguf<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
        slots: usize,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        let decoder =
            LlamaBatchDecoder::compile(backend, gguf_config(file, None)?, capacity, slots)?;
        super::load_gguf_checkpoint(&decoder.step, &decoder.config.model, file)?;
        Ok(decoder)
    }

    /// The model of a Hugging Face folder, as [`LlamaDecoder::from_hf_dir`], with `slots`
    /// sequences.
    pub fn from_hf_dir<B: crate::backend::Backend>(
        backend: &B,
        dir: &std::path::Path,
        capacity: usize,
        slots: usize,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        let config = hf_config(dir)?;
        let decoder = LlamaBatchDecoder::compile(backend, config, capacity, slots)?;
        super::load_hf_checkpoint(&decoder.step, &decoder.config.model, dir)?;
        Ok(decoder)
    }

    fn compile<B: crate::backend::Backend>(
        backend: &B,
        model: LlamaConfig,
        capacity: usize,
        slots: usize,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        check_capacity(&model, capacity)?;
        if slots == 0 {
            return Err(LlamaLoadError::Slots);
        }
        let config = LlamaBatchConfig {
            model,
            capacity,
            slots,
        };
        let step = LlamaBatchStep::compile(backend, &config)?;
        Ok(LlamaBatchDecoder { step, config })
    }

    /// The model, cache and batch configuration.
    pub fn config(&self) -> &LlamaBatchConfig {
        &self.config
    }

    /// The compiled step.
    pub fn compiled(&self) -> &LlamaBatchStep {
        &self.step
    }
}

impl crate::generate::BatchDecoder for LlamaBatchDecoder {
    fn vocab_size(&self) -> usize {
        self.config.model.vocab_size
    }

    fn capacity(&self) -> usize {
        self.config.capacity
    }

    fn slots(&self) -> usize {
        self.config.slots
    }

    fn new_context(&self) -> Result<Context, RunError> {
        self.step.new_context()
    }

    fn step(
        &self,
        context: &mut Context,
        tokens: &[i64],
        seq: usize,
        pos: &[usize],
        last: &[usize],
    ) -> Result<HostTensor, RunError> {
        let slots = self.config.slots;
        let shape = [slots, seq];
        let ids =
            TensorRef::new(DType::I64, &shape, bytemuck::cast_slice(tokens)).map_err(run_error)?;
        let pos: Vec<i64> = pos.iter().map(|p| *p as i64).collect();
        let last: Vec<i64> = last.iter().map(|l| *l as i64).collect();
        let rows = [slots];
        let [logits] = self.step.run_in_outputs(
            context,
            &[
                ("input_ids", ids),
                (
                    "pos",
                    TensorRef::new(DType::I64, &rows, bytemuck::cast_slice(&pos))
                        .map_err(run_error)?,
                ),
                (
                    "last",
                    TensorRef::new(DType::I64, &rows, bytemuck::cast_slice(&last))
                        .map_err(run_error)?,
                ),
            ],
        )?;
        Ok(logits)
    }
}

fn run_error(e: impl std::fmt::Display) -> RunError {
    RunError::Custom {
        name: "llama".into(),
        message: e.to_string(),
    }
}

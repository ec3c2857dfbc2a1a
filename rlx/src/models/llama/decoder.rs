//! A compiled [`llama_step`](super::llama_step) with its weights: the family as a
//! [`Decoder`](crate::generate::Decoder).

use super::{LlamaCacheConfig, LlamaConfig, LlamaConfigError, LlamaStep};
use crate::gguf::Gguf;

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
        let decoder = LlamaDecoder::compile(backend, LlamaConfig::from_gguf(file)?, capacity)?;
        decoder.step.load_gguf(file)?;
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
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| LlamaLoadError::ConfigFile {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let model = LlamaConfig::from_hf_json(&text)?;
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
        if capacity == 0 || capacity > model.context_length {
            return Err(LlamaLoadError::Capacity {
                capacity,
                context_length: model.context_length,
            });
        }
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

impl crate::generate::Decoder for LlamaDecoder {
    fn vocab_size(&self) -> usize {
        self.config.model.vocab_size
    }

    fn capacity(&self) -> usize {
        self.config.capacity
    }

    fn new_context(&self) -> Result<crate::backend::Context, crate::backend::RunError> {
        self.step.new_context()
    }

    fn step(
        &self,
        context: &mut crate::backend::Context,
        tokens: &[i64],
        pos: usize,
        last: usize,
    ) -> Result<crate::tensor::HostTensor, crate::backend::RunError> {
        use crate::ir::DType;
        use crate::tensor::TensorRef;
        let shape = [1, tokens.len()];
        let ids =
            TensorRef::new(DType::I64, &shape, bytemuck::cast_slice(tokens)).map_err(|e| {
                crate::backend::RunError::Custom {
                    name: "llama".into(),
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

//! A compiled [`llama_step`](super::llama_step) with its weights: the family as a
//! [`Decoder`](crate::generate::Decoder).

use super::{
    LlamaBatchConfig, LlamaBatchStep, LlamaCacheConfig, LlamaConfig, LlamaConfigError, LlamaStep,
};
use crate::backend::{Context, RunError};
use crate::gguf::Gguf;
use crate::ir::{ActivationPrecision, DType};
use crate::tensor::{HostTensor, TensorRef};
use crate::weights::Binding::AsMade;

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
    /// The weights cannot be quantized into the format asked for.
    #[error(transparent)]
    Quantize(#[from] crate::gguf::QuantizeError),
    /// The GGUF file is unreadable or malformed.
    #[error(transparent)]
    File(#[from] crate::gguf::GgufError),
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

    /// As [`from_gguf`](Self::from_gguf), with the projections the file stores in a block
    /// format (`Q8_0`, `Q4_*`, `Q5_*`, the K-quants) kept in their blocks and multiplied in
    /// place ([`LlamaConfig::keep_gguf_blocks`]): a decode step reads a quarter to an eighth
    /// of the bytes. `quantization` says how the products take their activations — exact
    /// float32, or int8 per block as llama.cpp decodes (faster, within the bound
    /// [`ActivationPrecision`] states) — and whether the file's float projections are
    /// quantized as they load ([`Quantization::float_weights`]).
    pub fn from_gguf_quantized<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
        quantization: impl Into<Quantization>,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        LlamaDecoder::from_gguf_keeping(backend, file, capacity, Some(quantization.into()))
    }

    fn from_gguf_keeping<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
        blocks: Option<Quantization>,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        let decoder = LlamaDecoder::compile(backend, gguf_config(file, blocks)?, capacity)?;
        super::checkpoint::load_gguf_bound(&decoder.step, &decoder.config.model, file, AsMade)?;
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
        LlamaDecoder::from_hf_keeping(backend, dir, capacity, None)
    }

    /// As [`from_hf_dir`](Self::from_hf_dir), with the projections quantized into
    /// `quantization`'s [`float_weights`](Quantization::float_weights) format as they load
    /// ([`LlamaConfig::quantize_projections`]) and multiplied in place.
    ///
    /// ```no_run
    /// use rlx::gguf::GgmlType;
    /// use rlx::ir::ActivationPrecision;
    /// use rlx::models::llama::{LlamaDecoder, Quantization};
    /// let quantization = Quantization::from(ActivationPrecision::Int8).quantizing(GgmlType::Q8_0);
    /// let backend = rlx::cpu::CpuBackend::default();
    /// let decoder = LlamaDecoder::from_hf_dir_quantized(
    ///     &backend,
    ///     "SmolLM2-135M-Instruct".as_ref(),
    ///     1024,
    ///     quantization,
    /// )?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_hf_dir_quantized<B: crate::backend::Backend>(
        backend: &B,
        dir: &std::path::Path,
        capacity: usize,
        quantization: Quantization,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        LlamaDecoder::from_hf_keeping(backend, dir, capacity, Some(quantization))
    }

    fn from_hf_keeping<B: crate::backend::Backend>(
        backend: &B,
        dir: &std::path::Path,
        capacity: usize,
        blocks: Option<Quantization>,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        let decoder = LlamaDecoder::compile(backend, hf_config(dir, blocks)?, capacity)?;
        super::checkpoint::load_hf_bound(&decoder.step, &decoder.config.model, dir, AsMade)?;
        Ok(decoder)
    }

    /// The step of `model` with caches of `capacity` positions, compiled, no weights bound.
    pub(super) fn compile<B: crate::backend::Backend>(
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

/// Which projection weights a decoder keeps in GGUF blocks beyond those a file stores in
/// blocks, and how products with blocks take their activations. From an
/// [`ActivationPrecision`] alone: a file's own blocks kept, its floats left float.
///
/// ```
/// use rlx::gguf::GgmlType;
/// use rlx::ir::ActivationPrecision;
/// use rlx::models::llama::Quantization;
/// let q = Quantization::from(ActivationPrecision::Int8).quantizing(GgmlType::Q4_0);
/// assert_eq!(q.float_weights, Some(GgmlType::Q4_0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantization {
    /// How products with weights kept in blocks take their activations.
    pub activations: ActivationPrecision,
    /// The format float projection weights are quantized into as they load
    /// ([`LlamaConfig::quantize_projections`]); `None` leaves them float32.
    pub float_weights: Option<crate::gguf::GgmlType>,
    /// How the key/value caches hold their rows ([`LlamaConfig::kv_cache`]).
    pub kv_cache: super::KvCacheFormat,
}

impl Quantization {
    /// The same, with float projections quantized into `format` as they load.
    pub fn quantizing(self, format: crate::gguf::GgmlType) -> Quantization {
        Quantization {
            float_weights: Some(format),
            ..self
        }
    }

    /// The same, with key/value caches in `format`.
    pub fn with_kv_cache(self, format: super::KvCacheFormat) -> Quantization {
        Quantization {
            kv_cache: format,
            ..self
        }
    }

    /// Sets `config`'s activations, cache format and the formats of its float projections (after
    /// [`LlamaConfig::keep_gguf_blocks`], for a GGUF file's).
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// use rlx::ir::ActivationPrecision;
    /// use rlx::models::llama::{LlamaConfig, Quantization};
    /// let mut config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
    /// Quantization::from(ActivationPrecision::Int8)
    ///     .quantizing(GgmlType::Q4_0)
    ///     .apply_to(&mut config)?;
    /// assert_eq!(config.block_activations, ActivationPrecision::Int8);
    /// # Ok::<(), rlx::gguf::QuantizeError>(())
    /// ```
    pub fn apply_to(self, config: &mut LlamaConfig) -> Result<(), crate::gguf::QuantizeError> {
        config.block_activations = self.activations;
        config.kv_cache = self.kv_cache;
        match self.float_weights {
            Some(format) => config.quantize_projections(format),
            None => Ok(()),
        }
    }
}

impl From<ActivationPrecision> for Quantization {
    fn from(activations: ActivationPrecision) -> Quantization {
        Quantization {
            activations,
            float_weights: None,
            kv_cache: super::KvCacheFormat::F32,
        }
    }
}

/// The config of `file`, its block-format projections kept (and its float ones quantized
/// where asked) when `blocks` is given.
pub(super) fn gguf_config(
    file: &Gguf,
    blocks: Option<Quantization>,
) -> Result<LlamaConfig, LlamaLoadError> {
    let mut config = LlamaConfig::from_gguf(file)?;
    if let Some(quantization) = blocks {
        config.keep_gguf_blocks(file);
        quantization.apply_to(&mut config)?;
    }
    Ok(config)
}

/// The `config.json` of the Hugging Face folder `dir`, quantized as `blocks` says if given.
pub(super) fn hf_config(
    dir: &std::path::Path,
    blocks: Option<Quantization>,
) -> Result<LlamaConfig, LlamaLoadError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| LlamaLoadError::ConfigFile {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let mut config = LlamaConfig::from_hf_json(&text)?;
    if let Some(quantization) = blocks {
        quantization.apply_to(&mut config)?;
    }
    Ok(config)
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
        crate::generate::run_decoder_step(&self.step, context, tokens, pos, last)
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
        LlamaBatchDecoder::from_gguf_keeping(backend, file, capacity, slots, None)
    }

    /// The model `file` describes with its projections kept in blocks, as
    /// [`LlamaDecoder::from_gguf_quantized`], with `slots` sequences.
    pub fn from_gguf_quantized<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
        slots: usize,
        quantization: impl Into<Quantization>,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        let blocks = Some(quantization.into());
        LlamaBatchDecoder::from_gguf_keeping(backend, file, capacity, slots, blocks)
    }

    fn from_gguf_keeping<B: crate::backend::Backend>(
        backend: &B,
        file: &Gguf,
        capacity: usize,
        slots: usize,
        blocks: Option<Quantization>,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        let config = gguf_config(file, blocks)?;
        let decoder = LlamaBatchDecoder::compile(backend, config, capacity, slots)?;
        super::checkpoint::load_gguf_bound(&decoder.step, &decoder.config.model, file, AsMade)?;
        Ok(decoder)
    }

    /// The model of a Hugging Face folder quantized as it loads, as
    /// [`LlamaDecoder::from_hf_dir_quantized`], with `slots` sequences.
    pub fn from_hf_dir_quantized<B: crate::backend::Backend>(
        backend: &B,
        dir: &std::path::Path,
        capacity: usize,
        slots: usize,
        quantization: Quantization,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        LlamaBatchDecoder::from_hf_keeping(backend, dir, capacity, slots, Some(quantization))
    }

    fn from_hf_keeping<B: crate::backend::Backend>(
        backend: &B,
        dir: &std::path::Path,
        capacity: usize,
        slots: usize,
        blocks: Option<Quantization>,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        let config = hf_config(dir, blocks)?;
        let decoder = LlamaBatchDecoder::compile(backend, config, capacity, slots)?;
        super::checkpoint::load_hf_bound(&decoder.step, &decoder.config.model, dir, AsMade)?;
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
        LlamaBatchDecoder::from_hf_keeping(backend, dir, capacity, slots, None)
    }

    pub(super) fn compile<B: crate::backend::Backend>(
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

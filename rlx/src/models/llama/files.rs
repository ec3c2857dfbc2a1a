//! A Llama-family model's files, whichever form they come in: one GGUF file, or a Hugging
//! Face folder. What a program that takes `--model PATH` opens.

use std::path::{Path, PathBuf};

use super::{LlamaBatchDecoder, LlamaConfig, LlamaDecoder, LlamaLoadError, Quantization};
use crate::backend::Backend;
use crate::gguf::Gguf;
use crate::weights::Binding;

/// A Llama-family model's files: a GGUF file (weights, tokenizer and chat template in
/// one), or a Hugging Face folder (`config.json`, safetensors, `tokenizer.json`,
/// `tokenizer_config.json`).
///
/// ```no_run
/// use rlx::cpu::CpuBackend;
/// use rlx::models::llama::LlamaFiles;
///
/// let files = LlamaFiles::open("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
/// let context = files.config()?.context_length.min(2048);
/// let decoder = files.decoder(&CpuBackend::default(), context, None)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub enum LlamaFiles {
    /// A GGUF file.
    Gguf(Gguf),
    /// A Hugging Face folder.
    HuggingFace(PathBuf),
}

impl LlamaFiles {
    /// The folder at `path`, or the GGUF file (its header and tensor table read).
    pub fn open(path: &Path) -> Result<LlamaFiles, LlamaLoadError> {
        Ok(if path.is_dir() {
            LlamaFiles::HuggingFace(path.to_path_buf())
        } else {
            LlamaFiles::Gguf(Gguf::open(path)?)
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> Result<LlamaConfig, LlamaLoadError> {
        self.config_for(None)
    }

    /// The configuration [`decoder`](Self::decoder) compiles for `quantization`: the
    /// file's blocks kept, float projections quantized and caches formatted as it says
    /// (the model's own without it). Change it (room for adapters, say) and compile it
    /// with [`decoder_for`](Self::decoder_for).
    pub fn config_for(
        &self,
        quantization: Option<Quantization>,
    ) -> Result<LlamaConfig, LlamaLoadError> {
        match self {
            LlamaFiles::Gguf(file) => super::decoder::gguf_config(file, quantization),
            LlamaFiles::HuggingFace(dir) => super::decoder::hf_config(dir, quantization),
        }
    }

    /// The model's tokenizer.
    #[cfg(feature = "text")]
    pub fn tokenizer(
        &self,
    ) -> Result<crate::tokenizer::Tokenizer, crate::tokenizer::TokenizerError> {
        match self {
            LlamaFiles::Gguf(file) => crate::tokenizer::Tokenizer::from_gguf(file),
            LlamaFiles::HuggingFace(dir) => crate::tokenizer::Tokenizer::from_hf_dir(dir),
        }
    }

    /// The model's chat template.
    #[cfg(feature = "text")]
    pub fn chat_template(
        &self,
        tokenizer: &crate::tokenizer::Tokenizer,
    ) -> Result<crate::generate::ChatTemplate, crate::generate::GenerateError> {
        match self {
            LlamaFiles::Gguf(file) => crate::generate::ChatTemplate::from_gguf(file, tokenizer),
            LlamaFiles::HuggingFace(dir) => crate::generate::ChatTemplate::from_hf_dir(dir),
        }
    }

    /// Binds the weights of the files to `exe`, an executable of a model of `config`
    /// whose params `manifest` lists, leaving adapter params alone: a fine-tuning step's
    /// frozen base (the params of a [`Trainer`](crate::train::Trainer)'s
    /// [`executable`](crate::train::Trainer::executable), with the manifest of
    /// [`LlamaLoss`](super::LlamaLoss)). Weights are dequantized to float32, or kept in the
    /// blocks `config` keeps them in.
    pub fn load_weights(
        &self,
        exe: &dyn crate::backend::Executable,
        manifest: &crate::params::Manifest,
        config: &LlamaConfig,
    ) -> Result<crate::weights::LoadReport, LlamaLoadError> {
        self.load_weights_bound(exe, manifest, config, Binding::AllAtOnce)
    }

    /// [`load_weights`](Self::load_weights), a GGUF file's weights bound as `binding` says.
    fn load_weights_bound(
        &self,
        exe: &dyn crate::backend::Executable,
        manifest: &crate::params::Manifest,
        config: &LlamaConfig,
        binding: Binding,
    ) -> Result<crate::weights::LoadReport, LlamaLoadError> {
        Ok(match self {
            LlamaFiles::Gguf(file) => {
                super::checkpoint::load_gguf_weights(exe, manifest, config, file, binding)?
            }
            LlamaFiles::HuggingFace(dir) => {
                super::checkpoint::load_hf_weights(exe, manifest, config, dir, binding)?
            }
        })
    }

    /// The model compiled for `backend` with caches of `capacity` positions: weights
    /// dequantized to float32, or kept and quantized as `quantization` says.
    pub fn decoder<B: Backend>(
        &self,
        backend: &B,
        capacity: usize,
        quantization: Option<Quantization>,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        match (self, quantization) {
            (LlamaFiles::Gguf(file), Some(q)) => {
                LlamaDecoder::from_gguf_quantized(backend, file, capacity, q)
            }
            (LlamaFiles::Gguf(file), None) => LlamaDecoder::from_gguf(backend, file, capacity),
            (LlamaFiles::HuggingFace(dir), Some(q)) => {
                LlamaDecoder::from_hf_dir_quantized(backend, dir, capacity, q)
            }
            (LlamaFiles::HuggingFace(dir), None) => {
                LlamaDecoder::from_hf_dir(backend, dir, capacity)
            }
        }
    }

    /// The model of `config` (the files' own, changed: room for adapters, weights kept in
    /// blocks) compiled for `backend` with caches of `capacity` positions, the files'
    /// weights bound and adapters zero (bind one with
    /// [`LoraAdapter::bind`](super::LoraAdapter::bind)).
    pub fn decoder_for<B: Backend>(
        &self,
        backend: &B,
        config: LlamaConfig,
        capacity: usize,
    ) -> Result<LlamaDecoder, LlamaLoadError> {
        let decoder = LlamaDecoder::compile(backend, config, capacity)?;
        self.bind_base(decoder.compiled(), &decoder.config().model)?;
        Ok(decoder)
    }

    /// As [`decoder_for`](Self::decoder_for), stepping `slots` sequences at once.
    pub fn batch_decoder_for<B: Backend>(
        &self,
        backend: &B,
        config: LlamaConfig,
        capacity: usize,
        slots: usize,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        let decoder = LlamaBatchDecoder::compile(backend, config, capacity, slots)?;
        self.bind_base(decoder.compiled(), &decoder.config().model)?;
        Ok(decoder)
    }

    /// The files' weights and zero adapters, bound to `model` of `config`.
    fn bind_base(
        &self,
        model: &crate::model::Compiled,
        config: &LlamaConfig,
    ) -> Result<(), LlamaLoadError> {
        // Just compiled: an error drops it, so each weight is bound as it is made.
        self.load_weights_bound(
            model.executable(),
            model.manifest(),
            config,
            Binding::AsMade,
        )?;
        super::checkpoint::zero_adapters(model).map_err(crate::weights::WeightsError::from)?;
        Ok(())
    }

    /// As [`LlamaFiles::decoder`], stepping `slots` sequences at once.
    pub fn batch_decoder<B: Backend>(
        &self,
        backend: &B,
        capacity: usize,
        slots: usize,
        quantization: Option<Quantization>,
    ) -> Result<LlamaBatchDecoder, LlamaLoadError> {
        match (self, quantization) {
            (LlamaFiles::Gguf(file), Some(q)) => {
                LlamaBatchDecoder::from_gguf_quantized(backend, file, capacity, slots, q)
            }
            (LlamaFiles::Gguf(file), None) => {
                LlamaBatchDecoder::from_gguf(backend, file, capacity, slots)
            }
            (LlamaFiles::HuggingFace(dir), Some(q)) => {
                LlamaBatchDecoder::from_hf_dir_quantized(backend, dir, capacity, slots, q)
            }
            (LlamaFiles::HuggingFace(dir), None) => {
                LlamaBatchDecoder::from_hf_dir(backend, dir, capacity, slots)
            }
        }
    }
}

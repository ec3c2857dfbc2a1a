//! A Llama-family model's files, whichever form they come in: one GGUF file, or a Hugging
//! Face folder. What a program that takes `--model PATH` opens.

use std::path::{Path, PathBuf};

use super::{LlamaBatchDecoder, LlamaConfig, LlamaDecoder, LlamaLoadError, Quantization};
use crate::backend::Backend;
use crate::gguf::Gguf;

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
        match self {
            LlamaFiles::Gguf(file) => Ok(LlamaConfig::from_gguf(file)?),
            LlamaFiles::HuggingFace(dir) => super::decoder::hf_config(dir, None),
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

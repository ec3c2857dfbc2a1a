//! Weight files: loading safetensors checkpoints into compiled models and saving them back.
//!
//! Loading checks the whole file against the model's [`Manifest`](crate::params::Manifest) before binding anything,
//! and reports every missing, unexpected and mismatched tensor in one error. Checkpoint
//! layouts declared with `#[param(transpose)]` and `#[param(split(..))]` are undone once, at
//! load time; saving applies them again, so a saved file loads back into the same model.

mod gguf;
mod hf_folder;
mod layout;
mod safetensors;

pub use self::gguf::load_gguf;
pub(crate) use self::gguf::load_gguf_with;
pub(crate) use self::hf_folder::{Mapped, load_hf_folder};

pub use self::safetensors::{
    load_safetensors, load_tensors, read_tensors, save_safetensors, save_tensors,
};

use std::fmt;
use std::path::PathBuf;

use crate::backend::RunError;
use crate::ir::{DType, TensorType};

/// How strictly a checkpoint is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Convert float tensors (f16, bf16, f32, f64) to the declared float dtype instead of
    /// reporting a dtype mismatch.
    pub convert_floats: bool,
    /// Ignore checkpoint tensors the model does not declare (for example a pooler head the
    /// model does not use) instead of reporting them.
    pub allow_unexpected: bool,
}

/// What a successful load did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Params bound.
    pub loaded: usize,
    /// Checkpoint tensors converted to another float dtype.
    pub converted: Vec<String>,
    /// Checkpoint tensors left unused (only with [`LoadOptions::allow_unexpected`]).
    pub ignored: Vec<String>,
    /// Float checkpoint tensors quantized into the block format the model keeps them in
    /// ([`ParamSpec::format`](crate::params::ParamSpec)).
    pub quantized: Vec<String>,
}

/// The blocks of `format` holding `value`, the f32 values of checkpoint tensor `key`
/// (`[rows, values]`, rows of whole blocks): a float checkpoint bound to a weight the model
/// keeps in blocks; a value blocks cannot hold is an error naming `key` in `path`.
pub(crate) fn quantize_tensor(
    path: &std::path::Path,
    key: &str,
    format: crate::gguf::GgmlType,
    value: &[f32],
) -> Result<Vec<u8>, WeightsError> {
    let mut blocks = Vec::new();
    crate::gguf::quantize(format, value, &mut blocks).map_err(|source| WeightsError::Quantize {
        path: path.to_path_buf(),
        key: key.to_string(),
        source,
    })?;
    Ok(blocks)
}

/// One checkpoint tensor that does not fit its declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The checkpoint key.
    pub key: String,
    /// What the model declares (`f32[384,384]`).
    pub expected: String,
    /// What the file holds.
    pub found: String,
}

/// When a loader binds the weights it makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binding {
    /// All in one call once every one is made: the weights change all at once, and the
    /// values of the whole model wait in memory beside the executable's.
    AllAtOnce,
    /// Each tensor's as soon as it is made: for an executable just compiled, which an error
    /// discards, so that no more than one tensor's values wait (a dequantized model's
    /// loading then peaks near its size rather than twice it).
    AsMade,
}

/// Why weights could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The file could not be opened, mapped or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a valid safetensors file (corrupt or truncated).
    #[error("{path} is not a valid safetensors file: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        message: String,
    },
    /// The GGUF file is invalid, or a tensor cannot be dequantized.
    #[error("{path}: {source}")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: crate::gguf::GgufError,
    },
    /// The file's tensors do not match the model's manifest.
    #[error("{path} does not match the model:{}", Listing { missing, unexpected, mismatched })]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Declared tensors the file lacks.
        missing: Vec<String>,
        /// File tensors the model does not declare.
        unexpected: Vec<String>,
        /// Tensors with the wrong dtype or dims.
        mismatched: Vec<Mismatch>,
    },
    /// A file tensor's dtype has no RLX equivalent.
    #[error("{path}: tensor {key:?} has dtype {dtype}, which RLX cannot hold")]
    UnsupportedDType {
        /// The file.
        path: PathBuf,
        /// The tensor.
        key: String,
        /// The file's dtype name.
        dtype: String,
    },
    /// The backend refused a weight, or has none bound under a name.
    #[error(transparent)]
    Backend(#[from] RunError),
    /// A float tensor the model keeps in a block format could not be quantized into it
    /// (a NaN or infinite value, or a block whose scale overflows f16).
    #[error("{path}: tensor {key:?}: {source}")]
    Quantize {
        /// The checkpoint.
        path: PathBuf,
        /// The checkpoint key.
        key: String,
        /// Why.
        source: crate::gguf::QuantizeError,
    },
    /// The manifest cannot be saved as a checkpoint (a split tensor lacks a part).
    #[error("cannot save {key:?}: {reason}")]
    Layout {
        /// The checkpoint key.
        key: String,
        /// Why.
        reason: String,
    },
}

/// The lists of a [`WeightsError::Mismatch`], one line per tensor.
struct Listing<'a> {
    missing: &'a [String],
    unexpected: &'a [String],
    mismatched: &'a [Mismatch],
}

impl fmt::Display for Listing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for key in self.missing {
            write!(f, "\n  missing: {key}")?;
        }
        for key in self.unexpected {
            write!(f, "\n  unexpected: {key}")?;
        }
        for m in self.mismatched {
            write!(
                f,
                "\n  mismatched: {} is {}, expected {}",
                m.key, m.found, m.expected
            )?;
        }
        Ok(())
    }
}

/// `f32[384,384]`.
fn describe(dtype: DType, shape: &[usize]) -> String {
    TensorType::new(dtype, shape).to_string()
}

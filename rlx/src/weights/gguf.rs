//! Loading a model's weights from a GGUF file, each tensor dequantized to the model's
//! float type.

use std::borrow::Cow;
use std::path::PathBuf;

use super::safetensors::{ParamValue, bind, param_values};
use super::{LoadReport, Mismatch, WeightsError, describe};
use crate::backend::Executable;
use crate::gguf::Gguf;
use crate::ir::DType;
use crate::params::Manifest;

/// Binds every weight of `manifest` from `file`, strictly: every tensor the model declares
/// must be in the file with its dims (GGUF's reversed), and every file tensor must be
/// declared, but for `read_elsewhere` (tensors the caller took its configuration from).
/// Weights the model keeps in a block format ([`ParamSpec::format`](crate::params::ParamSpec))
/// are bound from the file's blocks as they are, when the file has that format; other
/// quantized tensors are dequantized exactly (see [`crate::gguf::dequantize`]); the model's
/// params must be `f32`. The weights change all at once, as with safetensors.
pub fn load_gguf(
    exe: &dyn Executable,
    manifest: &Manifest,
    file: &Gguf,
    read_elsewhere: &[&str],
) -> Result<LoadReport, WeightsError> {
    let path = file
        .path()
        .map_or_else(|| PathBuf::from("<GGUF in memory>"), PathBuf::from);
    let files = manifest.file_tensors();
    let (mut missing, mut unexpected, mut mismatched) = (Vec::new(), Vec::new(), Vec::new());
    for f in &files {
        match file.tensor(&f.key) {
            Err(_) => missing.push(f.key.clone()),
            Ok(info) => {
                let fits = match f.format {
                    // Kept as blocks: the very format.
                    Some(format) => info.kind == format,
                    None => info.kind.dequantizes() && f.dtype == DType::F32,
                };
                if !fits || info.shape() != f.shape {
                    let expected = match f.format {
                        Some(format) => format!("{format}{:?}", f.shape),
                        None => describe(f.dtype, &f.shape),
                    };
                    mismatched.push(Mismatch {
                        key: f.key.clone(),
                        expected,
                        found: format!("{}{:?}", info.kind, info.shape()),
                    });
                }
            }
        }
    }
    for info in file.tensors() {
        if !files.iter().any(|f| f.key == info.name)
            && !read_elsewhere.contains(&info.name.as_str())
        {
            unexpected.push(info.name.clone());
        }
    }
    if !(missing.is_empty() && unexpected.is_empty() && mismatched.is_empty()) {
        unexpected.sort();
        return Err(WeightsError::Mismatch {
            path,
            missing,
            unexpected,
            mismatched,
        });
    }
    let gguf_error = |source| WeightsError::Gguf {
        path: path.clone(),
        source,
    };
    // Float weights dequantized; weights kept as blocks bound from the file's bytes.
    let tensors = files
        .iter()
        .map(|f| match f.format {
            Some(_) => Ok(None),
            None => file.tensor_f32(&f.key).map(Some),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(gguf_error)?;
    let mut values: Vec<ParamValue<'_>> = Vec::with_capacity(manifest.params.len());
    for (f, t) in files.iter().zip(&tensors) {
        match t {
            Some(t) => values.extend(param_values(manifest, f, Cow::Borrowed(t.view().bytes))),
            None => {
                let bytes = file.tensor_bytes(&f.key).map_err(gguf_error)?;
                for &i in &f.params {
                    let spec = &manifest.params[i];
                    values.push(ParamValue {
                        name: &spec.name,
                        dtype: DType::U8,
                        shape: spec.static_shape().unwrap_or_default(),
                        bytes: Cow::Borrowed(bytes),
                    });
                }
            }
        }
    }
    Ok(LoadReport {
        loaded: bind(exe, &values)?,
        ..LoadReport::default()
    })
}

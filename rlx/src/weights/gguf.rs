//! Loading a model's weights from a GGUF file, each tensor dequantized to the model's
//! float type.

use std::path::PathBuf;

use super::safetensors::{ParamValue, ValueBytes, bind, block_values, param_values};
use super::{Binding, LoadReport, Mismatch, WeightsError, describe};
use crate::backend::Executable;
use crate::gguf::{GgmlType, Gguf};
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
    load_gguf_with(exe, manifest, file, read_elsewhere, &[], Binding::AllAtOnce)
}

/// [`load_gguf`] with some weights already made from other tensors of the file
/// (`assembled`, name and f32 value: a mixture's experts stored one tensor each, stacked),
/// whose source tensors the caller lists in `read_elsewhere`.
pub(crate) fn load_gguf_with(
    exe: &dyn Executable,
    manifest: &Manifest,
    file: &Gguf,
    read_elsewhere: &[&str],
    assembled: &[(String, crate::tensor::HostTensor)],
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    let given = |key: &str| assembled.iter().find(|(n, _)| n == key).map(|(_, t)| t);
    let path = file
        .path()
        .map_or_else(|| PathBuf::from("<GGUF in memory>"), PathBuf::from);
    let files = manifest.file_tensors();
    let (mut missing, mut unexpected, mut mismatched) = (Vec::new(), Vec::new(), Vec::new());
    for f in &files {
        if let Some(t) = given(&f.key) {
            if t.shape() != f.shape || f.format.is_some() || f.dtype != DType::F32 {
                mismatched.push(Mismatch {
                    key: f.key.clone(),
                    expected: describe(f.dtype, &f.shape),
                    found: describe(t.dtype(), t.shape()),
                });
            }
            continue;
        }
        match file.tensor(&f.key) {
            Err(_) => missing.push(f.key.clone()),
            Ok(info) => {
                let fits = match f.format {
                    // Kept as blocks: the very format, or floats quantized into it.
                    Some(format) => info.kind == format || is_float(info.kind),
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
    // Each tensor's values made as its source is read: float weights dequantized (the
    // floats move into the value, or are dropped once transposed), weights kept as blocks
    // borrowed from the file or quantized from its floats. Only the values, not their
    // sources beside them, wait to be bound.
    let mut report = LoadReport::default();
    let mut values: Vec<ParamValue<'_>> = Vec::with_capacity(manifest.params.len());
    for f in &files {
        let made = match given(&f.key) {
            Some(t) => param_values(manifest, f, ValueBytes::Borrowed(t.view().bytes)),
            None => match (file.tensor(&f.key).map_err(gguf_error)?.kind, f.format) {
                (kind, Some(format)) if kind == format => block_values(
                    manifest,
                    f,
                    ValueBytes::Borrowed(file.tensor_bytes(&f.key).map_err(gguf_error)?),
                ),
                (_, Some(format)) => {
                    let floats = file.tensor_f32_values(&f.key).map_err(gguf_error)?;
                    report.quantized.push(f.key.clone());
                    let blocks = super::quantize_tensor(&path, &f.key, format, &floats)?;
                    block_values(manifest, f, ValueBytes::Bytes(blocks))
                }
                (_, None) => {
                    let floats = file.tensor_f32_values(&f.key).map_err(gguf_error)?;
                    param_values(manifest, f, ValueBytes::Floats(floats))
                }
            },
        };
        values.extend(made);
        if binding == Binding::AsMade {
            report.loaded += bind(exe, &values)?;
            values.clear();
        }
    }
    report.loaded += bind(exe, &values)?;
    Ok(report)
}

/// Whether a GGUF tensor type holds plain floats (quantized at load into a block format the
/// model keeps).
fn is_float(kind: GgmlType) -> bool {
    matches!(
        kind,
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::F64
    )
}

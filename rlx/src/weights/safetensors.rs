//! The safetensors format, through the `safetensors` crate, memory-mapped with `memmap2`.

use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensorError, SafeTensors, View};

use super::layout::{join_parts, split_part, transpose_last2};
use super::{Binding, LoadOptions, LoadReport, Mismatch, WeightsError, describe};
use crate::backend::Executable;
use crate::ir::DType;
use crate::params::Manifest;
use crate::params::manifest::{FileTensor, resolve_axis};
use crate::tensor::{HostTensor, TensorRef};

fn from_file_dtype(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

fn to_file_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F64 => Dtype::F64,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::I8 => Dtype::I8,
        DType::U8 => Dtype::U8,
        DType::Bool => Dtype::BOOL,
    }
}

/// Loads the weights of `manifest` from the safetensors file at `path` into `exe`.
///
/// Nothing is bound unless the whole file checks out; the error then lists every missing,
/// unexpected and mismatched tensor. Every weight is then bound in one
/// [`Executable::set_weights`], so runs on other threads see the old weights or the new
/// ones, never a mixture. Tensors that need no layout change or conversion go from the
/// mapped file to the backend with one copy.
pub fn load_safetensors(
    exe: &dyn Executable,
    manifest: &Manifest,
    path: &Path,
    options: &LoadOptions,
) -> Result<LoadReport, WeightsError> {
    let io = |source| WeightsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and lives only for this call. Like every memory-mapped
    // reader, this assumes no other process truncates the file while we read it.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    let st = SafeTensors::deserialize(&map).map_err(|e| format_error(path, e))?;
    let mut tensors = Vec::new();
    let mut unreadable = Vec::new();
    for (name, view) in st.tensors() {
        match from_file_dtype(view.dtype()) {
            Some(dtype) => tensors.push((name, dtype, view)),
            None => unreadable.push((
                name.clone(),
                format!("{:?}{:?}", view.dtype(), view.shape()),
            )),
        }
    }
    let named: Vec<(&str, TensorRef<'_>)> = tensors
        .iter()
        .map(|(name, dtype, view)| {
            let value = TensorRef {
                dtype: *dtype,
                shape: view.shape(),
                bytes: view.data(),
            };
            (name.as_str(), value)
        })
        .collect();
    load_checked(
        exe,
        manifest,
        path,
        &named,
        unreadable,
        options,
        Binding::AllAtOnce,
    )
}

/// Binds `tensors` (checkpoint key → value, from any source) as the weights of
/// `manifest`, as strictly as [`load_safetensors`] binds a file's: nothing is bound unless
/// every declared tensor is there with its dtype (or, with
/// [`LoadOptions::convert_floats`], any float dtype) and dims, and nothing undeclared is
/// (unless [`LoadOptions::allow_unexpected`]); `source` names the tensors' origin in
/// errors. For checkpoints whose names or values need mapping first (a Hugging Face
/// decoder's names onto GGUF's).
pub fn load_tensors(
    exe: &dyn Executable,
    manifest: &Manifest,
    source: &Path,
    tensors: &[(&str, TensorRef<'_>)],
    options: &LoadOptions,
) -> Result<LoadReport, WeightsError> {
    load_tensors_bound(exe, manifest, source, tensors, options, Binding::AllAtOnce)
}

/// [`load_tensors`], binding the weights as `binding` says.
pub(crate) fn load_tensors_bound(
    exe: &dyn Executable,
    manifest: &Manifest,
    source: &Path,
    tensors: &[(&str, TensorRef<'_>)],
    options: &LoadOptions,
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    load_checked(exe, manifest, source, tensors, Vec::new(), options, binding)
}

/// [`load_tensors`], with tensors of dtypes RLX cannot hold (`unreadable`: key and what
/// the file holds) reported as mismatched where the model declares them and as
/// unexpected elsewhere.
fn load_checked(
    exe: &dyn Executable,
    manifest: &Manifest,
    path: &Path,
    tensors: &[(&str, TensorRef<'_>)],
    unreadable: Vec<(String, String)>,
    options: &LoadOptions,
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    let files = manifest.file_tensors();
    let by_name: std::collections::HashMap<&str, &TensorRef<'_>> =
        tensors.iter().map(|(name, value)| (*name, value)).collect();
    let declared: std::collections::HashSet<&str> = files.iter().map(|f| f.key.as_str()).collect();
    let (mut missing, mut unexpected, mut mismatched) = (Vec::new(), Vec::new(), Vec::new());
    let mut report = LoadReport::default();
    // The tensors found while checking, in `files` order, are the ones bound below.
    let mut found = Vec::with_capacity(files.len());
    for f in &files {
        let Some(&value) = by_name.get(f.key.as_str()) else {
            match unreadable.iter().find(|(key, _)| *key == f.key) {
                Some((_, found)) => mismatched.push(Mismatch {
                    key: f.key.clone(),
                    expected: describe(f.dtype, &f.shape),
                    found: found.clone(),
                }),
                None => missing.push(f.key.clone()),
            }
            continue;
        };
        let dtype_ok = match value.dtype {
            // Kept in blocks: quantized from any float tensor of the file's dims.
            d if f.format.is_some() => d.is_float(),
            d if d == f.dtype => true,
            d if options.convert_floats && d.is_float() && f.dtype.is_float() => {
                report.converted.push(f.key.clone());
                true
            }
            _ => false,
        };
        if !dtype_ok || value.shape != f.shape.as_slice() {
            mismatched.push(Mismatch {
                key: f.key.clone(),
                expected: match f.format {
                    Some(format) => format!("a float tensor {:?} (kept as {format})", f.shape),
                    None => describe(f.dtype, &f.shape),
                },
                found: describe(value.dtype, value.shape),
            });
        }
        found.push(*value);
    }
    let names = tensors
        .iter()
        .map(|(name, _)| *name)
        .chain(unreadable.iter().map(|(key, _)| key.as_str()));
    for name in names {
        if !declared.contains(name) {
            if options.allow_unexpected {
                report.ignored.push(name.to_string());
            } else {
                unexpected.push(name.to_string());
            }
        }
    }
    if !(missing.is_empty() && unexpected.is_empty() && mismatched.is_empty()) {
        unexpected.sort();
        return Err(WeightsError::Mismatch {
            path: path.to_path_buf(),
            missing,
            unexpected,
            mismatched,
        });
    }
    report.ignored.sort();

    // Each param's value in the model's layout, bound as `binding` says.
    let mut values: Vec<ParamValue> = Vec::with_capacity(manifest.params.len());
    for (f, value) in files.iter().zip(found) {
        if let Some(format) = f.format {
            // Converted a slice at a time: no f64 copy of a whole embedding table.
            let mut floats = Vec::with_capacity(value.bytes.len() / value.dtype.size_bytes());
            for bytes in value.bytes.chunks(value.dtype.size_bytes() << 16) {
                floats.extend(
                    decode_floats(value.dtype, bytes)
                        .into_iter()
                        .map(|v| v as f32),
                );
            }
            let blocks = super::quantize_tensor(path, &f.key, format, &floats)?;
            values.extend(block_values(manifest, f, ValueBytes::Bytes(blocks)));
            report.quantized.push(f.key.clone());
        } else {
            let data = if value.dtype == f.dtype {
                ValueBytes::Borrowed(value.bytes)
            } else {
                ValueBytes::Bytes(convert_floats(value.dtype, f.dtype, value.bytes))
            };
            values.extend(param_values(manifest, f, data));
        }
        if binding == Binding::AsMade {
            report.loaded += bind(exe, &values)?;
            values.clear();
        }
    }
    report.loaded += bind(exe, &values)?;
    Ok(report)
}

/// One param's value as loaded, borrowed from the mapped file where no layout change or
/// conversion was needed.
pub(super) struct ParamValue<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: ValueBytes<'a>,
}

/// A value's bytes: borrowed from a file, or owned, as bytes or as the float32 values a
/// dequantization made (kept as they are: a `Vec<f32>` cannot become a `Vec<u8>` without
/// a copy, and a model's whole float weights copied once more is a model's size of memory).
#[derive(Clone)]
pub(super) enum ValueBytes<'a> {
    Borrowed(&'a [u8]),
    Bytes(Vec<u8>),
    Floats(Vec<f32>),
}

impl ValueBytes<'_> {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            ValueBytes::Borrowed(bytes) => bytes,
            ValueBytes::Bytes(bytes) => bytes,
            ValueBytes::Floats(floats) => bytemuck::cast_slice(floats),
        }
    }
}

/// The values of the params read from file tensor `f` (its bytes `data`, in the declared
/// dtype), each in its param's layout: its part of a split, transposed where declared.
/// Owned `data` moves into the last param's value when that keeps the file's layout, and is
/// dropped as soon as the last value is made otherwise.
pub(super) fn param_values<'a>(
    manifest: &'a Manifest,
    f: &FileTensor,
    data: ValueBytes<'a>,
) -> Vec<ParamValue<'a>> {
    let value = |i: usize, shape: Vec<usize>, bytes: ValueBytes<'a>| ParamValue {
        name: &manifest.params[i].name,
        dtype: f.dtype,
        shape,
        bytes,
    };
    let Some((&last, rest)) = f.params.split_last() else {
        return Vec::new();
    };
    let mut values = Vec::with_capacity(f.params.len());
    for &i in rest {
        let (shape, laid) = laid_out(&manifest.params[i], f, data.bytes());
        values.push(value(
            i,
            shape,
            laid.map_or_else(|| data.clone(), ValueBytes::Bytes),
        ));
    }
    let (shape, laid) = laid_out(&manifest.params[last], f, data.bytes());
    values.push(value(last, shape, laid.map_or(data, ValueBytes::Bytes)));
    values
}

/// The shape of param `spec` read from file tensor `f` (bytes `source`), and its bytes when
/// its layout differs from the file's (a part of a split, transposed).
fn laid_out(
    spec: &crate::params::ParamSpec,
    f: &FileTensor,
    source: &[u8],
) -> (Vec<usize>, Option<Vec<u8>>) {
    let elem = f.dtype.size_bytes();
    let mut shape = f.shape.clone();
    let mut laid = None;
    if let Some(split) = spec.split {
        let axis = resolve_axis(split.axis, shape.len()).unwrap_or(0);
        laid = Some(split_part(
            source,
            &shape,
            elem,
            axis,
            split.index,
            split.parts,
        ));
        shape[axis] /= split.parts;
    }
    if spec.transpose {
        let from = laid.as_deref().unwrap_or(source);
        laid = Some(transpose_last2(from, &shape, elem));
        let n = shape.len();
        shape.swap(n - 2, n - 1);
    }
    (shape, laid)
}

/// The values of the params kept in blocks read from file tensor `f`: its blocks `bytes`
/// as they are, a `u8` param `[rows, row bytes]` each.
pub(super) fn block_values<'a>(
    manifest: &'a Manifest,
    f: &FileTensor,
    bytes: ValueBytes<'a>,
) -> Vec<ParamValue<'a>> {
    let mut bytes = Some(bytes);
    f.params
        .iter()
        .enumerate()
        .map(|(at, &i)| {
            let spec = &manifest.params[i];
            let bytes = if at + 1 == f.params.len() {
                bytes.take()
            } else {
                bytes.clone()
            };
            ParamValue {
                name: &spec.name,
                dtype: DType::U8,
                shape: spec.static_shape().unwrap_or_default(),
                bytes: bytes.unwrap_or(ValueBytes::Borrowed(&[])),
            }
        })
        .collect()
}

/// Binds `values` in `exe` all at once.
pub(super) fn bind(exe: &dyn Executable, values: &[ParamValue<'_>]) -> Result<usize, WeightsError> {
    let bound: Vec<(&str, TensorRef<'_>)> = values
        .iter()
        .map(|v| {
            let value = TensorRef {
                dtype: v.dtype,
                shape: &v.shape,
                bytes: v.bytes.bytes(),
            };
            (v.name, value)
        })
        .collect();
    exe.set_weights(&bound)?;
    Ok(bound.len())
}

/// Saves the weights of `manifest` bound in `exe` to `path`, in the checkpoint's layout.
pub fn save_safetensors(
    exe: &dyn Executable,
    manifest: &Manifest,
    path: &Path,
) -> Result<(), WeightsError> {
    let mut tensors = Vec::new();
    for f in manifest.file_tensors() {
        let elem = f.dtype.size_bytes();
        let mut parts: Vec<(usize, Vec<u8>, Vec<usize>)> = Vec::new();
        for &i in &f.params {
            let spec = &manifest.params[i];
            let value = exe.weight(&spec.name)?;
            let mut shape = value.shape().to_vec();
            let mut bytes = value.data().bytes().to_vec();
            if spec.transpose {
                bytes = transpose_last2(&bytes, &shape, elem);
                let n = shape.len();
                shape.swap(n - 2, n - 1);
            }
            parts.push((spec.split.map_or(0, |s| s.index), bytes, shape));
        }
        parts.sort_by_key(|p| p.0);
        let split = f.params.first().and_then(|&i| manifest.params[i].split);
        let data = match split {
            None => parts.swap_remove(0).1,
            Some(split) => {
                let indices: Vec<usize> = parts.iter().map(|p| p.0).collect();
                if indices != (0..split.parts).collect::<Vec<_>>() {
                    return Err(WeightsError::Layout {
                        key: f.key.clone(),
                        reason: format!(
                            "it is split into {} parts but the model declares parts {indices:?}",
                            split.parts
                        ),
                    });
                }
                let axis = resolve_axis(split.axis, f.shape.len()).unwrap_or(0);
                let part_shape = std::mem::take(&mut parts[0].2);
                let pieces: Vec<Vec<u8>> = parts.into_iter().map(|p| p.1).collect();
                join_parts(&pieces, &part_shape, elem, axis)
            }
        };
        tensors.push((
            f.key.clone(),
            OwnedView {
                dtype: to_file_dtype(f.dtype),
                shape: f.shape.clone(),
                data,
            },
        ));
    }
    safetensors::serialize_to_file(tensors, None, path).map_err(|e| match e {
        SafeTensorError::IoError(source) => WeightsError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => format_error(path, other),
    })
}

fn format_error(path: &Path, e: SafeTensorError) -> WeightsError {
    WeightsError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A tensor ready to be written.
struct OwnedView {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for OwnedView {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Float bytes of `dtype` (possibly unaligned, as in a mapped file) as `f64`s.
fn decode_floats(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    fn each<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
        bytes
            .chunks_exact(N)
            .map(|c| f(c.try_into().unwrap_or([0; N])))
            .collect()
    }
    match dtype {
        DType::F16 => each(bytes, |b| f16::from_le_bytes(b).to_f64()),
        DType::BF16 => each(bytes, |b| bf16::from_le_bytes(b).to_f64()),
        DType::F32 => each(bytes, |b| f64::from(f32::from_le_bytes(b))),
        _ => each(bytes, f64::from_le_bytes),
    }
}

/// Little-endian floats of dtype `from` as those of `to` (rounded to nearest), a slice at a
/// time: no float64 copy of a whole tensor.
fn convert_floats(from: DType, to: DType, bytes: &[u8]) -> Vec<u8> {
    let (from_size, to_size) = (from.size_bytes(), to.size_bytes());
    let mut out = Vec::with_capacity(bytes.len() / from_size * to_size);
    for slice in bytes.chunks(from_size << 16) {
        out.extend(encode_floats(to, &decode_floats(from, slice)));
    }
    out
}

/// `f64`s as little-endian bytes of the float `dtype` (rounded to nearest).
fn encode_floats(dtype: DType, values: &[f64]) -> Vec<u8> {
    match dtype {
        DType::F16 => values
            .iter()
            .flat_map(|v| f16::from_f64(*v).to_le_bytes())
            .collect(),
        DType::BF16 => values
            .iter()
            .flat_map(|v| bf16::from_f64(*v).to_le_bytes())
            .collect(),
        DType::F32 => values
            .iter()
            .flat_map(|v| (*v as f32).to_le_bytes())
            .collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// Writes each `(name, tensor)` to a safetensors file as it is (no layout change): for
/// state that is not a model checkpoint, such as a training run's optimizer state.
pub fn save_tensors(path: &Path, tensors: &[(String, HostTensor)]) -> Result<(), WeightsError> {
    let views: Vec<(String, OwnedView)> = tensors
        .iter()
        .map(|(name, t)| {
            let view = OwnedView {
                dtype: to_file_dtype(t.dtype()),
                shape: t.shape().to_vec(),
                data: t.data().bytes().to_vec(),
            };
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).map_err(|e| match e {
        SafeTensorError::IoError(source) => WeightsError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => format_error(path, other),
    })
}

/// Calls `each` with every tensor of a safetensors file, as stored, in name order.
pub fn read_tensors(
    path: &Path,
    each: &mut dyn FnMut(&str, TensorRef<'_>) -> Result<(), WeightsError>,
) -> Result<(), WeightsError> {
    let file = MappedFile::open(path)?;
    for (name, value) in file.tensors()?.iter() {
        each(name, value)?;
    }
    Ok(())
}

/// A safetensors file mapped into memory (read-only), whose tensors can be read as views
/// that live as long as the map: a loader that keeps every shard of a checkpoint mapped
/// binds their bytes without copying them first.
pub(crate) struct MappedFile {
    path: PathBuf,
    map: Mmap,
}

/// The tensors of a [`MappedFile`], in name order.
pub(crate) struct FileTensors<'a> {
    views: Vec<(String, DType, safetensors::tensor::TensorView<'a>)>,
}

impl MappedFile {
    pub(crate) fn open(path: &Path) -> Result<MappedFile, WeightsError> {
        let io = |source| WeightsError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and lives in this value; as with every memory-mapped
        // file, the caller must not truncate it while it is loaded (a checkpoint is not
        // written while a model reads it).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(MappedFile {
            path: path.to_path_buf(),
            map,
        })
    }

    /// Its tensors; a dtype RLX cannot hold is an error naming the tensor.
    pub(crate) fn tensors(&self) -> Result<FileTensors<'_>, WeightsError> {
        let path = self.path.as_path();
        let st = SafeTensors::deserialize(&self.map).map_err(|e| format_error(path, e))?;
        let mut views = Vec::with_capacity(st.len());
        for (name, view) in st.tensors() {
            let dtype =
                from_file_dtype(view.dtype()).ok_or_else(|| WeightsError::UnsupportedDType {
                    path: path.to_path_buf(),
                    key: name.clone(),
                    dtype: format!("{:?}", view.dtype()),
                })?;
            views.push((name, dtype, view));
        }
        views.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(FileTensors { views })
    }
}

impl FileTensors<'_> {
    /// Each tensor's name and value, as stored.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, TensorRef<'_>)> {
        self.views.iter().map(|(name, dtype, view)| {
            let value = TensorRef {
                dtype: *dtype,
                shape: view.shape(),
                bytes: view.data(),
            };
            (name.as_str(), value)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A conversion made a slice at a time equals each value converted alone, over slice
    /// boundaries, for every pair of float dtypes a checkpoint and a model may have.
    #[test]
    fn converted_floats_equal_each_value_converted_alone() {
        let values: Vec<f32> = (0..150_001)
            .map(|i| (i as f32 * 0.37).sin() * 1e3)
            .collect();
        let pairs = [
            (DType::F32, DType::F16),
            (DType::F32, DType::BF16),
            (DType::BF16, DType::F32),
            (DType::F16, DType::F32),
        ];
        for (from, to) in pairs {
            let source: Vec<u8> = encode_floats(
                from,
                &values.iter().map(|v| f64::from(*v)).collect::<Vec<_>>(),
            );
            let expected: Vec<u8> = source
                .chunks_exact(from.size_bytes())
                .flat_map(|one| encode_floats(to, &decode_floats(from, one)))
                .collect();
            assert_eq!(
                convert_floats(from, to, &source),
                expected,
                "{from:?} -> {to:?}"
            );
        }
    }
}

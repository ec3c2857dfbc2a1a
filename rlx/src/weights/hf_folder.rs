//! Hugging Face checkpoint folders: `model.safetensors`, or the shards a
//! `model.safetensors.index.json` lists, loaded with each tensor's name and value mapped
//! by the model family.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::safetensors::MappedFile;
use super::{Binding, LoadOptions, LoadReport, WeightsError};
use crate::backend::Executable;
use crate::params::Manifest;
use crate::tensor::{HostTensor, TensorRef};

/// A checkpoint tensor as a model family maps it: the file's bytes, where it loads as
/// stored (viewed in the mapped file, not copied), or values made from them (a norm scale
/// stored as an offset, experts stacked from their parts).
pub(crate) enum Mapped<'a> {
    /// The bytes in the file.
    Stored(TensorRef<'a>),
    /// Values made from them.
    Made(HostTensor),
}

impl Mapped<'_> {
    pub(crate) fn view(&self) -> TensorRef<'_> {
        match self {
            Mapped::Stored(value) => *value,
            Mapped::Made(value) => value.view(),
        }
    }
}

/// Binds the tensors of the Hugging Face folder `dir` as the weights of `manifest`, as
/// strictly as [`load_tensors`](super::load_tensors) binds (floats converted to the
/// declared dtype): `map` turns each checkpoint tensor into the names and values to bind
/// (a fused tensor may become several), or `None` for one the family knows it does not
/// use (reported as ignored, in name order); `assemble` then turns what every tensor gave
/// into the weights (tensors stored in parts joined), or says why it cannot. The weights are
/// bound as `binding` says. Every shard stays mapped until the weights are bound, so a
/// tensor that loads as stored is read from the file when it is bound: with
/// [`Binding::AsMade`], no more than one weight's converted values wait in memory.
pub(crate) fn load_hf_folder(
    exe: &dyn Executable,
    manifest: &Manifest,
    dir: &Path,
    mut map: impl for<'a> FnMut(&str, TensorRef<'a>) -> Option<Vec<(String, Mapped<'a>)>>,
    assemble: impl for<'a> FnOnce(
        Vec<(String, Mapped<'a>)>,
    ) -> Result<Vec<(String, Mapped<'a>)>, String>,
    binding: Binding,
) -> Result<LoadReport, WeightsError> {
    let files = shard_paths(dir)?
        .iter()
        .map(|path| MappedFile::open(path))
        .collect::<Result<Vec<_>, _>>()?;
    let shards = files
        .iter()
        .map(MappedFile::tensors)
        .collect::<Result<Vec<_>, _>>()?;
    let mut tensors = Vec::new();
    let mut ignored = Vec::new();
    for (name, value) in shards.iter().flat_map(|shard| shard.iter()) {
        match map(name, value) {
            Some(mapped) => tensors.extend(mapped),
            None => ignored.push(name.to_string()),
        }
    }
    let tensors = assemble(tensors).map_err(|message| WeightsError::Format {
        path: dir.to_path_buf(),
        message,
    })?;
    let named: Vec<(&str, TensorRef<'_>)> = tensors
        .iter()
        .map(|(n, t)| (n.as_str(), t.view()))
        .collect();
    let options = LoadOptions {
        convert_floats: true,
        ..LoadOptions::default()
    };
    let mut report =
        super::safetensors::load_tensors_bound(exe, manifest, dir, &named, &options, binding)?;
    ignored.sort();
    report.ignored = ignored;
    Ok(report)
}

/// The safetensors files of the checkpoint in `dir`: the shards its
/// `model.safetensors.index.json` lists, else `model.safetensors`.
fn shard_paths(dir: &Path) -> Result<Vec<PathBuf>, WeightsError> {
    let index = dir.join("model.safetensors.index.json");
    if !index.exists() {
        return Ok(vec![dir.join("model.safetensors")]);
    }
    let format = |message: String| WeightsError::Format {
        path: index.clone(),
        message,
    };
    let text = std::fs::read_to_string(&index).map_err(|source| WeightsError::Io {
        path: index.clone(),
        source,
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format(format!("not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| format("no weight_map object".into()))?;
    let mut files = BTreeSet::new();
    for (key, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| format(format!("{key}: the shard is not a file name")))?;
        // A shard is a file beside the index, never a path out of the folder.
        if file.is_empty() || file.contains(['/', '\\']) || file == ".." {
            return Err(format(format!(
                "{key}: {file:?} is not a file in the folder"
            )));
        }
        files.insert(file.to_string());
    }
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

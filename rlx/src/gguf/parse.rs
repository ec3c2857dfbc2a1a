//! Reading a GGUF file's header, metadata and tensor table from its bytes.
//!
//! Every length and count is checked against the bytes that remain before anything is
//! allocated for it, so a hostile file costs at most a few times its own size in memory and
//! ends in a [`GgufError`], never a panic.

use std::collections::HashSet;

use super::blocks::GgmlType;
use super::{GgufError, MetadataArray, MetadataValue, TensorInfo};

/// `GGUF` read as a little-endian u32.
const MAGIC: [u8; 4] = *b"GGUF";
/// GGML's limit on a tensor's rank.
const MAX_DIMS: u32 = 4;
/// Arrays of arrays nest at most this deep.
const MAX_DEPTH: usize = 8;
/// The alignment of tensor data when `general.alignment` is absent.
pub(super) const DEFAULT_ALIGNMENT: u64 = 32;

/// What the header and tables say; tensor offsets are relative to `data_start`.
pub(super) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, MetadataValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_start: usize,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    // Each read names its field with a closure, called only to report an error: a file's
    // vocabulary is a hundred thousand reads.
    fn take(&mut self, n: usize, what: impl FnOnce() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                at: self.at as u64,
            });
        }
        let bytes = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        Ok(self.take(N, what)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items of at least `min_bytes` each that the rest of the file must hold.
    fn count(&mut self, min_bytes: usize, what: impl Fn() -> String) -> Result<usize, GgufError> {
        let at = self.at as u64;
        let count = self.u64(&what)?;
        let fits = usize::try_from(count)
            .ok()
            .filter(|c| c.saturating_mul(min_bytes.max(1)) <= self.remaining());
        fits.ok_or_else(|| GgufError::Count {
            what: what(),
            count,
            at,
        })
    }

    fn string(&mut self, what: impl Fn() -> String) -> Result<String, GgufError> {
        let len = self.count(1, &what)?;
        let at = self.at as u64;
        let bytes = self.take(len, &what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::BadString { what: what(), at })
    }
}

/// The smallest number of bytes a value of metadata type `type_id` takes (arrays: their
/// type and count).
fn min_size(type_id: u32) -> Option<usize> {
    Some(match type_id {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => return None,
    })
}

fn value(
    c: &mut Cursor<'_>,
    type_id: u32,
    key: &str,
    depth: usize,
) -> Result<MetadataValue, GgufError> {
    let what = || format!("the value of {key}");
    Ok(match type_id {
        0 => MetadataValue::U8(c.array::<1>(what)?[0]),
        1 => MetadataValue::I8(c.array::<1>(what)?[0] as i8),
        2 => MetadataValue::U16(u16::from_le_bytes(c.array(what)?)),
        3 => MetadataValue::I16(i16::from_le_bytes(c.array(what)?)),
        4 => MetadataValue::U32(c.u32(what)?),
        5 => MetadataValue::I32(i32::from_le_bytes(c.array(what)?)),
        6 => MetadataValue::F32(f32::from_le_bytes(c.array(what)?)),
        7 => {
            let at = c.at as u64;
            match c.array::<1>(what)?[0] {
                0 => MetadataValue::Bool(false),
                1 => MetadataValue::Bool(true),
                byte => {
                    return Err(GgufError::BadBool {
                        key: key.to_string(),
                        byte,
                        at,
                    });
                }
            }
        }
        8 => MetadataValue::Text(c.string(what)?),
        9 => MetadataValue::Array(array(c, key, depth + 1)?),
        10 => MetadataValue::U64(c.u64(what)?),
        11 => MetadataValue::I64(i64::from_le_bytes(c.array(what)?)),
        12 => MetadataValue::F64(f64::from_le_bytes(c.array(what)?)),
        _ => {
            return Err(GgufError::ValueType {
                key: key.to_string(),
                type_id,
            });
        }
    })
}

fn array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<MetadataArray, GgufError> {
    if depth > MAX_DEPTH {
        return Err(GgufError::TooDeep {
            key: key.to_string(),
        });
    }
    let type_id = c.u32(|| format!("the element type of {key}"))?;
    let Some(min) = min_size(type_id) else {
        return Err(GgufError::ValueType {
            key: key.to_string(),
            type_id,
        });
    };
    let n = c.count(min, || format!("the length of {key}"))?;
    macro_rules! each {
        ($variant:ident, $pick:pat => $v:expr) => {{
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                match value(c, type_id, key, depth)? {
                    $pick => items.push($v),
                    _ => unreachable!("`value` returns the variant of its type id"),
                }
            }
            MetadataArray::$variant(items)
        }};
    }
    use MetadataValue as V;
    Ok(match type_id {
        0 => each!(U8, V::U8(v) => v),
        1 => each!(I8, V::I8(v) => v),
        2 => each!(U16, V::U16(v) => v),
        3 => each!(I16, V::I16(v) => v),
        4 => each!(U32, V::U32(v) => v),
        5 => each!(I32, V::I32(v) => v),
        6 => each!(F32, V::F32(v) => v),
        7 => each!(Bool, V::Bool(v) => v),
        8 => each!(Text, V::Text(v) => v),
        9 => each!(Array, V::Array(v) => v),
        10 => each!(U64, V::U64(v) => v),
        11 => each!(I64, V::I64(v) => v),
        _ => each!(F64, V::F64(v) => v),
    })
}

fn tensor_info(c: &mut Cursor<'_>) -> Result<TensorInfo, GgufError> {
    let name = c.string(|| "a tensor name".into())?;
    let at = c.at as u64;
    let rank = c.u32(|| format!("the rank of {name}"))?;
    if rank > MAX_DIMS {
        return Err(GgufError::Dims {
            tensor: name,
            reason: format!("rank {rank} exceeds GGML's {MAX_DIMS} (at byte {at})"),
        });
    }
    let mut dims = Vec::with_capacity(rank as usize);
    for _ in 0..rank {
        dims.push(c.u64(|| format!("the dims of {name}"))?);
    }
    let type_id = c.u32(|| format!("the type of {name}"))?;
    let Some(kind) = GgmlType::from_id(type_id) else {
        return Err(GgufError::TensorType {
            tensor: name,
            type_id,
        });
    };
    let offset = c.u64(|| format!("the offset of {name}"))?;
    let values = dims
        .iter()
        .try_fold(1u64, |n, d| n.checked_mul(*d))
        .filter(|n| usize::try_from(*n).is_ok());
    let Some(values) = values else {
        return Err(GgufError::Dims {
            tensor: name,
            reason: format!("{dims:?} overflow the address space"),
        });
    };
    let block = kind.block_values() as u64;
    if dims.first().is_some_and(|d| d % block != 0) {
        return Err(GgufError::Dims {
            tensor: name,
            reason: format!(
                "the first dim {} is not a multiple of {kind}'s {block}-value block",
                dims[0]
            ),
        });
    }
    let bytes = (values / block)
        .checked_mul(kind.block_bytes() as u64)
        .ok_or_else(|| GgufError::Dims {
            tensor: name.clone(),
            reason: format!("{dims:?} of {kind} overflow the address space"),
        })?;
    Ok(TensorInfo {
        name,
        dims,
        kind,
        offset,
        bytes,
    })
}

/// The header, metadata and tensor table of `bytes`, each tensor's data checked to lie
/// inside the file at the file's alignment.
pub(super) fn parse(bytes: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { bytes, at: 0 };
    if c.array::<4>(|| "the magic number".into())? != MAGIC {
        return Err(GgufError::NotGguf);
    }
    let version = c.u32(|| "the version".into())?;
    if !(2..=3).contains(&version) {
        // A big-endian file reads its version byte-swapped.
        return Err(GgufError::Version(version));
    }
    // A tensor info takes at least 8 + 4 + 4 + 8 bytes, a key/value 8 + 4 + 1.
    let tensor_count = c.count(24, || "the tensor count".into())?;
    let kv_count = c.count(13, || "the metadata count".into())?;
    let mut metadata = Vec::with_capacity(kv_count);
    let mut keys = HashSet::with_capacity(kv_count);
    for _ in 0..kv_count {
        let key = c.string(|| "a metadata key".into())?;
        let type_id = c.u32(|| format!("the type of {key}"))?;
        let value = value(&mut c, type_id, &key, 0)?;
        if !keys.insert(key.clone()) {
            return Err(GgufError::Duplicate {
                what: "metadata key",
                name: key,
            });
        }
        metadata.push((key, value));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, MetadataValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, v)) => return Err(GgufError::Alignment(format!("{v:?}"))),
    };
    let mut tensors = Vec::with_capacity(tensor_count);
    let mut names = HashSet::with_capacity(tensor_count);
    for _ in 0..tensor_count {
        let info = tensor_info(&mut c)?;
        if !names.insert(info.name.clone()) {
            return Err(GgufError::Duplicate {
                what: "tensor",
                name: info.name,
            });
        }
        tensors.push(info);
    }
    let data_start = (c.at as u64).div_ceil(alignment) * alignment;
    let data_len = (bytes.len() as u64).saturating_sub(data_start);
    for t in &tensors {
        if !t.offset.is_multiple_of(alignment) {
            return Err(GgufError::Misaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        if t.offset
            .checked_add(t.bytes)
            .is_none_or(|end| end > data_len)
        {
            return Err(GgufError::DataRange {
                tensor: t.name.clone(),
                offset: t.offset,
                bytes: t.bytes,
                data: data_len,
            });
        }
    }
    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_start: data_start as usize,
    })
}

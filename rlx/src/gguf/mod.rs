//! GGUF files: llama.cpp's single-file format for a model's weights, hyperparameters and
//! tokenizer.
//!
//! A file is a header, a table of typed metadata (`llama.block_count`,
//! `tokenizer.ggml.tokens`, …), a table of tensors (name, dims, [`GgmlType`], offset) and
//! the tensors' bytes at the file's alignment. [`Gguf::open`] maps the file and checks all
//! of it before returning (versions 2 and 3, little-endian); tensors are then read as they
//! are stored ([`Gguf::tensor_bytes`]) or dequantized to `f32` host tensors
//! ([`Gguf::tensor_f32`]).
//!
//! GGUF lists dims fastest-varying first (`ne[0]` is a row's length); RLX shapes are
//! row-major, so [`TensorInfo::shape`] is the reverse.

mod blocks;
pub(crate) use blocks::{
    Block, Q2KBlock, Q3KBlock, Q4_0Block, Q4_1Block, Q4KBlock, Q5_0Block, Q5_1Block, Q5KBlock,
    Q6KBlock, Q8_0Block, half_f32, q3_k_scale,
};
mod parse;
mod quantize;

pub use blocks::{DequantizeError, GgmlType, dequantize, dequantize_f64, random_blocks};
pub use quantize::{QuantizeError, quantize, quantizes};

use std::path::{Path, PathBuf};

use crate::tensor::HostTensor;

/// Why a GGUF file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file (no GGUF magic number)")]
    NotGguf,
    /// A version other than 2 or 3 (a big-endian file reads as a huge version).
    #[error("GGUF version {0} is not supported (2 and 3 are, little-endian)")]
    Version(u32),
    /// The file ends inside a field.
    #[error("the file ends inside {what} (byte {at})")]
    Truncated {
        /// The field.
        what: String,
        /// Where it starts.
        at: u64,
    },
    /// A count or length larger than the rest of the file could hold.
    #[error("{what} is {count} (byte {at}), more than the rest of the file holds")]
    Count {
        /// The field.
        what: String,
        /// Its value.
        count: u64,
        /// Where it is.
        at: u64,
    },
    /// A string that is not UTF-8.
    #[error("{what} (byte {at}) is not UTF-8")]
    BadString {
        /// The field.
        what: String,
        /// Where its bytes start.
        at: u64,
    },
    /// A boolean byte other than 0 or 1.
    #[error("{key} is a bool stored as {byte} (byte {at})")]
    BadBool {
        /// The metadata key.
        key: String,
        /// The byte.
        byte: u8,
        /// Where it is.
        at: u64,
    },
    /// A metadata value type id GGUF does not define.
    #[error("{key} has value type {type_id}, which GGUF does not define")]
    ValueType {
        /// The metadata key.
        key: String,
        /// The type id.
        type_id: u32,
    },
    /// Arrays of arrays nested too deep.
    #[error("{key} nests arrays more than 8 deep")]
    TooDeep {
        /// The metadata key.
        key: String,
    },
    /// The same metadata key or tensor name twice.
    #[error("{what} {name:?} appears twice")]
    Duplicate {
        /// `metadata key` or `tensor`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// `general.alignment` is not a power of two stored as a u32.
    #[error("general.alignment must be a u32 power of two, got {0}")]
    Alignment(String),
    /// A tensor's dims are impossible.
    #[error("tensor {tensor}: {reason}")]
    Dims {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor type id GGML does not define (or RLX does not know).
    #[error("tensor {tensor} has type {type_id}, which is not a known GGML type")]
    TensorType {
        /// The tensor.
        tensor: String,
        /// The type id.
        type_id: u32,
    },
    /// A tensor's offset is not a multiple of the file's alignment.
    #[error(
        "tensor {tensor} starts at offset {offset}, not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        /// The tensor.
        tensor: String,
        /// Its offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's bytes lie (partly) outside the file.
    #[error(
        "tensor {tensor} claims bytes {offset}..{offset}+{bytes} of a {data}-byte data section"
    )]
    DataRange {
        /// The tensor.
        tensor: String,
        /// Its offset in the data section.
        offset: u64,
        /// Its size.
        bytes: u64,
        /// The data section's size.
        data: u64,
    },
    /// No tensor of that name.
    #[error("the file has no tensor {0:?}")]
    NoTensor(String),
    /// The tensor's type cannot be dequantized here.
    #[error("tensor {tensor}: {source}")]
    Dequantize {
        /// The tensor.
        tensor: String,
        /// Why.
        source: DequantizeError,
    },
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetadataValue {
    /// A `u8` (GGUF value type u8).
    U8(u8),
    /// A `i8` (GGUF value type i8).
    I8(i8),
    /// A `u16` (GGUF value type u16).
    U16(u16),
    /// A `i16` (GGUF value type i16).
    I16(i16),
    /// A `u32` (GGUF value type u32).
    U32(u32),
    /// A `i32` (GGUF value type i32).
    I32(i32),
    /// A `u64` (GGUF value type u64).
    U64(u64),
    /// A `i64` (GGUF value type i64).
    I64(i64),
    /// A `f32` (GGUF value type f32).
    F32(f32),
    /// A `f64` (GGUF value type f64).
    F64(f64),
    /// A `bool` (GGUF value type bool).
    Bool(bool),
    /// A `String` (GGUF value type string).
    Text(String),
    /// An array of values of one type.
    Array(MetadataArray),
}

/// A metadata array: elements of one type.
#[derive(Clone, Debug, PartialEq)]
pub enum MetadataArray {
    /// Elements of type `u8`.
    U8(Vec<u8>),
    /// Elements of type `i8`.
    I8(Vec<i8>),
    /// Elements of type `u16`.
    U16(Vec<u16>),
    /// Elements of type `i16`.
    I16(Vec<i16>),
    /// Elements of type `u32`.
    U32(Vec<u32>),
    /// Elements of type `i32`.
    I32(Vec<i32>),
    /// Elements of type `u64`.
    U64(Vec<u64>),
    /// Elements of type `i64`.
    I64(Vec<i64>),
    /// Elements of type `f32`.
    F32(Vec<f32>),
    /// Elements of type `f64`.
    F64(Vec<f64>),
    /// Elements of type `bool`.
    Bool(Vec<bool>),
    /// Elements of type `String`.
    Text(Vec<String>),
    /// Elements of type `MetadataArray`.
    Array(Vec<MetadataArray>),
}

impl MetadataValue {
    /// An integer value of any width and sign that is ≥ 0, as a `u64`.
    ///
    /// ```
    /// use rlx::gguf::MetadataValue;
    /// assert_eq!(MetadataValue::I32(30).as_u64(), Some(30));
    /// assert_eq!(MetadataValue::I32(-1).as_u64(), None);
    /// assert_eq!(MetadataValue::F32(1.0).as_u64(), None);
    /// ```
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetadataValue::U8(v) => Some(u64::from(v)),
            MetadataValue::U16(v) => Some(u64::from(v)),
            MetadataValue::U32(v) => Some(u64::from(v)),
            MetadataValue::U64(v) => Some(v),
            MetadataValue::I8(v) => u64::try_from(v).ok(),
            MetadataValue::I16(v) => u64::try_from(v).ok(),
            MetadataValue::I32(v) => u64::try_from(v).ok(),
            MetadataValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float value, or an integer one converted.
    ///
    /// ```
    /// use rlx::gguf::MetadataValue;
    /// assert_eq!(MetadataValue::F32(0.5).as_f64(), Some(0.5));
    /// assert_eq!(MetadataValue::U32(10000).as_f64(), Some(10000.0));
    /// ```
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetadataValue::F32(v) => Some(f64::from(v)),
            MetadataValue::F64(v) => Some(v),
            MetadataValue::I8(v) => Some(f64::from(v)),
            MetadataValue::I16(v) => Some(f64::from(v)),
            MetadataValue::I32(v) => Some(f64::from(v)),
            MetadataValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetadataValue::Text(s) => Some(s),
            _ => None,
        }
    }

    /// A bool value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetadataValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// An array value.
    pub fn as_array(&self) -> Option<&MetadataArray> {
        match self {
            MetadataValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl MetadataArray {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            MetadataArray::U8(v) => v.len(),
            MetadataArray::I8(v) => v.len(),
            MetadataArray::U16(v) => v.len(),
            MetadataArray::I16(v) => v.len(),
            MetadataArray::U32(v) => v.len(),
            MetadataArray::I32(v) => v.len(),
            MetadataArray::U64(v) => v.len(),
            MetadataArray::I64(v) => v.len(),
            MetadataArray::F32(v) => v.len(),
            MetadataArray::F64(v) => v.len(),
            MetadataArray::Bool(v) => v.len(),
            MetadataArray::Text(v) => v.len(),
            MetadataArray::Array(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One entry of the tensor table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name (`blk.0.attn_q.weight`).
    pub name: String,
    /// GGUF's dims, fastest-varying first.
    pub dims: Vec<u64>,
    /// How its values are stored.
    pub kind: GgmlType,
    /// Where its bytes start, from the start of the data section.
    pub offset: u64,
    /// How many bytes it takes.
    pub bytes: u64,
}

impl TensorInfo {
    /// The row-major shape (GGUF's dims reversed).
    pub fn shape(&self) -> Vec<usize> {
        // Parsing checked that the product of the dims fits a usize.
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// The number of values.
    pub fn values(&self) -> usize {
        self.shape().iter().product()
    }
}

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A checked GGUF file: its metadata and tensor table, and its bytes (mapped from disk or
/// owned).
///
/// ```
/// use rlx::gguf::{Gguf, MetadataValue};
/// // The smallest file: magic, version 3, no tensors, one key.
/// let mut file = b"GGUF".to_vec();
/// file.extend(3u32.to_le_bytes());
/// file.extend(0u64.to_le_bytes()); // tensors
/// file.extend(1u64.to_le_bytes()); // metadata
/// file.extend(12u64.to_le_bytes());
/// file.extend(b"general.name");
/// file.extend(8u32.to_le_bytes()); // a string
/// file.extend(4u64.to_le_bytes());
/// file.extend(b"tiny");
/// let gguf = Gguf::from_bytes(file)?;
/// assert_eq!(gguf.get("general.name").and_then(MetadataValue::as_str), Some("tiny"));
/// assert!(gguf.tensors().is_empty());
/// # Ok::<(), rlx::gguf::GgufError>(())
/// ```
pub struct Gguf {
    path: Option<PathBuf>,
    bytes: Bytes,
    version: u32,
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_start: usize,
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl Gguf {
    /// Maps and checks the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is only read. Another process truncating or rewriting the file
        // while it is mapped is outside what a reader can guard against (as for every
        // memory-mapped checkpoint); the safetensors loader maps files the same way.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let mut file = Gguf::checked(Bytes::Mapped(map))?;
        file.path = Some(path.to_path_buf());
        Ok(file)
    }

    /// Checks a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Gguf, GgufError> {
        Gguf::checked(Bytes::Owned(bytes))
    }

    fn checked(bytes: Bytes) -> Result<Gguf, GgufError> {
        let parsed = parse::parse(&bytes)?;
        Ok(Gguf {
            path: None,
            data_start: parsed.data_start.min(bytes.len()),
            bytes,
            version: parsed.version,
            metadata: parsed.metadata,
            tensors: parsed.tensors,
            alignment: parsed.alignment,
        })
    }

    /// The file it was read from ([`Gguf::open`]); `None` for bytes in memory.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of tensor data in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, MetadataValue)] {
        &self.metadata
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The table entry of a tensor.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| GgufError::NoTensor(name.to_string()))
    }

    /// A tensor's bytes as stored.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8], GgufError> {
        let info = self.tensor(name)?;
        // Parsing checked that every tensor of the table lies inside the data section.
        let start = self.data_start + info.offset as usize;
        Ok(&self.bytes[start..start + info.bytes as usize])
    }

    /// A tensor dequantized to an `f32` host tensor of its row-major shape.
    pub fn tensor_f32(&self, name: &str) -> Result<HostTensor, GgufError> {
        let values = self.tensor_f32_values(name)?;
        let shape = self.tensor(name)?.shape();
        Ok(HostTensor::from_vec(values, shape).expect("values fill the shape"))
    }

    /// A tensor dequantized to its `f32` values, row-major.
    pub(crate) fn tensor_f32_values(&self, name: &str) -> Result<Vec<f32>, GgufError> {
        let info = self.tensor(name)?;
        if !info.kind.dequantizes() {
            return Err(GgufError::Dequantize {
                tensor: name.to_string(),
                source: DequantizeError::Unsupported(info.kind),
            });
        }
        let mut values = vec![0f32; info.values()];
        dequantize(info.kind, self.tensor_bytes(name)?, &mut values).map_err(|source| {
            GgufError::Dequantize {
                tensor: name.to_string(),
                source,
            }
        })?;
        Ok(values)
    }
}

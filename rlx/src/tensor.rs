//! Host tensors: typed data in ordinary memory, the currency between users and backends.

use std::fmt;

use half::{bf16, f16};

use crate::ir::{DType, Element};

/// Why a host tensor could not be made or read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    /// The data length does not match the shape.
    #[error("shape {shape:?} holds {expected} elements, got {got}")]
    Length {
        /// The requested shape.
        shape: Vec<usize>,
        /// Elements the shape holds.
        expected: usize,
        /// Elements supplied.
        got: usize,
    },
    /// The tensor has another dtype than the one asked for.
    #[error("tensor has dtype {actual}, not {requested}")]
    DType {
        /// The tensor's dtype.
        actual: DType,
        /// The dtype asked for.
        requested: DType,
    },
}

/// The typed storage of a [`HostTensor`], one vector per dtype.
#[derive(Clone, PartialEq)]
#[allow(missing_docs)]
pub enum TensorData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

/// Maps an element type to its [`TensorData`] variant.
pub trait HostElement: Element + bytemuck::NoUninit {
    /// Wraps a vector.
    fn wrap(data: Vec<Self>) -> TensorData;
    /// The vector, if `data` holds this type.
    fn unwrap(data: &TensorData) -> Option<&Vec<Self>>;
    /// The vector, if `data` holds this type.
    fn unwrap_mut(data: &mut TensorData) -> Option<&mut Vec<Self>>;
    /// The vector, if `data` holds this type.
    fn into_inner(data: TensorData) -> Option<Vec<Self>>;
}

macro_rules! host_element {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl HostElement for $t {
            fn wrap(data: Vec<Self>) -> TensorData {
                TensorData::$v(data)
            }
            fn unwrap(data: &TensorData) -> Option<&Vec<Self>> {
                match data {
                    TensorData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn unwrap_mut(data: &mut TensorData) -> Option<&mut Vec<Self>> {
                match data {
                    TensorData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn into_inner(data: TensorData) -> Option<Vec<Self>> {
                match data {
                    TensorData::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

host_element!(
    f32 => F32, f16 => F16, bf16 => BF16, f64 => F64, i32 => I32, i64 => I64, i8 => I8,
    u8 => U8, bool => Bool,
);

/// Calls `$body` with `$v` bound to the typed vector inside a `TensorData`.
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            TensorData::F32($v) => $body,
            TensorData::F16($v) => $body,
            TensorData::BF16($v) => $body,
            TensorData::F64($v) => $body,
            TensorData::I32($v) => $body,
            TensorData::I64($v) => $body,
            TensorData::I8($v) => $body,
            TensorData::U8($v) => $body,
            TensorData::Bool($v) => $body,
        }
    };
}

impl TensorData {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::F64(_) => DType::F64,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::I8(_) => DType::I8,
            TensorData::U8(_) => DType::U8,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` zeros (`false` for bool).
    pub fn zeros(dtype: DType, n: usize) -> TensorData {
        match dtype {
            DType::F32 => TensorData::F32(vec![0.0; n]),
            DType::F16 => TensorData::F16(vec![f16::ZERO; n]),
            DType::BF16 => TensorData::BF16(vec![bf16::ZERO; n]),
            DType::F64 => TensorData::F64(vec![0.0; n]),
            DType::I32 => TensorData::I32(vec![0; n]),
            DType::I64 => TensorData::I64(vec![0; n]),
            DType::I8 => TensorData::I8(vec![0; n]),
            DType::U8 => TensorData::U8(vec![0; n]),
            DType::Bool => TensorData::Bool(vec![false; n]),
        }
    }

    /// The raw little-endian bytes (this crate supports little-endian targets only).
    pub fn bytes(&self) -> &[u8] {
        with_data!(self, v => bytemuck::cast_slice(v.as_slice()))
    }

    /// The elements as writable raw bytes, for every dtype whose every byte pattern is a
    /// value (all but bool).
    #[cfg(feature = "mlx")]
    pub(crate) fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        Some(match self {
            TensorData::Bool(_) => return None,
            TensorData::F32(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            TensorData::F16(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            TensorData::BF16(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            TensorData::F64(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            TensorData::I32(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            TensorData::I64(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            TensorData::I8(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            TensorData::U8(v) => v.as_mut_slice(),
        })
    }

    /// Overwrites the elements from raw bytes of the same dtype and length. Bool bytes are
    /// read as `byte != 0`, so any byte pattern is accepted.
    pub(crate) fn copy_from_bytes(&mut self, bytes: &[u8]) {
        match self {
            TensorData::Bool(v) => {
                for (dst, src) in v.iter_mut().zip(bytes) {
                    *dst = *src != 0;
                }
            }
            TensorData::F32(v) => bytemuck::cast_slice_mut(v.as_mut_slice()).copy_from_slice(bytes),
            TensorData::F16(v) => bytemuck::cast_slice_mut(v.as_mut_slice()).copy_from_slice(bytes),
            TensorData::BF16(v) => {
                bytemuck::cast_slice_mut(v.as_mut_slice()).copy_from_slice(bytes)
            }
            TensorData::F64(v) => bytemuck::cast_slice_mut(v.as_mut_slice()).copy_from_slice(bytes),
            TensorData::I32(v) => bytemuck::cast_slice_mut(v.as_mut_slice()).copy_from_slice(bytes),
            TensorData::I64(v) => bytemuck::cast_slice_mut(v.as_mut_slice()).copy_from_slice(bytes),
            TensorData::I8(v) => bytemuck::cast_slice_mut(v.as_mut_slice()).copy_from_slice(bytes),
            TensorData::U8(v) => v.copy_from_slice(bytes),
        }
    }
}

/// A tensor in host memory: a shape and typed row-major data.
///
/// ```
/// use rlx::tensor::HostTensor;
/// use rlx::ir::DType;
/// let t = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
/// assert_eq!(t.dtype(), DType::F32);
/// assert_eq!(t.shape(), &[2, 3]);
/// assert_eq!(t.as_slice::<f32>()?[4], 5.0);
/// assert!(t.as_slice::<i32>().is_err());
/// let h = HostTensor::from_vec(vec![half::f16::from_f32(1.5)], [1])?;
/// assert_eq!(h.to_f64_vec(), vec![1.5]);
/// # Ok::<(), rlx::tensor::TensorError>(())
/// ```
#[derive(Clone, PartialEq)]
pub struct HostTensor {
    shape: Vec<usize>,
    data: TensorData,
}

impl HostTensor {
    /// A tensor from row-major values; fails if their count does not fill `shape`.
    pub fn from_vec<T: HostElement>(
        data: Vec<T>,
        shape: impl Into<Vec<usize>>,
    ) -> Result<HostTensor, TensorError> {
        HostTensor::from_data(T::wrap(data), shape)
    }

    /// A tensor from typed storage; fails if its length does not fill `shape`.
    pub fn from_data(
        data: TensorData,
        shape: impl Into<Vec<usize>>,
    ) -> Result<HostTensor, TensorError> {
        let shape = shape.into();
        let expected: usize = shape.iter().product();
        if data.len() != expected {
            return Err(TensorError::Length {
                shape,
                expected,
                got: data.len(),
            });
        }
        Ok(HostTensor { shape, data })
    }

    /// A rank-0 tensor.
    pub fn scalar<T: HostElement>(value: T) -> HostTensor {
        HostTensor {
            shape: Vec::new(),
            data: T::wrap(vec![value]),
        }
    }

    /// A tensor of zeros.
    pub fn zeros(dtype: DType, shape: impl Into<Vec<usize>>) -> HostTensor {
        let shape = shape.into();
        let n = shape.iter().product();
        HostTensor {
            shape,
            data: TensorData::zeros(dtype, n),
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Dims.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The typed storage.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The elements, if they are `T`.
    pub fn as_slice<T: HostElement>(&self) -> Result<&[T], TensorError> {
        T::unwrap(&self.data)
            .map(Vec::as_slice)
            .ok_or_else(|| self.dtype_error(T::DTYPE))
    }

    /// The elements, mutably, if they are `T`.
    pub fn as_mut_slice<T: HostElement>(&mut self) -> Result<&mut [T], TensorError> {
        let requested = T::DTYPE;
        let actual = self.dtype();
        T::unwrap_mut(&mut self.data)
            .map(Vec::as_mut_slice)
            .ok_or(TensorError::DType { actual, requested })
    }

    /// The elements as a vector, if they are `T`.
    pub fn into_vec<T: HostElement>(self) -> Result<Vec<T>, TensorError> {
        let actual = self.dtype();
        T::into_inner(self.data).ok_or(TensorError::DType {
            actual,
            requested: T::DTYPE,
        })
    }

    /// Every element converted to `f64` (bool as 0/1), for comparisons and printing.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            TensorData::F32(v) => v.iter().map(|x| f64::from(*x)).collect(),
            TensorData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::F64(v) => v.clone(),
            TensorData::I32(v) => v.iter().map(|x| f64::from(*x)).collect(),
            TensorData::I64(v) => v.iter().map(|x| *x as f64).collect(),
            TensorData::I8(v) => v.iter().map(|x| f64::from(*x)).collect(),
            TensorData::U8(v) => v.iter().map(|x| f64::from(*x)).collect(),
            TensorData::Bool(v) => v.iter().map(|x| f64::from(u8::from(*x))).collect(),
        }
    }

    /// A borrowed view, the form backends take tensors in.
    pub fn view(&self) -> TensorRef<'_> {
        TensorRef {
            dtype: self.dtype(),
            shape: &self.shape,
            bytes: self.data.bytes(),
        }
    }

    /// Makes the tensor `dtype[shape]`, reusing its storage when the type and element count
    /// already match (no allocation then).
    pub(crate) fn reshape_for(&mut self, dtype: DType, shape: &[usize]) {
        let n: usize = shape.iter().product();
        if self.dtype() != dtype || self.len() != n {
            self.data = TensorData::zeros(dtype, n);
        }
        if self.shape != shape {
            self.shape.clear();
            self.shape.extend_from_slice(shape);
        }
    }

    pub(crate) fn data_mut(&mut self) -> &mut TensorData {
        &mut self.data
    }

    fn dtype_error(&self, requested: DType) -> TensorError {
        TensorError::DType {
            actual: self.dtype(),
            requested,
        }
    }
}

impl fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostTensor({}{:?}", self.dtype(), self.shape)?;
        let vals = self.to_f64_vec();
        if vals.len() <= 16 {
            write!(f, " {vals:?}")?;
        }
        f.write_str(")")
    }
}

/// A borrowed tensor: dtype, dims and row-major little-endian bytes.
///
/// Weights memory-mapped from a file and [`HostTensor::view`] both give one.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dims.
    pub shape: &'a [usize],
    /// The elements' bytes.
    pub bytes: &'a [u8],
}

impl<'a> TensorRef<'a> {
    /// A view of raw bytes; fails if their length does not match `dtype` and `shape`.
    pub fn new(
        dtype: DType,
        shape: &'a [usize],
        bytes: &'a [u8],
    ) -> Result<TensorRef<'a>, TensorError> {
        let expected: usize = shape.iter().product();
        let got = bytes.len() / dtype.size_bytes();
        if got != expected || !bytes.len().is_multiple_of(dtype.size_bytes()) {
            return Err(TensorError::Length {
                shape: shape.to_vec(),
                expected,
                got,
            });
        }
        Ok(TensorRef {
            dtype,
            shape,
            bytes,
        })
    }
}

impl TensorRef<'_> {
    /// An owned copy.
    ///
    /// ```
    /// use rlx::tensor::HostTensor;
    /// let t = HostTensor::from_vec(vec![1i32, 2, 3], [3])?;
    /// assert_eq!(t.view().to_host(), t);
    /// # Ok::<(), rlx::tensor::TensorError>(())
    /// ```
    pub fn to_host(&self) -> HostTensor {
        let mut t = HostTensor::zeros(self.dtype, self.shape);
        t.data.copy_from_bytes(self.bytes);
        t
    }
}

impl<'a> From<&'a HostTensor> for TensorRef<'a> {
    fn from(t: &'a HostTensor) -> TensorRef<'a> {
        t.view()
    }
}

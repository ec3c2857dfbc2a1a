//! Constant values: scalars in op attributes and tensors embedded in a graph.

use std::fmt;
use std::sync::Arc;

use super::dtype::{DType, Element};
use super::shape::{Shape, TensorType};

/// A single value of any dtype, used for attributes such as a pad value.
///
/// Integers are kept exact as `i64`; `F64` covers every float dtype.
///
/// ```
/// use rlx::ir::{DType, Scalar};
/// assert_eq!(Scalar::from(2.5).to_bytes(DType::F16).len(), 2);
/// assert_eq!(Scalar::Int(-3).to_bytes(DType::I32), (-3i32).to_le_bytes().to_vec());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A floating-point value.
    Float(f64),
    /// An integer value.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

impl Scalar {
    /// The value as `f64` (integers convert with rounding beyond 2^53; `true` is 1).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Float(v) => v,
            Scalar::Int(v) => v as f64,
            Scalar::Bool(v) => f64::from(u8::from(v)),
        }
    }

    /// The value as `i64`, truncating floats toward zero and saturating at the bounds.
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Float(v) => v as i64,
            Scalar::Int(v) => v,
            Scalar::Bool(v) => i64::from(v),
        }
    }

    /// The little-endian bytes of this value converted to `dtype`, with Rust `as`
    /// semantics (saturating float-to-int, wrapping int-to-narrower-int, non-zero is `true`).
    pub fn to_bytes(self, dtype: DType) -> Vec<u8> {
        let mut out = Vec::with_capacity(dtype.size_bytes());
        match dtype {
            DType::F32 => (self.as_f64() as f32).write_le(&mut out),
            DType::F64 => self.as_f64().write_le(&mut out),
            DType::F16 => half::f16::from_f64(self.as_f64()).write_le(&mut out),
            DType::BF16 => half::bf16::from_f64(self.as_f64()).write_le(&mut out),
            DType::I32 => (self.as_i64() as i32).write_le(&mut out),
            DType::I64 => self.as_i64().write_le(&mut out),
            DType::I8 => (self.as_i64() as i8).write_le(&mut out),
            DType::U8 => (self.as_i64() as u8).write_le(&mut out),
            DType::Bool => (self.as_f64() != 0.0).write_le(&mut out),
        }
        out
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Scalar {
        Scalar::Float(v)
    }
}

impl From<f32> for Scalar {
    fn from(v: f32) -> Scalar {
        Scalar::Float(f64::from(v))
    }
}

impl From<i64> for Scalar {
    fn from(v: i64) -> Scalar {
        Scalar::Int(v)
    }
}

impl From<i32> for Scalar {
    fn from(v: i32) -> Scalar {
        Scalar::Int(i64::from(v))
    }
}

impl From<bool> for Scalar {
    fn from(v: bool) -> Scalar {
        Scalar::Bool(v)
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Float(v) => write!(f, "{v:?}"),
            Scalar::Int(v) => write!(f, "{v}"),
            Scalar::Bool(v) => write!(f, "{v}"),
        }
    }
}

/// The data of a constant tensor: a static shape, a dtype and row-major little-endian bytes.
///
/// Cloning shares the bytes.
///
/// ```
/// use rlx::ir::{ConstantData, DType};
/// let c = ConstantData::from_slice(&[1.0f32, 2.0, 3.0], [3]).unwrap();
/// assert_eq!(c.ty().to_string(), "f32[3]");
/// assert_eq!(c.bytes().len(), 12);
/// assert_eq!(c.to_vec::<f32>(), Some(vec![1.0, 2.0, 3.0]));
/// ```
#[derive(Clone, PartialEq)]
pub struct ConstantData {
    ty: TensorType,
    bytes: Arc<[u8]>,
}

/// Why constant data could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConstantError {
    /// The shape has a symbolic dim.
    #[error("constant shape {0} must be static")]
    SymbolicShape(Shape),
    /// The byte or element count does not match the shape.
    #[error("constant of type {ty} needs {expected} bytes, got {got}")]
    SizeMismatch {
        /// The declared type.
        ty: TensorType,
        /// Bytes the type needs.
        expected: usize,
        /// Bytes supplied.
        got: usize,
    },
}

impl ConstantData {
    /// Constant data from raw little-endian bytes.
    pub fn from_bytes(
        dtype: DType,
        shape: impl Into<Shape>,
        bytes: impl Into<Arc<[u8]>>,
    ) -> Result<ConstantData, ConstantError> {
        let ty = TensorType::new(dtype, shape);
        let bytes = bytes.into();
        let expected = ty
            .static_bytes()
            .ok_or_else(|| ConstantError::SymbolicShape(ty.shape.clone()))?;
        if bytes.len() != expected {
            return Err(ConstantError::SizeMismatch {
                ty,
                expected,
                got: bytes.len(),
            });
        }
        Ok(ConstantData { ty, bytes })
    }

    /// Constant data from typed values in row-major order.
    pub fn from_slice<T: Element>(
        values: &[T],
        shape: impl Into<Shape>,
    ) -> Result<ConstantData, ConstantError> {
        let mut bytes = Vec::with_capacity(values.len() * T::DTYPE.size_bytes());
        for v in values {
            v.write_le(&mut bytes);
        }
        ConstantData::from_bytes(T::DTYPE, shape, bytes)
    }

    /// A rank-0 constant holding `value` converted to `dtype`.
    pub fn scalar(value: impl Into<Scalar>, dtype: DType) -> ConstantData {
        ConstantData {
            ty: TensorType::new(dtype, Shape::scalar()),
            bytes: value.into().to_bytes(dtype).into(),
        }
    }

    /// The constant's type.
    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// Row-major little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The values as `T`, if `T` is the constant's dtype.
    pub fn to_vec<T: Element>(&self) -> Option<Vec<T>> {
        (T::DTYPE == self.ty.dtype).then(|| {
            self.bytes
                .chunks_exact(T::DTYPE.size_bytes())
                .map(T::read_le)
                .collect()
        })
    }

    /// Element `i` as a [`Scalar`] (floats widened to `f64`).
    pub fn get(&self, i: usize) -> Option<Scalar> {
        let size = self.ty.dtype.size_bytes();
        let b = self.bytes.get(i * size..(i + 1) * size)?;
        Some(match self.ty.dtype {
            DType::F32 => Scalar::Float(f64::from(f32::read_le(b))),
            DType::F64 => Scalar::Float(f64::read_le(b)),
            DType::F16 => Scalar::Float(half::f16::read_le(b).to_f64()),
            DType::BF16 => Scalar::Float(half::bf16::read_le(b).to_f64()),
            DType::I32 => Scalar::Int(i64::from(i32::read_le(b))),
            DType::I64 => Scalar::Int(i64::read_le(b)),
            DType::I8 => Scalar::Int(i64::from(i8::read_le(b))),
            DType::U8 => Scalar::Int(i64::from(u8::read_le(b))),
            DType::Bool => Scalar::Bool(bool::read_le(b)),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.ty.dtype.size_bytes()
    }

    /// True if the constant has no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl fmt::Debug for ConstantData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConstantData({}, {} bytes)", self.ty, self.bytes.len())
    }
}

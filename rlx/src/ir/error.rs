//! Why shape and dtype inference rejects an op's operands.

use super::dim::Dim;
use super::dtype::DType;
use super::shape::Shape;

/// Why an op cannot be applied to its operands. Operands are numbered from 0.
///
/// Messages say what is wrong without repeating the operand types; [`BuildError`](crate::BuildError)
/// (crate::builder::BuildError) adds the op, the operand types and the caller's location.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InferError {
    /// Wrong number of operands.
    #[error("expected {expected} operands, got {got}")]
    Arity {
        /// The accepted count, e.g. `"2"` or `"1 or 2"`.
        expected: &'static str,
        /// Operands given.
        got: usize,
    },
    /// An operand has a dtype the op does not accept.
    #[error("operand {operand} has dtype {got}, expected {expected}")]
    DType {
        /// Operand index.
        operand: usize,
        /// What is accepted, e.g. `"a float dtype"`.
        expected: &'static str,
        /// The dtype given.
        got: DType,
    },
    /// Operands that must share a dtype do not. There is no implicit promotion.
    #[error("operands {a} and {b} have dtypes {a_dtype} and {b_dtype}; insert an explicit cast")]
    DTypeMismatch {
        /// First operand index.
        a: usize,
        /// Its dtype.
        a_dtype: DType,
        /// Second operand index.
        b: usize,
        /// Its dtype.
        b_dtype: DType,
    },
    /// An operand has the wrong rank.
    #[error("operand {operand} has rank {got}, expected {expected}")]
    Rank {
        /// Operand index.
        operand: usize,
        /// The accepted ranks, e.g. `"at least 2"`.
        expected: String,
        /// The rank given.
        got: usize,
    },
    /// An axis attribute does not exist in the operand.
    #[error("axis {axis} is out of range for rank {rank}")]
    Axis {
        /// The axis named.
        axis: usize,
        /// Rank of the operand.
        rank: usize,
    },
    /// Two dims that must be equal are not provably equal.
    #[error("{what} {a} and {b} {}", differ(a, b))]
    DimMismatch {
        /// Which dims, e.g. `"inner dims"`.
        what: String,
        /// The first dim.
        a: Dim,
        /// The second dim.
        b: Dim,
    },
    /// Shapes are not broadcast-compatible.
    #[error(
        "shapes {a} and {b} do not broadcast: dims {a_dim} and {b_dim} {}",
        differ(a_dim, b_dim)
    )]
    Broadcast {
        /// One shape.
        a: Shape,
        /// The other shape.
        b: Shape,
        /// The offending dim of `a`.
        a_dim: Dim,
        /// The offending dim of `b`.
        b_dim: Dim,
    },
    /// Reshape between different element counts.
    #[error("cannot reshape {from} ({from_numel} elements) to {to} ({to_numel} elements)")]
    Reshape {
        /// Input shape.
        from: Shape,
        /// Its element count.
        from_numel: Dim,
        /// Requested shape.
        to: Shape,
        /// Its element count.
        to_numel: Dim,
    },
    /// An attribute is invalid for these operands; the message says which and why.
    #[error("{0}")]
    Attribute(String),
}

/// Static dims that differ are plainly different; a symbolic one may coincide at run time,
/// but the graph cannot rely on that.
fn differ(a: &Dim, b: &Dim) -> &'static str {
    if a.is_static() && b.is_static() {
        "differ"
    } else {
        "cannot be proven equal"
    }
}

/// Shorthand for [`InferError::Attribute`] with a formatted message.
macro_rules! attr_err {
    ($($arg:tt)*) => {
        $crate::ir::InferError::Attribute(format!($($arg)*))
    };
}
pub(crate) use attr_err;

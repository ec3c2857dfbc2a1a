//! The checks shape and dtype inference shares across ops: operand counts, dtype domains,
//! ranks, axes, provably equal dims and numpy broadcasting.

use crate::ir::{DType, Dim, Domain, InferError, Shape, TensorType};

pub(crate) fn arity(
    inputs: &[TensorType],
    n: usize,
    expected: &'static str,
) -> Result<(), InferError> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(InferError::Arity {
            expected,
            got: inputs.len(),
        })
    }
}

pub(crate) fn arity_range(
    inputs: &[TensorType],
    range: std::ops::RangeInclusive<usize>,
    expected: &'static str,
) -> Result<(), InferError> {
    if range.contains(&inputs.len()) {
        Ok(())
    } else {
        Err(InferError::Arity {
            expected,
            got: inputs.len(),
        })
    }
}

pub(crate) fn require_float(inputs: &[TensorType], operand: usize) -> Result<(), InferError> {
    require_domain(inputs, operand, Domain::Float)
}

pub(crate) fn require_numeric(inputs: &[TensorType], operand: usize) -> Result<(), InferError> {
    require_domain(inputs, operand, Domain::Numeric)
}

/// The operand's dtype is in the domain of an op kind.
pub(crate) fn require_domain(
    inputs: &[TensorType],
    operand: usize,
    domain: Domain,
) -> Result<(), InferError> {
    require(inputs, operand, |d| domain.admits(d), domain.describe())
}

pub(crate) fn require_index(inputs: &[TensorType], operand: usize) -> Result<(), InferError> {
    require(
        inputs,
        operand,
        |d| matches!(d, DType::I32 | DType::I64),
        "i32 or i64",
    )
}

pub(crate) fn require(
    inputs: &[TensorType],
    operand: usize,
    ok: impl Fn(DType) -> bool,
    expected: &'static str,
) -> Result<(), InferError> {
    let got = inputs[operand].dtype;
    if ok(got) {
        Ok(())
    } else {
        Err(InferError::DType {
            operand,
            expected,
            got,
        })
    }
}

pub(crate) fn same_dtype(inputs: &[TensorType], a: usize, b: usize) -> Result<(), InferError> {
    let (a_dtype, b_dtype) = (inputs[a].dtype, inputs[b].dtype);
    if a_dtype == b_dtype {
        Ok(())
    } else {
        Err(InferError::DTypeMismatch {
            a,
            a_dtype,
            b,
            b_dtype,
        })
    }
}

pub(crate) fn min_rank(
    inputs: &[TensorType],
    operand: usize,
    min: usize,
) -> Result<(), InferError> {
    let got = inputs[operand].rank();
    if got >= min {
        Ok(())
    } else {
        Err(InferError::Rank {
            operand,
            expected: format!("at least {min}"),
            got,
        })
    }
}

pub(crate) fn exact_rank(
    inputs: &[TensorType],
    operand: usize,
    rank: usize,
) -> Result<(), InferError> {
    let got = inputs[operand].rank();
    if got == rank {
        Ok(())
    } else {
        Err(InferError::Rank {
            operand,
            expected: rank.to_string(),
            got,
        })
    }
}

pub(crate) fn check_axis(axis: usize, rank: usize) -> Result<(), InferError> {
    if axis < rank {
        Ok(())
    } else {
        Err(InferError::Axis { axis, rank })
    }
}

pub(crate) fn same_dim(what: &str, a: &Dim, b: &Dim) -> Result<(), InferError> {
    if a == b {
        Ok(())
    } else {
        Err(InferError::DimMismatch {
            what: what.to_string(),
            a: a.clone(),
            b: b.clone(),
        })
    }
}

/// Numpy broadcasting of two shapes: right-aligned; a static 1 stretches; anything else
/// must be provably equal.
pub(crate) fn broadcast_shapes(a: &Shape, b: &Shape) -> Result<Shape, InferError> {
    let rank = a.rank().max(b.rank());
    let pad = |s: &Shape, i: usize| -> Dim {
        let offset = rank - s.rank();
        if i < offset {
            Dim::Static(1)
        } else {
            s[i - offset].clone()
        }
    };
    let mut dims = Vec::with_capacity(rank);
    for i in 0..rank {
        let (da, db) = (pad(a, i), pad(b, i));
        let d = if da == db || db.is_one() {
            da
        } else if da.is_one() {
            db
        } else {
            return Err(InferError::Broadcast {
                a: a.clone(),
                b: b.clone(),
                a_dim: da,
                b_dim: db,
            });
        };
        dims.push(d);
    }
    Ok(Shape::new(dims))
}

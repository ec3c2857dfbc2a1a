//! The shape and dtype rule of layer and RMS norm.

use crate::ir::{InferError, TensorType, attr_err};
use crate::ops::check::{arity, exact_rank, min_rank, require_float, same_dim, same_dtype};

/// Layer-norm and RMS-norm: `x` then optional per-feature `weight` and `bias`.
pub(crate) fn norm(
    eps: f64,
    has_weight: bool,
    has_bias: bool,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    let expected = 1 + usize::from(has_weight) + usize::from(has_bias);
    let label = match expected {
        1 => "1 (x)",
        2 if has_weight => "2 (x, weight)",
        2 => "2 (x, bias)",
        _ => "3 (x, weight, bias)",
    };
    arity(inputs, expected, label)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(attr_err!("eps must be finite and non-negative, got {eps}"));
    }
    require_float(inputs, 0)?;
    min_rank(inputs, 0, 1)?;
    let x = &inputs[0].shape;
    let features = &x[x.rank() - 1];
    for operand in 1..expected {
        same_dtype(inputs, 0, operand)?;
        exact_rank(inputs, operand, 1)?;
        same_dim(
            "normalized features and affine parameter size",
            features,
            &inputs[operand].shape[0],
        )?;
    }
    Ok(inputs[0].clone())
}

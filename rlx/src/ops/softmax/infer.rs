//! The shape and dtype rule of softmax and log-softmax.

use crate::ir::{InferError, TensorType};
use crate::ops::check::{arity, check_axis, require_float};

pub(crate) fn softmax(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_float(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(inputs[0].clone())
}

//! Unary, binary, comparison, `where` and cast.

use crate::ir::DType;
use crate::ir::InferError;
use crate::ir::TensorType;
use crate::ir::{BinaryOp, CompareOp, UnaryOp};
use crate::ops::check::{arity, broadcast_shapes, require, require_domain, same_dtype};

pub(crate) fn unary(kind: UnaryOp, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_domain(inputs, 0, kind.domain())?;
    Ok(inputs[0].clone())
}

fn broadcast_pair(inputs: &[TensorType]) -> Result<crate::ir::Shape, InferError> {
    same_dtype(inputs, 0, 1)?;
    broadcast_shapes(&inputs[0].shape, &inputs[1].shape)
}

pub(crate) fn binary(kind: BinaryOp, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2")?;
    require_domain(inputs, 0, kind.domain())?;
    let shape = broadcast_pair(inputs)?;
    Ok(TensorType::new(inputs[0].dtype, shape))
}

pub(crate) fn compare(kind: CompareOp, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2")?;
    require_domain(inputs, 0, kind.domain())?;
    let shape = broadcast_pair(inputs)?;
    Ok(TensorType::new(DType::Bool, shape))
}

pub(crate) fn select(inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 3, "3")?;
    require(inputs, 0, |d| d == DType::Bool, "bool")?;
    same_dtype(inputs, 1, 2)?;
    let shape = broadcast_shapes(&inputs[0].shape, &inputs[1].shape)?;
    let shape = broadcast_shapes(&shape, &inputs[2].shape)?;
    Ok(TensorType::new(inputs[1].dtype, shape))
}

pub(crate) fn cast(to: DType, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    Ok(TensorType::new(to, inputs[0].shape.clone()))
}

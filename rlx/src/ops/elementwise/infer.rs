//! Unary, binary, comparison, `where` and cast.

use crate::ir::DType;
use crate::ir::Dim;
use crate::ir::Domain;
use crate::ir::TensorType;
use crate::ir::{BinaryOp, CompareOp, ElementwiseArg, ElementwiseStep, UnaryOp};
use crate::ir::{InferError, attr_err};
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

/// A fused chain: one float dtype, operands of one shape or scalars, steps that read only
/// operands and earlier steps.
pub(crate) fn fused(
    steps: &[ElementwiseStep],
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    if inputs.is_empty() {
        return Err(InferError::Arity {
            expected: "at least 1",
            got: 0,
        });
    }
    if steps.is_empty() {
        return Err(attr_err!("a fused elementwise op needs at least one step"));
    }
    if inputs.len() + steps.len() > ElementwiseStep::MAX_VALUES {
        return Err(attr_err!(
            "a fused elementwise op has at most {} operands and steps, not {}",
            ElementwiseStep::MAX_VALUES,
            inputs.len() + steps.len()
        ));
    }
    for i in 0..inputs.len() {
        require_domain(inputs, i, Domain::Float)?;
        same_dtype(inputs, 0, i)?;
    }
    let mut shape = inputs[0].shape.clone();
    for input in &inputs[1..] {
        shape = broadcast_shapes(&shape, &input.shape)?;
    }
    let scalar = |s: &crate::ir::Shape| s.dims().iter().all(|d| *d == Dim::from(1));
    if let Some(i) = inputs
        .iter()
        .position(|t| t.shape != shape && !scalar(&t.shape))
    {
        return Err(attr_err!(
            "fused elementwise operand {i} is {}, neither the output's shape {shape} nor a scalar",
            inputs[i].shape
        ));
    }
    for (at, step) in steps.iter().enumerate() {
        let domain = match step {
            ElementwiseStep::Unary(kind, _) => kind.domain(),
            ElementwiseStep::Binary(kind, _, _) => kind.domain(),
        };
        if !domain.admits(inputs[0].dtype) {
            return Err(attr_err!(
                "step {at} ({}) does not take {}",
                step.name(),
                inputs[0].dtype
            ));
        }
        for arg in step.args() {
            match arg {
                ElementwiseArg::Operand(i) if i >= inputs.len() => {
                    return Err(attr_err!("step {at} reads operand {i} of {}", inputs.len()));
                }
                ElementwiseArg::Step(s) if s >= at => {
                    return Err(attr_err!("step {at} reads step {s}, not an earlier one"));
                }
                _ => {}
            }
        }
    }
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

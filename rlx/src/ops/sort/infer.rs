//! The shape and dtype rules of sort, argsort and top-k.

use crate::ir::{DType, Dim, InferError, SortOutput, TensorType, attr_err};
use crate::ops::check::{arity, check_axis, require_numeric};

pub(crate) fn topk(
    k: usize,
    axis: usize,
    output: SortOutput,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    if k == 0 {
        return Err(attr_err!("k must be at least 1"));
    }
    if let Some(n) = inputs[0].shape[axis].as_static()
        && k > n
    {
        return Err(attr_err!("k = {k} exceeds the size {n} of axis {axis}"));
    }
    let mut dims = inputs[0].shape.dims().to_vec();
    dims[axis] = Dim::Static(k);
    Ok(TensorType::new(sorted_dtype(inputs, output), dims))
}

pub(crate) fn sort(
    axis: usize,
    output: SortOutput,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(TensorType::new(
        sorted_dtype(inputs, output),
        inputs[0].shape.clone(),
    ))
}

fn sorted_dtype(inputs: &[TensorType], output: SortOutput) -> DType {
    match output {
        SortOutput::Values => inputs[0].dtype,
        SortOutput::Indices => DType::I64,
    }
}

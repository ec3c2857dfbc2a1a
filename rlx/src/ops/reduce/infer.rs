//! Reductions, scans, normalizations and sorting along axes.

use crate::ir::DType;
use crate::ir::Dim;
use crate::ir::{InferError, attr_err};
use crate::ir::{ReduceOp, SortOutput};
use crate::ir::{Shape, TensorType};
use crate::ops::check::{
    arity, check_axis, exact_rank, min_rank, require_domain, require_float, require_numeric,
    same_dim, same_dtype,
};

fn reduced_shape(shape: &Shape, axes: &[usize], keep_dims: bool) -> Shape {
    let mut dims = Vec::with_capacity(shape.rank());
    for (i, d) in shape.dims().iter().enumerate() {
        if !axes.contains(&i) {
            dims.push(d.clone());
        } else if keep_dims {
            dims.push(Dim::Static(1));
        }
    }
    Shape::new(dims)
}

pub(crate) fn reduce(
    op: ReduceOp,
    axes: &[usize],
    keep_dims: bool,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_domain(inputs, 0, op.domain())?;
    if axes.is_empty() {
        return Err(attr_err!("a reduction needs at least one axis"));
    }
    if !axes.windows(2).all(|w| w[0] < w[1]) {
        return Err(attr_err!("axes {axes:?} must be sorted and unique"));
    }
    for &axis in axes {
        check_axis(axis, inputs[0].rank())?;
    }
    Ok(TensorType::new(
        inputs[0].dtype,
        reduced_shape(&inputs[0].shape, axes, keep_dims),
    ))
}

pub(crate) fn arg_reduce(
    axis: usize,
    keep_dims: bool,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(TensorType::new(
        DType::I64,
        reduced_shape(&inputs[0].shape, &[axis], keep_dims),
    ))
}

pub(crate) fn cumsum(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(inputs[0].clone())
}

pub(crate) fn softmax(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_float(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(inputs[0].clone())
}

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

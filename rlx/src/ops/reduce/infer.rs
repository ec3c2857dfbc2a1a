//! Shape and dtype rules of reductions, arg-reductions and running sums.

use crate::ir::DType;
use crate::ir::Dim;
use crate::ir::ReduceOp;
use crate::ir::{InferError, attr_err};
use crate::ir::{Shape, TensorType};
use crate::ops::check::{arity, check_axis, require_domain, require_numeric};

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

//! Ops that move or select data without arithmetic on it.

use crate::ir::Dim;
use crate::ir::{InferError, attr_err};
use crate::ir::{Shape, TensorType};
use crate::ops::check::{
    arity, check_axis, min_rank, require_index, require_numeric, same_dim, same_dtype,
};

pub(crate) fn reshape(shape: &Shape, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let from = &inputs[0].shape;
    let (from_numel, to_numel) = (from.numel(), shape.numel());
    if from_numel != to_numel {
        return Err(InferError::Reshape {
            from: from.clone(),
            from_numel,
            to: shape.clone(),
            to_numel,
        });
    }
    Ok(TensorType::new(inputs[0].dtype, shape.clone()))
}

pub(crate) fn permute(perm: &[usize], inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let shape = &inputs[0].shape;
    let mut seen = vec![false; shape.rank()];
    for &axis in perm {
        check_axis(axis, shape.rank())?;
        seen[axis] = true;
    }
    if perm.len() != shape.rank() || seen.contains(&false) {
        return Err(attr_err!(
            "{perm:?} is not a permutation of the {} axes of {shape}",
            shape.rank()
        ));
    }
    let dims: Vec<Dim> = perm.iter().map(|&a| shape[a].clone()).collect();
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// An index of a slice as a dim: negative indices count back from `size`.
fn slice_index(index: i64, size: &Dim, what: &str) -> Result<Dim, InferError> {
    let resolved = if index >= 0 {
        Some(Dim::Static(index.unsigned_abs() as usize))
    } else {
        size.checked_sub(&Dim::Static(index.unsigned_abs() as usize))
    };
    match (resolved, size.as_static()) {
        (Some(d), Some(n)) if d.as_static().is_some_and(|v| v <= n) => Ok(d),
        (Some(d), None) => Ok(d),
        _ => Err(attr_err!(
            "slice {what} {index} is out of range for an axis of size {size}"
        )),
    }
}

pub(crate) fn slice(
    axis: usize,
    start: i64,
    stop: Option<i64>,
    step: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let shape = &inputs[0].shape;
    check_axis(axis, shape.rank())?;
    if step == 0 {
        return Err(attr_err!("slice step must be at least 1"));
    }
    let size = &shape[axis];
    let begin = slice_index(start, size, "start")?;
    let end = match stop {
        Some(stop) => slice_index(stop, size, "stop")?,
        None => size.clone(),
    };
    let stop_text = stop.map(|s| s.to_string()).unwrap_or_default();
    let len = end.checked_sub(&begin).ok_or_else(|| {
        attr_err!("slice {start}:{stop_text} ends before it starts on an axis of size {size}")
    })?;
    let len = match len.as_static() {
        Some(n) => Dim::Static(n.div_ceil(step)),
        None if step == 1 => len,
        None => len.div_exact(&Dim::Static(step)).ok_or_else(|| {
            attr_err!("a step of {step} over the symbolic length {len} has no exact size")
        })?,
    };
    let mut dims = shape.dims().to_vec();
    dims[axis] = len;
    Ok(TensorType::new(inputs[0].dtype, dims))
}

pub(crate) fn concat(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    if inputs.is_empty() {
        return Err(InferError::Arity {
            expected: "at least 1",
            got: 0,
        });
    }
    let first = &inputs[0].shape;
    check_axis(axis, first.rank())?;
    let mut total = Dim::Static(0);
    for (operand, input) in inputs.iter().enumerate() {
        same_dtype(inputs, 0, operand)?;
        if input.rank() != first.rank() {
            return Err(InferError::Rank {
                operand,
                expected: first.rank().to_string(),
                got: input.rank(),
            });
        }
        for (i, (a, b)) in first.dims().iter().zip(input.shape.dims()).enumerate() {
            if i != axis {
                same_dim(
                    &format!("dims of axis {i} of operands 0 and {operand}"),
                    a,
                    b,
                )?;
            }
        }
        total = total
            .checked_add(&input.shape[axis])
            .ok_or_else(|| attr_err!("concatenated size along axis {axis} is negative"))?;
    }
    let mut dims = first.dims().to_vec();
    dims[axis] = total;
    Ok(TensorType::new(inputs[0].dtype, dims))
}

pub(crate) fn broadcast(shape: &Shape, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let from = &inputs[0].shape;
    if from.rank() > shape.rank() {
        return Err(attr_err!(
            "cannot broadcast {from} to {shape}: the target has fewer axes"
        ));
    }
    let offset = shape.rank() - from.rank();
    for (i, d) in from.dims().iter().enumerate() {
        let target = &shape[offset + i];
        if d != target && !d.is_one() {
            return Err(InferError::Broadcast {
                a: from.clone(),
                b: shape.clone(),
                a_dim: d.clone(),
                b_dim: target.clone(),
            });
        }
    }
    Ok(TensorType::new(inputs[0].dtype, shape.clone()))
}

pub(crate) fn pad(
    pads: &[(usize, usize)],
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let shape = &inputs[0].shape;
    if pads.len() != shape.rank() {
        return Err(attr_err!(
            "{} (before, after) pairs given for {} axes",
            pads.len(),
            shape.rank()
        ));
    }
    let dims: Vec<Dim> = shape
        .dims()
        .iter()
        .zip(pads)
        .map(|(d, (before, after))| {
            Dim::Static(before + after)
                .checked_add(d)
                .ok_or_else(|| attr_err!("padded size of {d} is negative"))
        })
        .collect::<Result<_, _>>()?;
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// `data[..axis] ++ indices ++ data[axis+1..]`.
fn gathered_shape(data: &Shape, indices: &Shape, axis: usize) -> Shape {
    let mut dims = data.dims()[..axis].to_vec();
    dims.extend_from_slice(indices.dims());
    dims.extend_from_slice(&data.dims()[axis + 1..]);
    Shape::new(dims)
}

pub(crate) fn gather(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2 (data, indices)")?;
    require_index(inputs, 1)?;
    min_rank(inputs, 0, 1)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(TensorType::new(
        inputs[0].dtype,
        gathered_shape(&inputs[0].shape, &inputs[1].shape, axis),
    ))
}

pub(crate) fn scatter_add(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 3, "3 (data, indices, updates)")?;
    require_numeric(inputs, 0)?;
    require_index(inputs, 1)?;
    same_dtype(inputs, 0, 2)?;
    min_rank(inputs, 0, 1)?;
    check_axis(axis, inputs[0].rank())?;
    let expected = gathered_shape(&inputs[0].shape, &inputs[1].shape, axis);
    if inputs[2].shape != expected {
        return Err(attr_err!(
            "updates must have shape {expected} (data dims around axis {axis} with the index \
             dims in between), got {}",
            inputs[2].shape
        ));
    }
    Ok(inputs[0].clone())
}

pub(crate) fn identity(inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    Ok(inputs[0].clone())
}

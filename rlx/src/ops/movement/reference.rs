//! The float64 values of the ops that move values.

use crate::ir::{DType, Scalar};
use crate::ops::ReferenceError;
use crate::ops::array::{Array, Out, for_each_index, store};

pub(super) fn permute(perm: &[usize], x: &Array, out: &Out) -> Array {
    let mut at = vec![0; perm.len()];
    out.fill(|o| {
        for (i, p) in perm.iter().enumerate() {
            at[*p] = o[i];
        }
        x.at(&at)
    })
}

/// Where a slice's first element sits: a negative `start` counts from the end.
fn first(start: i64, len: usize) -> usize {
    if start < 0 {
        (len as i64 + start) as usize
    } else {
        start as usize
    }
}

pub(super) fn slice(axis: usize, start: i64, step: usize, x: &Array, out: &Out) -> Array {
    let begin = first(start, x.shape[axis]);
    let mut at = Vec::new();
    out.fill(|o| {
        at.clear();
        at.extend_from_slice(o);
        at[axis] = begin + o[axis] * step;
        x.at(&at)
    })
}

pub(super) fn concat(axis: usize, x: &[Array], out: &Out) -> Array {
    let mut at = Vec::new();
    out.fill(|o| {
        at.clear();
        at.extend_from_slice(o);
        for part in x {
            if at[axis] < part.shape[axis] {
                return part.at(&at);
            }
            at[axis] -= part.shape[axis];
        }
        unreachable!("the output axis is the sum of the parts'")
    })
}

pub(super) fn broadcast(x: &Array, out: &Out) -> Array {
    out.fill(|o| x.at_broadcast(o))
}

/// `value` as a tensor of `dtype` stores it (rounded to a float, converted to an integer).
fn stored_scalar(dtype: DType, value: Scalar) -> f64 {
    match dtype {
        DType::F32 => f64::from(value.as_f64() as f32),
        DType::F16 => half::f16::from_f64(value.as_f64()).to_f64(),
        DType::BF16 => half::bf16::from_f64(value.as_f64()).to_f64(),
        DType::F64 | DType::Bool => store(dtype, value.as_f64()),
        _ => store(dtype, value.as_i64() as f64),
    }
}

pub(super) fn pad(pads: &[(usize, usize)], value: Scalar, x: &Array, out: &Out) -> Array {
    let fill = stored_scalar(x.dtype, value);
    let mut at = Vec::new();
    out.fill(|o| {
        at.clear();
        for ((i, (before, _)), len) in o.iter().zip(pads).zip(&x.shape) {
            match i.checked_sub(*before).filter(|i| i < len) {
                Some(i) => at.push(i),
                None => return fill,
            }
        }
        x.at(&at)
    })
}

/// Index `i` of `indices` checked against an axis of `size`.
fn index(indices: &Array, i: usize, size: usize) -> Result<usize, ReferenceError> {
    let v = indices.data[i] as i64;
    usize::try_from(v)
        .ok()
        .filter(|v| *v < size)
        .ok_or(ReferenceError::IndexOutOfRange { index: v, size })
}

/// The flat position in `indices` of the index the output (or update) index `o` uses.
fn index_position(o: &[usize], axis: usize, indices: &Array) -> usize {
    let mut flat = 0;
    for (k, d) in indices.shape.iter().enumerate() {
        flat = flat * d + o[axis + k];
    }
    flat
}

/// The data index an output index `o` of a gather (or an update index of a scatter) reads:
/// the axes before `axis`, the chosen index, then the axes after the indices'.
fn data_index(o: &[usize], axis: usize, indices: &Array, chosen: usize) -> Vec<usize> {
    let mut at = o[..axis].to_vec();
    at.push(chosen);
    at.extend_from_slice(&o[axis + indices.shape.len()..]);
    at
}

pub(super) fn gather(axis: usize, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
    let (data, indices) = (&x[0], &x[1]);
    for i in 0..indices.data.len() {
        index(indices, i, data.shape[axis])?;
    }
    Ok(out.fill(|o| {
        let chosen = indices.data[index_position(o, axis, indices)] as usize;
        data.at(&data_index(o, axis, indices, chosen))
    }))
}

pub(super) fn scatter_add(axis: usize, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
    let (data, indices, updates) = (&x[0], &x[1], &x[2]);
    let size = data.shape[axis];
    let mut result = data.clone();
    let strides = data.strides();
    let mut failed = None;
    for_each_index(&updates.shape, |u| {
        match index(indices, index_position(u, axis, indices), size) {
            Ok(chosen) => {
                let at = data_index(u, axis, indices, chosen);
                let flat: usize = at.iter().zip(&strides).map(|(i, s)| i * s).sum();
                let (old, update) = (result.data[flat], updates.at(u));
                result.data[flat] = if data.dtype.is_float() {
                    old + update
                } else {
                    (old as i64).wrapping_add(update as i64) as f64
                };
            }
            Err(e) => failed = failed.take().or(Some(e)),
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out.holding(result.data)),
    }
}

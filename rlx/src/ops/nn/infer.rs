//! Attention and rotary embeddings.

use crate::ir::AttentionMask;
use crate::ir::{InferError, attr_err};
use crate::ir::{Shape, TensorType};
use crate::ops::check::{
    arity, arity_range, broadcast_shapes, exact_rank, min_rank, require_float, require_index,
    same_dim, same_dtype,
};

pub(crate) fn attention(
    scale: f64,
    mask: AttentionMask,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    if mask == AttentionMask::Tensor {
        arity(inputs, 4, "4 (q, k, v, mask)")?;
    } else {
        arity(inputs, 3, "3 (q, k, v)")?;
    }
    if !scale.is_finite() {
        return Err(attr_err!("scale must be finite, got {scale}"));
    }
    if mask == AttentionMask::SlidingWindow(0) {
        return Err(attr_err!("a sliding window must hold at least 1 position"));
    }
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    same_dtype(inputs, 0, 2)?;
    min_rank(inputs, 0, 2)?;
    let rank = inputs[0].rank();
    exact_rank(inputs, 1, rank)?;
    exact_rank(inputs, 2, rank)?;
    let (q, k, v) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
    let (seq_q, head_dim) = (&q[rank - 2], &q[rank - 1]);
    let (seq_k, value_dim) = (&k[rank - 2], &v[rank - 1]);
    same_dim("head dims of q and k", head_dim, &k[rank - 1])?;
    same_dim("sequence lengths of k and v", seq_k, &v[rank - 2])?;
    for axis in 0..rank - 2 {
        same_dim(
            &format!("dims of axis {axis} of k and v"),
            &k[axis],
            &v[axis],
        )?;
        let grouped = axis == rank - 3
            && matches!(
                (q[axis].as_static(), k[axis].as_static()),
                (Some(hq), Some(hk)) if hk > 0 && hq % hk == 0
            );
        if !grouped {
            same_dim(
                &format!("dims of axis {axis} of q and k"),
                &q[axis],
                &k[axis],
            )?;
        }
    }
    let mut scores = q.dims()[..rank - 2].to_vec();
    scores.extend([seq_q.clone(), seq_k.clone()]);
    let scores = Shape::new(scores);
    if mask == AttentionMask::Tensor {
        let m = &inputs[3];
        if m.dtype != crate::ir::DType::Bool {
            same_dtype(inputs, 0, 3)?;
        }
        let fits =
            m.rank() <= rank && broadcast_shapes(&m.shape, &scores).is_ok_and(|s| s == scores);
        if !fits {
            return Err(attr_err!(
                "mask {} does not broadcast to the scores {scores}",
                m.shape
            ));
        }
    }
    let mut out = q.dims()[..rank - 1].to_vec();
    out.push(value_dim.clone());
    Ok(TensorType::new(inputs[0].dtype, out))
}

pub(crate) fn rope(
    dims: usize,
    base: f64,
    scale: f64,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity_range(inputs, 1..=2, "1 or 2 (x, offset)")?;
    require_float(inputs, 0)?;
    min_rank(inputs, 0, 2)?;
    if !(base.is_finite() && base > 0.0) {
        return Err(attr_err!("base must be finite and positive, got {base}"));
    }
    if !scale.is_finite() {
        return Err(attr_err!("scale must be finite, got {scale}"));
    }
    let x = &inputs[0].shape;
    let features = &x[x.rank() - 1];
    let fits = features.as_static().is_some_and(|n| dims <= n);
    if dims == 0 || !dims.is_multiple_of(2) || !fits {
        return Err(attr_err!(
            "rotary dims must be even, positive and at most the feature size {features}, \
             got {dims}"
        ));
    }
    if inputs.len() == 2 {
        require_index(inputs, 1)?;
        exact_rank(inputs, 1, 0)?;
    }
    Ok(inputs[0].clone())
}

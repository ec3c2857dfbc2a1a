//! Attention, rotary embeddings, convolution and pooling.

use super::{
    arity, arity_range, broadcast_shapes, exact_rank, min_rank, require_float, require_index,
    same_dim, same_dtype,
};
use crate::ir::dim::Dim;
use crate::ir::error::{InferError, attr_err};
use crate::ir::op::AttentionMask;
use crate::ir::shape::{Shape, TensorType};

pub(super) fn attention(
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

pub(super) fn rope(
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

/// Output length of a sliding window: `(size + pads - span) / stride + 1`.
fn window_len(
    size: &Dim,
    (before, after): (usize, usize),
    span: usize,
    stride: usize,
    axis: usize,
) -> Result<Dim, InferError> {
    let padded = size
        .checked_add(&Dim::Static(before + after))
        .ok_or_else(|| attr_err!("padded size of {size} is negative"))?;
    let room = padded.checked_sub(&Dim::Static(span)).ok_or_else(|| {
        attr_err!("window of {span} is larger than the padded size {padded} of spatial axis {axis}")
    })?;
    let steps = match room.as_static() {
        Some(n) => Dim::Static(n / stride),
        None => room.div_exact(&Dim::Static(stride)).ok_or_else(|| {
            attr_err!(
                "stride {stride} over the symbolic size {padded} of spatial axis {axis} has no \
                 exact output size"
            )
        })?,
    };
    steps
        .checked_add(&Dim::Static(1))
        .ok_or_else(|| attr_err!("window output of spatial axis {axis} is negative"))
}

fn spatial_rank(
    lens: &[(&str, usize)],
    x: &TensorType,
    operand: usize,
) -> Result<usize, InferError> {
    let s = lens[0].1;
    if !(1..=2).contains(&s) {
        return Err(attr_err!(
            "{} has {s} entries; only 1-D and 2-D windows are supported",
            lens[0].0
        ));
    }
    for (what, n) in &lens[1..] {
        if *n != s {
            return Err(attr_err!("{what} has {n} entries, expected {s}"));
        }
    }
    if x.rank() != s + 2 {
        return Err(InferError::Rank {
            operand,
            expected: format!("{} ([N, C] and {s} spatial)", s + 2),
            got: x.rank(),
        });
    }
    Ok(s)
}

pub(super) fn conv(
    stride: &[usize],
    padding: &[(usize, usize)],
    dilation: &[usize],
    groups: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity_range(inputs, 2..=3, "2 or 3 (x, w, bias)")?;
    let s = spatial_rank(
        &[
            ("stride", stride.len()),
            ("padding", padding.len()),
            ("dilation", dilation.len()),
        ],
        &inputs[0],
        0,
    )?;
    if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
        return Err(attr_err!("stride, dilation and groups must be at least 1"));
    }
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    exact_rank(inputs, 1, s + 2)?;
    let (x, w) = (&inputs[0].shape, &inputs[1].shape);
    let out_channels = &w[0];
    same_dim(
        "input channels and weight channels x groups",
        &x[1],
        &w[1].mul(&Dim::Static(groups)),
    )?;
    if groups > 1
        && out_channels
            .as_static()
            .is_none_or(|o| !o.is_multiple_of(groups))
    {
        return Err(attr_err!(
            "output channels {out_channels} are not a multiple of groups {groups}"
        ));
    }
    if inputs.len() == 3 {
        same_dtype(inputs, 0, 2)?;
        exact_rank(inputs, 2, 1)?;
        same_dim(
            "output channels and bias size",
            out_channels,
            &inputs[2].shape[0],
        )?;
    }
    let mut dims = vec![x[0].clone(), out_channels.clone()];
    for axis in 0..s {
        let kernel = w[2 + axis].as_static().filter(|k| *k > 0).ok_or_else(|| {
            attr_err!(
                "kernel size {} of spatial axis {axis} must be static and positive",
                w[2 + axis]
            )
        })?;
        let span = dilation[axis] * (kernel - 1) + 1;
        dims.push(window_len(
            &x[2 + axis],
            padding[axis],
            span,
            stride[axis],
            axis,
        )?);
    }
    Ok(TensorType::new(inputs[0].dtype, dims))
}

pub(super) fn pool(
    kernel: &[usize],
    stride: &[usize],
    padding: &[(usize, usize)],
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let s = spatial_rank(
        &[
            ("kernel", kernel.len()),
            ("stride", stride.len()),
            ("padding", padding.len()),
        ],
        &inputs[0],
        0,
    )?;
    require_float(inputs, 0)?;
    if kernel.contains(&0) || stride.contains(&0) {
        return Err(attr_err!("kernel and stride must be at least 1"));
    }
    let x = &inputs[0].shape;
    let mut dims = vec![x[0].clone(), x[1].clone()];
    for axis in 0..s {
        let (before, after) = padding[axis];
        if before.max(after) > kernel[axis] / 2 {
            return Err(attr_err!(
                "padding {before}:{after} of spatial axis {axis} exceeds half the window {}",
                kernel[axis]
            ));
        }
        dims.push(window_len(
            &x[2 + axis],
            padding[axis],
            kernel[axis],
            stride[axis],
            axis,
        )?);
    }
    Ok(TensorType::new(inputs[0].dtype, dims))
}

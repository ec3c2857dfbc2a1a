//! Windows over spatial axes: convolution, its transpose, pooling and upsampling.

use crate::ir::Dim;
use crate::ir::{InferError, attr_err};
use crate::ir::{Shape, TensorType};
use crate::ops::check::{arity, arity_range, exact_rank, require_float, same_dim, same_dtype};

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

pub(crate) fn conv(
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
    let (x, w) = (&inputs[0].shape, &inputs[1].shape);
    let out_channels = w[0].clone();
    let takes = w[1].mul(&Dim::Static(groups));
    let what = "input channels and weight channels x groups";
    channels_and_bias(inputs, s, groups, (what, &takes), &out_channels)?;
    let mut dims = vec![x[0].clone(), out_channels];
    for axis in 0..s {
        let span = dilation[axis] * (kernel_size(w, axis)? - 1) + 1;
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

/// The checks a convolution and its transpose share: float operands of one dtype, a weight
/// of the input's rank whose channel dim times `groups` is `in_channels`, output channels
/// divisible by `groups`, and a bias of `[out_channels]` when present.
fn channels_and_bias(
    inputs: &[TensorType],
    spatial: usize,
    groups: usize,
    (what, in_channels): (&str, &Dim),
    out_channels: &Dim,
) -> Result<(), InferError> {
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    exact_rank(inputs, 1, spatial + 2)?;
    same_dim(what, &inputs[0].shape[1], in_channels)?;
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
    Ok(())
}

/// The static, positive kernel size of spatial `axis` of a conv weight.
fn kernel_size(w: &Shape, axis: usize) -> Result<usize, InferError> {
    w[2 + axis].as_static().filter(|k| *k > 0).ok_or_else(|| {
        attr_err!(
            "kernel size {} of spatial axis {axis} must be static and positive",
            w[2 + axis]
        )
    })
}

pub(crate) fn conv_transpose(
    stride: &[usize],
    padding: &[(usize, usize)],
    output_padding: &[usize],
    dilation: &[usize],
    groups: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity_range(inputs, 2..=3, "2 or 3 (x, w, bias)")?;
    let s = spatial_rank(
        &[
            ("stride", stride.len()),
            ("padding", padding.len()),
            ("output_padding", output_padding.len()),
            ("dilation", dilation.len()),
        ],
        &inputs[0],
        0,
    )?;
    if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
        return Err(attr_err!("stride, dilation and groups must be at least 1"));
    }
    for axis in 0..s {
        if output_padding[axis] >= stride[axis].max(dilation[axis]) {
            return Err(attr_err!(
                "output padding {} of spatial axis {axis} must be less than the stride or the \
                 dilation",
                output_padding[axis]
            ));
        }
    }
    let (x, w) = (&inputs[0].shape, &inputs[1].shape);
    let out_channels = w[1].mul(&Dim::Static(groups));
    if groups > 1 && w[0].as_static().is_none_or(|c| !c.is_multiple_of(groups)) {
        return Err(attr_err!(
            "input channels {} are not a multiple of groups {groups}",
            w[0]
        ));
    }
    let what = "input channels and weight input channels";
    channels_and_bias(inputs, s, groups, (what, &w[0]), &out_channels)?;
    let mut dims = vec![x[0].clone(), out_channels];
    for axis in 0..s {
        let (before, after) = padding[axis];
        let full = dilation[axis] * (kernel_size(w, axis)? - 1) + 1 + output_padding[axis];
        // (in - 1)·stride + full - before - after, kept in the form in·stride + c.
        let len = x[2 + axis]
            .mul(&Dim::Static(stride[axis]))
            .checked_add(&Dim::Static(full))
            .and_then(|d| d.checked_sub(&Dim::Static(stride[axis] + before + after)))
            .filter(|d| d.as_static() != Some(0))
            .ok_or_else(|| {
                attr_err!(
                    "padding {before}:{after} of spatial axis {axis} crops the whole output \
                     of input size {}",
                    x[2 + axis]
                )
            })?;
        dims.push(len);
    }
    Ok(TensorType::new(inputs[0].dtype, dims))
}

pub(crate) fn pool(
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

pub(crate) fn upsample(size: &Shape, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_float(inputs, 0)?;
    exact_rank(inputs, 0, 4)?;
    if size.rank() != 2 {
        return Err(attr_err!(
            "size has {} entries; upsampling resizes the 2 spatial axes [H, W]",
            size.rank()
        ));
    }
    if let Some(zero) = size.dims().iter().find(|d| d.as_static() == Some(0)) {
        return Err(attr_err!("output size {zero} must be at least 1"));
    }
    let x = &inputs[0].shape;
    if let Some(empty) = [&x[2], &x[3]]
        .into_iter()
        .find(|d| d.as_static() == Some(0))
    {
        return Err(attr_err!(
            "cannot upsample from an empty spatial axis (size {empty})"
        ));
    }
    let dims = [x[0].clone(), x[1].clone(), size[0].clone(), size[1].clone()];
    Ok(TensorType::new(inputs[0].dtype, dims))
}

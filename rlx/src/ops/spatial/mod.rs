//! Convolutions, pooling and resizing over channels-first spatial axes, one file per op
//! (convolution and its transpose share one); the window geometry they share here.

mod conv;
mod pool;
mod upsample;

pub use conv::{Conv, ConvTranspose};
pub use pool::Pool;
pub use upsample::Upsample;

use crate::autodiff::{Emitter, GradError};
use crate::ir::{Dim, InferError, NodeId, Op, TensorType, attr_err};
use crate::ops::array::Array;

/// How a convolution's window slides: per spatial axis its stride, `(before, after)`
/// padding and dilation; and the channel groups (pooling: dilation 1, one group).
pub(super) struct Window<'a> {
    pub stride: &'a [usize],
    pub padding: &'a [(usize, usize)],
    pub dilation: &'a [usize],
    pub groups: usize,
}

/// Output length of a sliding window: `(size + pads - span) / stride + 1`.
pub(super) fn window_len(
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

pub(super) fn spatial_rank(
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

pub(super) fn statics(e: &Emitter<'_>, dims: &[Dim]) -> Result<Vec<usize>, GradError> {
    dims.iter()
        .map(|d| d.as_static())
        .collect::<Option<Vec<_>>>()
        .ok_or(GradError::NotYet { at: e.site() })
}

/// The transposed conv that maps `g` (a conv's output gradient) back onto an input of
/// `spatial` sizes: its output padding makes the sizes come out exactly.
pub(super) fn back_to_input(
    e: &mut Emitter<'_>,
    g: NodeId,
    w: NodeId,
    win: &Window<'_>,
    spatial: &[Dim],
) -> Result<NodeId, GradError> {
    let gs = e.shape(g);
    let ws = e.shape(w);
    let s = win.stride.len();
    let mut output_padding = Vec::with_capacity(s);
    for a in 0..s {
        let (input, out) = (spatial[a].as_static(), gs[2 + a].as_static());
        let kernel = ws[2 + a].as_static().unwrap_or(1);
        let pad = match (input, out) {
            (Some(input), Some(out)) => {
                let (lo, hi) = win.padding[a];
                let reached = (out - 1) * win.stride[a] + win.dilation[a] * (kernel - 1) + 1;
                (input + lo + hi).saturating_sub(reached)
            }
            // Stride 1 reaches every position: nothing is left over.
            _ if win.stride[a] == 1 => 0,
            _ => return Err(GradError::NotYet { at: e.site() }),
        };
        output_padding.push(pad);
    }
    let op = Op::ConvTranspose(ConvTranspose {
        stride: win.stride.to_vec(),
        padding: win.padding.to_vec(),
        output_padding,
        dilation: win.dilation.to_vec(),
        groups: win.groups,
    });
    e.op(op, &[g, w])
}

/// The input position that output position `out` and tap `tap` read along one spatial
/// axis, or `None` in the padding.
pub(super) fn source(
    out: usize,
    tap: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    len: usize,
) -> Option<usize> {
    (out * stride + tap * dilation)
        .checked_sub(pad)
        .filter(|p| *p < len)
}

/// The input index `[n, c, positions]` that output spatial index `o` and kernel tap `k`
/// read, or `None` when any axis falls in the padding.
pub(super) fn window_source(
    win: &Window<'_>,
    x: &Array,
    n: usize,
    c: usize,
    o: &[usize],
    k: &[usize],
) -> Option<Vec<usize>> {
    let mut at = vec![n, c];
    for a in 0..o.len() {
        let (stride, dilation, pad) = (win.stride[a], win.dilation[a], win.padding[a].0);
        at.push(source(o[a], k[a], stride, dilation, pad, x.shape[2 + a])?);
    }
    Some(at)
}

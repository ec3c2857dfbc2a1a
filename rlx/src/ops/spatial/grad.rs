//! Convolution and its transpose, pooling and upsampling: the adjoint of a window op is the
//! op that runs the windows the other way, so the rules are written with the spatial ops
//! themselves.

use super::Window;
use crate::autodiff::Emitter;
use crate::autodiff::Grad;
use crate::autodiff::GradError;
use crate::ir::{Cast, Conv, ConvTranspose, Pad, Permute, ScatterAdd, Slice};
use crate::ir::{ConstantData, Dim, NodeId, Op, PoolKind, ReduceOp, Shape, UpsampleMode};

fn statics(e: &Emitter<'_>, dims: &[Dim]) -> Result<Vec<usize>, GradError> {
    dims.iter()
        .map(|d| d.as_static())
        .collect::<Option<Vec<_>>>()
        .ok_or(GradError::NotYet { at: e.site() })
}

/// `[N, C, *L] -> [*axes permuted]` helper: the permutation moving axis 1 first.
fn swap01(rank: usize) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(0, 1);
    perm
}

/// The transposed conv that maps `g` (a conv's output gradient) back onto an input of
/// `spatial` sizes: its output padding makes the sizes come out exactly.
fn back_to_input(
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

/// The gradient of a conv's weight `[O, C/G, *K]`: the correlation of the input `x`
/// `[N, C, *L]` with the output gradient `g` `[N, O, *Lo]`, as one conv whose batch is the
/// channels of a group and whose channels are (group, image): stride and dilation trade
/// places.
fn weight_grad(
    e: &mut Emitter<'_>,
    x: NodeId,
    g: NodeId,
    win: &Window<'_>,
    kernel: &[Dim],
) -> Result<NodeId, GradError> {
    let xs = e.shape(x);
    let rank = xs.rank();
    let groups = win.groups;
    let channels = xs[1].clone();
    let per_group = channels
        .div_exact(&Dim::Static(groups))
        .ok_or(GradError::NotYet { at: e.site() })?;
    // x: [N, C, *L] -> [N, G, C/G, *L] -> [C/G, G, N, *L] -> [C/G, G·N, *L]
    let mut split = vec![xs[0].clone(), Dim::Static(groups), per_group.clone()];
    split.extend_from_slice(&xs.dims()[2..]);
    let xg = e.reshape(x, Shape::new(split))?;
    let mut perm = vec![2, 1, 0];
    perm.extend(3..rank + 1);
    let xg = e.op(Op::Permute(Permute { perm }), &[xg])?;
    let mut merged = vec![per_group.clone(), Dim::Static(groups).mul(&xs[0])];
    merged.extend_from_slice(&xs.dims()[2..]);
    let xg = e.reshape(xg, Shape::new(merged))?;
    // g: [N, O, *Lo] -> [O, N, *Lo]
    let gt = e.op(Op::Permute(Permute { perm: swap01(rank) }), &[g])?;
    let op = Op::Conv(Conv {
        stride: win.dilation.to_vec(),
        padding: win.padding.to_vec(),
        dilation: win.stride.to_vec(),
        groups,
    });
    let full = e.op(op, &[xg, gt])?;
    // [C/G, O, *K'] with K' >= K: keep the first K taps, then [O, C/G, *K].
    let mut cut = full;
    let fs = e.shape(full);
    for (a, k) in kernel.iter().enumerate() {
        if &fs[2 + a] != k {
            let k = k.as_static().ok_or(GradError::NotYet { at: e.site() })?;
            let slice = Op::Slice(Slice {
                axis: 2 + a,
                start: 0,
                stop: Some(k as i64),
                step: 1,
            });
            cut = e.op(slice, &[cut])?;
        }
    }
    e.op(Op::Permute(Permute { perm: swap01(rank) }), &[cut])
}

/// A bias's gradient: `g` summed over everything but the channels.
fn bias_grad(e: &mut Emitter<'_>, g: NodeId) -> Result<NodeId, GradError> {
    let rank = e.shape(g).rank();
    let axes: Vec<usize> = std::iter::once(0).chain(2..rank).collect();
    e.reduce(ReduceOp::Sum, g, axes, false)
}

pub(crate) fn conv(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    win: &Window<'_>,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x[0]);
    let ws = e.shape(x[1]);
    let dx = back_to_input(e, g, x[1], win, &xs.dims()[2..])?;
    let dw = weight_grad(e, x[0], g, win, &ws.dims()[2..])?;
    let mut grads = vec![Grad::Some(dx), Grad::Some(dw)];
    if x.len() == 3 {
        grads.push(Grad::Some(bias_grad(e, g)?));
    }
    Ok(grads)
}

/// The transpose's input gradient is the conv of `g` (cut to the input's length when an
/// output padding of a stride or more left extra positions); its weight gradient is the
/// conv weight gradient with the roles of input and output swapped.
pub(crate) fn conv_transpose(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    win: &Window<'_>,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x[0]);
    let ws = e.shape(x[1]);
    let op = Op::Conv(Conv {
        stride: win.stride.to_vec(),
        padding: win.padding.to_vec(),
        dilation: win.dilation.to_vec(),
        groups: win.groups,
    });
    let mut dx = e.op(op, &[g, x[1]])?;
    for a in 0..win.stride.len() {
        let got = e.shape(dx)[2 + a].clone();
        if got != xs[2 + a] {
            let want = statics(e, &[xs[2 + a].clone()])?[0];
            let slice = Op::Slice(Slice {
                axis: 2 + a,
                start: 0,
                stop: Some(want as i64),
                step: 1,
            });
            dx = e.op(slice, &[dx])?;
        }
    }
    let dw = weight_grad(e, g, x[0], win, &ws.dims()[2..])?;
    let mut grads = vec![Grad::Some(dx), Grad::Some(dw)];
    if x.len() == 3 {
        grads.push(Grad::Some(bias_grad(e, g)?));
    }
    Ok(grads)
}

/// Average pooling spreads each output's gradient evenly over its window (padding included,
/// as the forward divides by the full window): a depthwise transposed conv with a constant
/// kernel. Max pooling sends it to the window's first position holding the maximum,
/// moved back per kernel tap with a one-hot transposed conv.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pool(
    e: &mut Emitter<'_>,
    x: NodeId,
    y: NodeId,
    kind: PoolKind,
    kernel: &[usize],
    stride: &[usize],
    padding: &[(usize, usize)],
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x);
    let dtype = e.dtype(x);
    let channels = statics(e, &[xs[1].clone()])?[0];
    let ones = vec![1; kernel.len()];
    let win = Window {
        stride,
        padding,
        dilation: &ones,
        groups: channels,
    };
    let taps: usize = kernel.iter().product();
    let mut wshape = vec![channels, 1];
    wshape.extend_from_slice(kernel);
    let spread = |e: &mut Emitter<'_>, value: NodeId, weights: Vec<f64>| {
        let data: Vec<f64> = (0..channels)
            .flat_map(|_| weights.iter().copied())
            .collect();
        let w = e.constant(
            ConstantData::from_slice(&data, Shape::from(wshape.as_slice()))
                .expect("the kernel's size matches its shape"),
        );
        let w = if dtype == crate::ir::DType::F64 {
            w
        } else {
            e.op(Op::Cast(Cast { to: dtype }), &[w])?
        };
        back_to_input(e, value, w, &win, &xs.dims()[2..])
    };
    let grad = match kind {
        PoolKind::Avg => spread(e, g, vec![1.0 / taps as f64; taps])?,
        PoolKind::Max => {
            // Each window's value at tap t, read from x padded with −∞ by strided slices
            // (no arithmetic, so the comparison with y is exact on every backend); the
            // first tap equal to the maximum takes the gradient, as in PyTorch.
            let rank = xs.rank();
            let mut pads = vec![(0, 0); 2];
            pads.extend_from_slice(padding);
            let padded = e.op(
                Op::Pad(Pad {
                    pads,
                    value: crate::ir::Scalar::Float(f64::NEG_INFINITY),
                }),
                &[x],
            )?;
            let out = statics(e, &e.shape(y).dims()[2..])?;
            let mut total: Option<NodeId> = None;
            let mut free: Option<NodeId> = None;
            for tap in 0..taps {
                let mut at = tap;
                let mut offsets = vec![0; kernel.len()];
                for a in (0..kernel.len()).rev() {
                    offsets[a] = at % kernel[a];
                    at /= kernel[a];
                }
                let mut view = padded;
                for a in 0..kernel.len() {
                    let start = offsets[a];
                    let stop = start + (out[a].max(1) - 1) * stride[a] + 1;
                    let slice = Op::Slice(Slice {
                        axis: rank - kernel.len() + a,
                        start: start as i64,
                        stop: Some(stop as i64),
                        step: stride[a],
                    });
                    view = e.op(slice, &[view])?;
                }
                let hit = e.op(Op::Compare(crate::ir::CompareOp::Eq), &[view, y])?;
                let take = match free {
                    Some(f) => e.op(Op::Where, &[f, hit, f])?,
                    None => hit,
                };
                let no = e_false(e)?;
                free = Some(match free {
                    Some(f) => e.op(Op::Where, &[hit, no, f])?,
                    None => e.op(Op::Compare(crate::ir::CompareOp::Eq), &[hit, no])?,
                });
                let part = e.keep_where(take, g)?;
                let mut one_hot = vec![0.0; taps];
                one_hot[tap] = 1.0;
                let back = spread(e, part, one_hot)?;
                total = Some(match total {
                    Some(t) => e.add(t, back)?,
                    None => back,
                });
            }
            total.expect("a window has at least one tap")
        }
    };
    Ok(vec![Grad::Some(grad)])
}

/// A `false` scalar.
fn e_false(e: &mut Emitter<'_>) -> Result<NodeId, GradError> {
    Ok(e.constant(ConstantData::scalar(
        crate::ir::Scalar::Bool(false),
        crate::ir::DType::Bool,
    )))
}

/// Each output position of an upsampling read two input positions per axis with weights
/// `1 − t` and `t`; the adjoint adds the gradient back there: two scatter-adds per axis,
/// the last axis first.
pub(crate) fn upsample(
    e: &mut Emitter<'_>,
    x: NodeId,
    mode: UpsampleMode,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x);
    let sizes = statics(e, &xs.dims()[2..])?;
    let out = statics(e, &e.shape(g).dims()[2..])?;
    let dtype = e.dtype(x);
    let mut grad = g;
    for axis in [3, 2] {
        let (input, output) = (sizes[axis - 2], out[axis - 2]);
        let taps: Vec<_> = (0..output).map(|p| mode.tap(p, input, output)).collect();
        let mut target = e.shape(grad).dims().to_vec();
        target[axis] = Dim::Static(input);
        let zeros = e.zeros(dtype, Shape::new(target))?;
        let indices = |e: &mut Emitter<'_>, pick: fn(&crate::ir::UpsampleTap) -> usize| {
            let idx: Vec<i64> = taps.iter().map(|t| pick(t) as i64).collect();
            e.constant(ConstantData::from_slice(&idx, [output]).expect("one index per position"))
        };
        let weight = |e: &mut Emitter<'_>, f: fn(f64) -> f64| -> Result<NodeId, GradError> {
            let w: Vec<f64> = taps.iter().map(|t| f(t.t)).collect();
            let mut shape = vec![1; 4];
            shape[axis] = output;
            let c = e.constant(
                ConstantData::from_slice(&w, Shape::from(shape.as_slice()))
                    .expect("one weight per position"),
            );
            if dtype == crate::ir::DType::F64 {
                Ok(c)
            } else {
                e.op(Op::Cast(Cast { to: dtype }), &[c])
            }
        };
        let lo = indices(e, |t| t.lo);
        let hi = indices(e, |t| t.hi);
        let w_lo = weight(e, |t| 1.0 - t)?;
        let w_hi = weight(e, |t| t)?;
        let part_lo = e.mul(grad, w_lo)?;
        let part_hi = e.mul(grad, w_hi)?;
        let first = e.op(Op::ScatterAdd(ScatterAdd { axis }), &[zeros, lo, part_lo])?;
        grad = e.op(Op::ScatterAdd(ScatterAdd { axis }), &[first, hi, part_hi])?;
    }
    Ok(vec![Grad::Some(grad)])
}

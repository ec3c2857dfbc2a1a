//! The float64 values of convolutions, pooling and upsampling (channels first, 1-D or 2-D),
//! written term by term from their definitions.

use super::Window;
use crate::ir::{PoolKind, UpsampleMode};
use crate::ops::array::{Array, Out, for_each_index};

/// The input position that output position `out` and tap `tap` read along one spatial
/// axis, or `None` in the padding.
fn source(
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
fn window_source(
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

pub(super) fn conv(win: &Window<'_>, x: &[Array], out: &Out) -> Array {
    let (input, w, bias) = (&x[0], &x[1], x.get(2));
    let per_group_in = w.shape[1];
    let per_group_out = w.shape[0] / win.groups.max(1);
    let kernel = &w.shape[2..];
    out.fill(|o| {
        let (n, oc, pos) = (o[0], o[1], &o[2..]);
        let group = oc / per_group_out.max(1);
        let mut sum = bias.map_or(0.0, |b| b.data[oc]);
        for c in 0..per_group_in {
            for_each_index(kernel, |k| {
                let ic = group * per_group_in + c;
                let src = window_source(win, input, n, ic, pos, k);
                if let Some(at) = src {
                    let mut wi = vec![oc, c];
                    wi.extend_from_slice(k);
                    sum += input.at(&at) * w.at(&wi);
                }
            });
        }
        sum
    })
}

/// Input position `i` and tap `k` add `x[n, c, i] · w[c, o, k]` into output position
/// `i·stride + k·dilation − padding.0` (dropped outside the output).
pub(super) fn conv_transpose(win: &Window<'_>, x: &[Array], out: &Out) -> Array {
    let (input, w, bias) = (&x[0], &x[1], x.get(2));
    let per_group_in = input.shape[1] / win.groups.max(1);
    let per_group_out = w.shape[1];
    let kernel = &w.shape[2..];
    let mut result = out.fill(|o| bias.map_or(0.0, |b| b.data[o[1]]));
    let strides = result.strides();
    for_each_index(&input.shape, |xi| {
        let (n, ic) = (xi[0], xi[1]);
        let group = ic / per_group_in.max(1);
        for oc in 0..per_group_out {
            for_each_index(kernel, |k| {
                let mut flat = n * strides[0] + (group * per_group_out + oc) * strides[1];
                for a in 0..k.len() {
                    let p = (xi[2 + a] * win.stride[a] + k[a] * win.dilation[a])
                        .checked_sub(win.padding[a].0)
                        .filter(|p| *p < out.shape[2 + a]);
                    match p {
                        Some(p) => flat += p * strides[2 + a],
                        None => return,
                    }
                }
                let mut wi = vec![ic, oc];
                wi.extend_from_slice(k);
                result.data[flat] += input.at(xi) * w.at(&wi);
            });
        }
    });
    result
}

/// The maximum over the window (padding never wins; a NaN does) or its mean with padded
/// positions counted as zeros.
pub(super) fn pool(
    kind: PoolKind,
    kernel: &[usize],
    stride: &[usize],
    padding: &[(usize, usize)],
    x: &Array,
    out: &Out,
) -> Array {
    let ones = vec![1; kernel.len()];
    let win = Window {
        stride,
        padding,
        dilation: &ones,
        groups: 1,
    };
    let count: usize = kernel.iter().product();
    out.fill(|o| {
        let mut vals = Vec::with_capacity(count);
        for_each_index(kernel, |k| {
            if let Some(at) = window_source(&win, x, o[0], o[1], &o[2..], k) {
                vals.push(x.at(&at));
            }
        });
        match kind {
            PoolKind::Max if vals.iter().any(|v| v.is_nan()) => f64::NAN,
            PoolKind::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            PoolKind::Avg => vals.iter().sum::<f64>() / count as f64,
        }
    })
}

/// Each output position blends the input positions its mode's taps name, per axis.
pub(super) fn upsample(mode: UpsampleMode, x: &Array, out: &Out) -> Array {
    let (h, w) = (x.shape[2], x.shape[3]);
    let (oh, ow) = (out.shape[2], out.shape[3]);
    out.fill(|o| {
        let ty = mode.tap(o[2], h, oh);
        let tx = mode.tap(o[3], w, ow);
        let v = |y: usize, xx: usize| x.at(&[o[0], o[1], y, xx]);
        let top = blend(v(ty.lo, tx.lo), v(ty.lo, tx.hi), tx.t);
        let bottom = blend(v(ty.hi, tx.lo), v(ty.hi, tx.hi), tx.t);
        blend(top, bottom, ty.t)
    })
}

/// `a·(1 − t) + b·t`, exactly `a` when `t` is 0 (an infinite `b` does not leak in).
fn blend(a: f64, b: f64, t: f64) -> f64 {
    if t == 0.0 { a } else { a * (1.0 - t) + b * t }
}

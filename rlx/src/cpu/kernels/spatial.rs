//! Windows over spatial axes: pooling, the im2col step of convolution and its adjoint
//! col2im (for the transposed convolution), and upsampling.

use super::layout::parallel;
use super::numeric::{FloatStore, Real};
use crate::ir::{PoolKind, UpsampleTap};

/// A 2-D window over `[N, C, H, W]` (1-D uses `H = 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub batch: usize,
    pub channels: usize,
    pub in_hw: [usize; 2],
    pub out_hw: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pad_before: [usize; 2],
    pub dilation: [usize; 2],
}

impl Window {
    /// The input position a kernel tap reads for an output position, if not padding.
    fn source(&self, axis: usize, out: usize, tap: usize) -> Option<usize> {
        let at = (out * self.stride[axis] + tap * self.dilation[axis])
            .checked_sub(self.pad_before[axis])?;
        (at < self.in_hw[axis]).then_some(at)
    }
}

/// Max or average pooling (padding counts as zero in the average).
pub(crate) fn pool<T: FloatStore>(w: &Window, kind: PoolKind, x: &[T], out: &mut [T]) {
    let max = kind == PoolKind::Max;
    let [ih, iw] = w.in_hw;
    let [oh, ow] = w.out_hw;
    let count = <T::Acc as Real>::from_f64((w.kernel[0] * w.kernel[1]) as f64);
    for plane in 0..w.batch * w.channels {
        let xs = &x[plane * ih * iw..][..ih * iw];
        let os = &mut out[plane * oh * ow..][..oh * ow];
        for oy in 0..oh {
            for ox in 0..ow {
                let mut acc = if max {
                    <T::Acc as Real>::NEG_INFINITY
                } else {
                    <T::Acc as Real>::ZERO
                };
                for ky in 0..w.kernel[0] {
                    let Some(y) = w.source(0, oy, ky) else {
                        continue;
                    };
                    for kx in 0..w.kernel[1] {
                        let Some(xx) = w.source(1, ox, kx) else {
                            continue;
                        };
                        let v = xs[y * iw + xx].load();
                        acc = if max { acc.maximum(v) } else { acc + v };
                    }
                }
                os[oy * ow + ox] = T::store(if max { acc } else { acc / count });
            }
        }
    }
}

/// Writes the patches of one image's channel group `[channels, H, W]` as the columns of a
/// `[channels * KH * KW, OH * OW]` matrix (zeros for padding).
pub(crate) fn im2col<T: FloatStore>(w: &Window, image: &[T], channels: usize, col: &mut [T]) {
    let [ih, iw] = w.in_hw;
    let [oh, ow] = w.out_hw;
    let zero = T::store(<T::Acc as Real>::ZERO);
    let mut row = 0;
    for c in 0..channels {
        for ky in 0..w.kernel[0] {
            for kx in 0..w.kernel[1] {
                let dst = &mut col[row * oh * ow..][..oh * ow];
                for oy in 0..oh {
                    let y = w.source(0, oy, ky);
                    for ox in 0..ow {
                        dst[oy * ow + ox] = match (y, w.source(1, ox, kx)) {
                            (Some(y), Some(x)) => image[(c * ih + y) * iw + x],
                            _ => zero,
                        };
                    }
                }
                row += 1;
            }
        }
    }
}

/// The adjoint of [`im2col`]: adds each column entry of a `[channels * KH * KW, OH * OW]`
/// matrix into the image position `[channels, H, W]` its tap reads, skipping padding. The
/// image must be initialized (zeros or bias).
pub(crate) fn col2im<A: Real>(w: &Window, col: &[A], channels: usize, image: &mut [A]) {
    let [ih, iw] = w.in_hw;
    let [oh, ow] = w.out_hw;
    let mut row = 0;
    for c in 0..channels {
        let plane = &mut image[c * ih * iw..][..ih * iw];
        for ky in 0..w.kernel[0] {
            for kx in 0..w.kernel[1] {
                let src = &col[row * oh * ow..][..oh * ow];
                for oy in 0..oh {
                    let Some(y) = w.source(0, oy, ky) else {
                        continue;
                    };
                    for ox in 0..ow {
                        if let Some(x) = w.source(1, ox, kx) {
                            plane[y * iw + x] += src[oy * ow + ox];
                        }
                    }
                }
                row += 1;
            }
        }
    }
}

/// A 2-D resize of images `[H, W]`, with each output row's and column's taps computed
/// when the plan is made.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Resize {
    pub in_hw: [usize; 2],
    pub rows: Vec<UpsampleTap>,
    pub cols: Vec<UpsampleTap>,
}

/// Upsampling (or any resize) by the plan's taps, bilinear interpolation in the
/// accumulator type (nearest taps have `t = 0`); images in parallel when worth it.
pub(crate) fn upsample<T: FloatStore>(r: &Resize, x: &[T], out: &mut [T]) {
    let [ih, iw] = r.in_hw;
    let out_plane = r.rows.len() * r.cols.len();
    if ih * iw == 0 || out_plane == 0 {
        return;
    }
    if parallel(out.len()) {
        let images = out.len() / out_plane;
        crate::cpu::workers::chunks_mut(&mut out[..images * out_plane], out_plane, |i, dst| {
            resize_image(r, &x[i * ih * iw..(i + 1) * ih * iw], dst)
        });
    } else {
        for (image, dst) in x.chunks_exact(ih * iw).zip(out.chunks_exact_mut(out_plane)) {
            resize_image(r, image, dst);
        }
    }
}

fn resize_image<T: FloatStore>(r: &Resize, image: &[T], out: &mut [T]) {
    let iw = r.in_hw[1];
    // `t = 0` copies, so nearest passes infinities through unchanged.
    let lerp = |a: T::Acc, b: T::Acc, t: f64| {
        if t == 0.0 {
            a
        } else {
            a + (b - a) * T::Acc::from_f64(t)
        }
    };
    for (row, dst) in r.rows.iter().zip(out.chunks_exact_mut(r.cols.len())) {
        let top = &image[row.lo * iw..][..iw];
        let bottom = &image[row.hi * iw..][..iw];
        for (d, col) in dst.iter_mut().zip(&r.cols) {
            let upper = lerp(top[col.lo].load(), top[col.hi].load(), col.t);
            let lower = lerp(bottom[col.lo].load(), bottom[col.hi].load(), col.t);
            *d = T::store(lerp(upper, lower, row.t));
        }
    }
}

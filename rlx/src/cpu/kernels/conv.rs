//! Convolution as im2col + GEMM per image and channel group, and its transpose as GEMM +
//! col2im.

use super::gemm::{GemmAcc, GemmPlan, gemm, in_accumulator};
use super::numeric::{FloatStore, Real};
use super::spatial::{Window, col2im, im2col};

/// The geometry of a convolution and the GEMM of one image and group:
/// `[O/g, C/g*KH*KW] x [C/g*KH*KW, OH*OW]`.
#[derive(Clone, Debug)]
pub(crate) struct ConvShape {
    pub window: Window,
    pub groups: usize,
    pub out_channels: usize,
    pub gemm: GemmPlan,
}

/// `out = conv(x, weights) + bias`, channels first. `col` holds one image-group's patches,
/// `scratch` the GEMM's packing; `wide` (f16/bf16 only) one group's f32 result.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv<S: FloatStore>(
    c: &ConvShape,
    x: &[S],
    weights: &[S],
    bias: Option<&[S]>,
    out: &mut [S],
    col: &mut [S],
    scratch: &mut [S::Acc],
    mut wide: Option<&mut [S::Acc]>,
) where
    S::Acc: GemmAcc,
{
    let w = &c.window;
    let kernels = S::Acc::micro_kernels();
    let cg = w.channels / c.groups;
    let og = c.out_channels / c.groups;
    let (plane_in, plane_out) = (w.in_hw[0] * w.in_hw[1], w.out_hw[0] * w.out_hw[1]);
    let taps = cg * w.kernel[0] * w.kernel[1];
    for n in 0..w.batch {
        for g in 0..c.groups {
            let image = &x[(n * w.channels + g * cg) * plane_in..][..cg * plane_in];
            im2col(w, image, cg, col);
            let wg = &weights[g * og * taps..][..og * taps];
            let dst = &mut out[(n * c.out_channels + g * og) * plane_out..][..og * plane_out];
            in_accumulator(dst, wide.as_deref_mut(), |acc| {
                gemm(&c.gemm, kernels, wg, col, acc, scratch, None, None);
            });
            if let Some(bias) = bias {
                for (o, row) in dst.chunks_mut(plane_out).enumerate() {
                    let b = bias[g * og + o].load();
                    for v in row {
                        *v = S::store(v.load() + b);
                    }
                }
            }
        }
    }
}

/// The geometry of a transposed convolution, seen as the adjoint of the convolution whose
/// `window` maps the (larger) output to the input, and the GEMM of one image and group:
/// `wᵀ x = [O/g*KH*KW, C/g] x [C/g, H*W]`.
#[derive(Clone, Debug)]
pub(crate) struct ConvTransposeShape {
    pub window: Window,
    pub groups: usize,
    pub in_channels: usize,
    pub gemm: GemmPlan,
}

/// `out = conv_transpose(x, weights) + bias`, channels first, weights `[C, O/g, KH, KW]`.
/// `col` (accumulator type) holds one image-group's products before col2im; `wide`
/// (f16/bf16 only) one group's output while it accumulates.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv_transpose<S: FloatStore>(
    c: &ConvTransposeShape,
    x: &[S],
    weights: &[S],
    bias: Option<&[S]>,
    out: &mut [S],
    col: &mut [S::Acc],
    scratch: &mut [S::Acc],
    mut wide: Option<&mut [S::Acc]>,
) where
    S::Acc: GemmAcc,
{
    let w = &c.window;
    let kernels = S::Acc::micro_kernels();
    let cg = c.in_channels / c.groups;
    let og = w.channels / c.groups;
    let (plane_in, plane_out) = (w.out_hw[0] * w.out_hw[1], w.in_hw[0] * w.in_hw[1]);
    let taps = og * w.kernel[0] * w.kernel[1];
    for n in 0..w.batch {
        for g in 0..c.groups {
            let image = &x[(n * c.in_channels + g * cg) * plane_in..][..cg * plane_in];
            let wg = &weights[g * cg * taps..][..cg * taps];
            gemm(&c.gemm, kernels, wg, image, col, scratch, None, None);
            let dst = &mut out[(n * w.channels + g * og) * plane_out..][..og * plane_out];
            in_accumulator(dst, wide.as_deref_mut(), |acc| {
                for (o, plane) in acc.chunks_mut(plane_out).enumerate() {
                    let b = bias.map_or(<S::Acc as Real>::ZERO, |b| b[g * og + o].load());
                    plane.fill(b);
                }
                col2im(w, col, og, acc);
            });
        }
    }
}

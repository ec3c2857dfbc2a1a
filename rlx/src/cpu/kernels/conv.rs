//! Convolution as im2col + GEMM per image and channel group.

use super::gemm::{GemmAcc, GemmPlan, gemm};
use super::nn::{Window, im2col};
use super::numeric::FloatStore;

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
    let kernel = S::Acc::micro_kernel();
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
            match wide.as_deref_mut() {
                None => gemm(
                    &c.gemm,
                    kernel,
                    wg,
                    col,
                    bytemuck::cast_slice_mut(dst),
                    scratch,
                    None,
                ),
                Some(wd) => {
                    gemm(&c.gemm, kernel, wg, col, wd, scratch, None);
                    for (d, v) in dst.iter_mut().zip(wd.iter()) {
                        *d = S::store(*v);
                    }
                }
            }
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

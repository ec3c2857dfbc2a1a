//! The geometry lowering derives from concrete shapes: conv, pool and resize windows, GEMM dims
//! and batch offsets of matmuls, and the `[outer, len, inner]` view of an axis.

use super::spatial::ConvDirection;
use crate::cpu::kernels::conv::{ConvShape, ConvTransposeShape};
use crate::cpu::kernels::gemm::{GemmDims, GemmPlan, kernel_shape};
use crate::cpu::kernels::layout::contiguous_strides;
use crate::cpu::kernels::numeric::accumulator;
use crate::cpu::kernels::reduce::Axis3;
use crate::cpu::kernels::spatial::{Resize, Window};
use crate::ir::{Conv, ConvTranspose};
use crate::ir::{DType, Op, UpsampleMode};

/// The window geometry of a conv or pool over `[N, C, *spatial]` (1-D as height 1).
pub(super) fn window(
    x: &[usize],
    out: &[usize],
    kernel: &[usize],
    stride: &[usize],
    padding: &[(usize, usize)],
    dilation: &[usize],
) -> Window {
    let two = |v: &[usize], fill: usize| {
        if v.len() == 1 {
            [fill, v[0]]
        } else {
            [v[0], v[1]]
        }
    };
    let pads: Vec<usize> = padding.iter().map(|p| p.0).collect();
    Window {
        batch: x[0],
        channels: x[1],
        in_hw: two(&x[2..], 1),
        out_hw: two(&out[2..], 1),
        kernel: two(kernel, 1),
        stride: two(stride, 1),
        pad_before: two(&pads, 0),
        dilation: two(dilation, 1),
    }
}

/// The geometry of a conv node (`Op::Conv` or `Op::ConvTranspose`, else `None`) and the
/// scratch `(dtype, elements)` it needs: its patch or product buffer, the GEMM packing and,
/// for f16/bf16, one group's result in f32.
pub(super) fn conv_geometry(
    op: &Op,
    dtype: DType,
    x: &[usize],
    w: &[usize],
    out: &[usize],
    threads: usize,
) -> Option<(ConvDirection, Vec<(DType, usize)>)> {
    let acc = accumulator(dtype);
    let half = matches!(dtype, DType::F16 | DType::BF16);
    let (direction, col, wide) = match op {
        Op::Conv(Conv {
            stride,
            padding,
            dilation,
            groups,
        }) => {
            let win = window(x, out, &w[2..], stride, padding, dilation);
            let taps = w[1] * win.kernel[0] * win.kernel[1];
            let pixels = win.out_hw[0] * win.out_hw[1];
            let og = w[0] / groups;
            let dims = GemmDims {
                m: og,
                n: pixels,
                k: taps,
                a_rs: taps,
                a_cs: 1,
                b_rs: pixels,
                b_cs: 1,
            };
            let shape = ConvShape {
                window: win,
                groups: *groups,
                out_channels: w[0],
                gemm: GemmPlan::new(dims, threads, kernel_shape(accumulator(dtype))),
            };
            // Patches in the storage type; the GEMM result is one group's output.
            let col = (dtype, taps * pixels);
            (ConvDirection::Forward(shape), col, og * pixels)
        }
        Op::ConvTranspose(ConvTranspose {
            stride,
            padding,
            dilation,
            groups,
            ..
        }) => {
            // The window of the conv this is the adjoint of: from the output to `x`.
            let win = window(out, x, &w[2..], stride, padding, dilation);
            let cg = w[0] / groups;
            let taps = w[1] * win.kernel[0] * win.kernel[1];
            let pixels = win.out_hw[0] * win.out_hw[1];
            // A = wᵀ of the group's `[C/g, O/g*K]` weight rows; B = its `[C/g, H*W]` input.
            let dims = GemmDims {
                m: taps,
                n: pixels,
                k: cg,
                a_rs: 1,
                a_cs: taps,
                b_rs: pixels,
                b_cs: 1,
            };
            let wide = w[1] * win.in_hw[0] * win.in_hw[1];
            let shape = ConvTransposeShape {
                window: win,
                groups: *groups,
                in_channels: x[1],
                gemm: GemmPlan::new(dims, threads, kernel_shape(accumulator(dtype))),
            };
            // Products in the accumulator type, added into one group's output.
            (ConvDirection::Transpose(shape), (acc, taps * pixels), wide)
        }
        _ => return None,
    };
    let gemm = match &direction {
        ConvDirection::Forward(s) => s.gemm,
        ConvDirection::Transpose(s) => s.gemm,
    };
    let mut scratch = vec![col, (acc, gemm.scratch_len())];
    if half {
        scratch.push((acc, wide));
    }
    Some((direction, scratch))
}

/// Each output row's and column's taps of a 2-D upsampling of `x` to `out`.
pub(super) fn resize(mode: UpsampleMode, x: &[usize], out: &[usize]) -> Resize {
    let taps = |axis: usize| {
        (0..out[axis])
            .map(|at| mode.tap(at, x[axis], out[axis]))
            .collect()
    };
    Resize {
        in_hw: [x[2], x[3]],
        rows: taps(2),
        cols: taps(3),
    }
}

pub(super) fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `[outer, shape[axes], inner]` around the contiguous block of axes `first..=last`.
pub(super) fn axis3(shape: &[usize], first: usize, last: usize) -> Axis3 {
    Axis3 {
        outer: numel(&shape[..first]),
        len: numel(&shape[first..=last]),
        inner: numel(&shape[last + 1..]),
    }
}

/// The GEMM dims and batch offsets of a matmul.
pub(super) fn matmul_layout(
    transpose_a: bool,
    transpose_b: bool,
    a: &[usize],
    b: &[usize],
    out: &[usize],
) -> (GemmDims, Vec<(usize, usize)>) {
    let (ra, rb, ro) = (a.len(), b.len(), out.len());
    let (m, k) = if transpose_a {
        (a[ra - 1], a[ra - 2])
    } else {
        (a[ra - 2], a[ra - 1])
    };
    let n = if transpose_b { b[rb - 2] } else { b[rb - 1] };
    let dims = GemmDims {
        m,
        n,
        k,
        a_rs: if transpose_a { 1 } else { k },
        a_cs: if transpose_a { m } else { 1 },
        b_rs: if transpose_b { 1 } else { n },
        b_cs: if transpose_b { k } else { 1 },
    };
    let batch = &out[..ro - 2];
    let batch_strides = |dims: &[usize], matrix: usize| -> Vec<usize> {
        let own = &dims[..dims.len() - 2];
        let offset = batch.len() - own.len();
        let contiguous = contiguous_strides(own);
        (0..batch.len())
            .map(|i| {
                if i < offset || own[i - offset] == 1 {
                    0
                } else {
                    contiguous[i - offset] * matrix
                }
            })
            .collect()
    };
    let (sa, sb) = (batch_strides(a, m * k), batch_strides(b, k * n));
    let total = numel(batch);
    let mut offsets = Vec::with_capacity(total);
    for flat in 0..total {
        let (mut rest, mut oa, mut ob) = (flat, 0, 0);
        for axis in (0..batch.len()).rev() {
            let i = rest % batch[axis];
            rest /= batch[axis];
            oa += i * sa[axis];
            ob += i * sb[axis];
        }
        offsets.push((oa, ob));
    }
    // Entries that share one B and whose A rows follow each other are one product with
    // their rows stacked (`[batch, m, k] · W`): one B packing instead of one per entry,
    // and rows enough to split between workers.
    let stacked = !transpose_a
        && offsets.len() > 1
        && offsets
            .iter()
            .enumerate()
            .all(|(i, &(oa, ob))| ob == 0 && oa == i * m * k);
    if stacked {
        let dims = GemmDims {
            m: m * offsets.len(),
            ..dims
        };
        return (dims, vec![(0, 0)]);
    }
    (dims, offsets)
}

/// Workers for the batch entries of a matmul: several, each running whole products on one
/// thread, when there are enough products to share evenly (every worker then packs only its
/// own operands and none waits on another mid-product) and flops enough to be worth waking
/// them; 1 when each product is split between the threads instead.
pub(super) fn batch_workers(dims: GemmDims, batches: usize, threads: usize) -> usize {
    let flops = batches * dims.m * dims.n * dims.k;
    let threads = threads.max(1);
    let even = batches >= 2 * threads || (batches >= threads && batches.is_multiple_of(threads));
    if threads == 1 || !even || flops < 1 << 18 {
        1
    } else {
        threads
    }
}

//! Random convolutions, pooling and upsampling.

use crate::ir::{Dim, NodeId, Op, PoolKind, UpsampleMode};
use crate::ops::sample::{FLOATS, Sampled, Sampler, chance, pick, window_padding};
use crate::ops::{Conv, ConvTranspose, Pool, Upsample};

/// What [`conv_operands`] makes.
struct ConvOperands {
    operands: Vec<NodeId>,
    spatial: usize,
    groups: usize,
    kernel: Vec<usize>,
}

/// A new channels-first input of one or two spatial axes and a weight, with a bias half
/// the time: `[O, C/groups, *kernel]` for a convolution, `[C, O/groups, *kernel]` (inputs
/// from 1 long) for a transposed one.
fn conv_operands(s: &mut dyn Sampler, transposed: bool) -> Option<ConvOperands> {
    let dtype = pick(s, &FLOATS);
    let spatial = 1 + s.below(2);
    let groups = pick(s, &[1, 1, 2]);
    let channels = groups * (1 + s.below(2));
    let out_channels = groups * (1 + s.below(2));
    let kernel: Vec<usize> = (0..spatial).map(|_| 1 + s.below(3)).collect();
    let shortest = if transposed { 1 } else { 3 };
    let mut x_dims = vec![s.dim(), Dim::from(channels)];
    x_dims.extend((0..spatial).map(|_| Dim::from(shortest + s.below(4))));
    let x = s.input(dtype, x_dims)?;
    let mut w_dims = if transposed {
        vec![channels, out_channels / groups]
    } else {
        vec![out_channels, channels / groups]
    };
    w_dims.extend(&kernel);
    let w = s.param(dtype, &w_dims, None)?;
    let mut operands = vec![x, w];
    if chance(s, 0.5) {
        operands.push(s.param(dtype, &[out_channels], None)?);
    }
    Some(ConvOperands {
        operands,
        spatial,
        groups,
        kernel,
    })
}

pub(super) fn conv(s: &mut dyn Sampler) -> Sampled {
    let c = conv_operands(s, false)?;
    let op = Op::Conv(Conv {
        stride: (0..c.spatial).map(|_| 1 + s.below(2)).collect(),
        padding: window_padding(s, &c.kernel),
        dilation: (0..c.spatial).map(|_| 1 + s.below(2)).collect(),
        groups: c.groups,
    });
    Some((op, c.operands))
}

/// Output padding below the stride or the dilation, as the op requires.
pub(super) fn conv_transpose(s: &mut dyn Sampler) -> Sampled {
    let c = conv_operands(s, true)?;
    let stride: Vec<usize> = (0..c.spatial).map(|_| 1 + s.below(3)).collect();
    let dilation: Vec<usize> = (0..c.spatial).map(|_| 1 + s.below(2)).collect();
    let output_padding = stride
        .iter()
        .zip(&dilation)
        .map(|(st, d)| s.below(*st.max(d)))
        .collect();
    let op = Op::ConvTranspose(ConvTranspose {
        stride,
        padding: window_padding(s, &c.kernel),
        output_padding,
        dilation,
        groups: c.groups,
    });
    Some((op, c.operands))
}

pub(super) fn pool(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype.is_float() && (3..=4).contains(&t.rank()))?;
    let spatial = s.ty(x).rank() - 2;
    let kernel: Vec<usize> = (0..spatial).map(|_| 1 + s.below(3)).collect();
    let op = Op::Pool(Pool {
        kind: pick(s, &[PoolKind::Max, PoolKind::Avg]),
        stride: (0..spatial).map(|_| 1 + s.below(2)).collect(),
        padding: window_padding(s, &kernel),
        kernel,
    });
    Some((op, vec![x]))
}

/// Each mode, to sizes below, equal to and above the input's.
pub(super) fn upsample(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype.is_float() && t.rank() == 4)?;
    let mode = pick(s, &UpsampleMode::ALL);
    let size = [1 + s.below(6), 1 + s.below(6)];
    let op = Op::Upsample(Upsample {
        mode,
        size: size.into(),
    });
    Some((op, vec![x]))
}

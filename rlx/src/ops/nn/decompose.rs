//! Rope as other ops: its reference, and the meaning a backend's kernel must match.

use super::Rope;
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{BinaryOp, ConstantData, Cumsum, DType, NodeId, Op, Shape, Slice, UnaryOp};

/// Features `start..stop` (by `step`) of the last axis of `x`.
fn features(
    b: &mut GraphBuilder,
    x: NodeId,
    axis: usize,
    start: usize,
    stop: usize,
    step: usize,
) -> Result<NodeId, BuildError> {
    let slice = Slice {
        axis,
        start: start as i64,
        stop: Some(stop as i64),
        step,
    };
    b.op(Op::Slice(slice), &[x])
}

/// `x` of `[.., S, D]` with feature pairs `(p, q)` of its first `dims` turned by the angle
/// `θ = (offset + s)·scale·base^(−2i/dims)` of position `s` and pair `i`:
/// `(x_p cos θ − x_q sin θ, x_p sin θ + x_q cos θ)`, where the pairs are `(i, i + dims/2)`,
/// or `(2i, 2i + 1)` when `traditional`. Angles and products are computed in float32
/// (float64 for float64 `x`) and rounded to `x`'s dtype once.
pub(super) fn rope(op: &Rope, b: &mut GraphBuilder, x: &[NodeId]) -> Result<NodeId, BuildError> {
    let ty = b
        .ty(x[0])
        .cloned()
        .expect("operands are nodes of the builder");
    let compute = if ty.dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let r = ty.rank();
    let (rows, width) = (ty.shape[r - 2].clone(), ty.shape[r - 1].clone());
    let half = op.dims / 2;
    let xc = b.cast(x[0], compute)?;

    // Positions 0, 1, … down the rows: an exclusive running sum of ones, shifted by the
    // offset when there is one.
    let one = b.constant(ConstantData::scalar(1.0, compute));
    let one = b.reshape(one, [1, 1])?;
    let ones = b.op(
        Op::Broadcast(crate::ir::Broadcast {
            shape: Shape::from(vec![rows.clone(), 1.into()]),
        }),
        &[one],
    )?;
    let cumsum = Cumsum {
        axis: 0,
        exclusive: true,
        reverse: false,
    };
    let mut position = b.op(Op::Cumsum(cumsum), &[ones])?;
    if let Some(&offset) = x.get(1) {
        let offset = b.cast(offset, compute)?;
        position = b.add(position, offset)?;
    }
    let scale = b.scalar(op.scale, compute);
    let position = b.mul(position, scale)?;

    // One frequency per pair, computed here in float64.
    let frequencies: Vec<f64> = (0..half)
        .map(|i| op.base.powf(-2.0 * i as f64 / op.dims as f64))
        .collect();
    let frequencies = match compute {
        DType::F64 => ConstantData::from_slice(&frequencies, [1, half]),
        _ => {
            let narrow: Vec<f32> = frequencies.iter().map(|f| *f as f32).collect();
            ConstantData::from_slice(&narrow, [1, half])
        }
    }
    .expect("the frequencies fill their shape");
    let frequencies = b.constant(frequencies);
    let angle = b.mul(position, frequencies)?;
    let (cos, sin) = (b.unary(UnaryOp::Cos, angle)?, b.unary(UnaryOp::Sin, angle)?);

    let last = r - 1;
    let (x1, x2) = if op.traditional {
        (
            features(b, xc, last, 0, op.dims, 2)?,
            features(b, xc, last, 1, op.dims, 2)?,
        )
    } else {
        (
            features(b, xc, last, 0, half, 1)?,
            features(b, xc, last, half, op.dims, 1)?,
        )
    };
    let (pc, qs) = (b.mul(x1, cos)?, b.mul(x2, sin)?);
    let first = b.binary(BinaryOp::Sub, pc, qs)?;
    let (ps, qc) = (b.mul(x1, sin)?, b.mul(x2, cos)?);
    let second = b.add(ps, qc)?;
    let rotated = if op.traditional {
        // Interleave back: pairs side by side on a new last axis, then flattened.
        let mut paired = ty.shape.dims()[..last].to_vec();
        paired.extend([half.into(), 1.into()]);
        let first = b.reshape(first, paired.clone())?;
        let second = b.reshape(second, paired)?;
        let both = b.concat(&[first, second], r)?;
        let mut flat = ty.shape.dims()[..last].to_vec();
        flat.push(op.dims.into());
        b.reshape(both, flat)?
    } else {
        b.concat(&[first, second], last)?
    };
    let whole = if width.as_static() == Some(op.dims) {
        rotated
    } else {
        let rest = b.op(
            Op::Slice(Slice {
                axis: last,
                start: op.dims as i64,
                stop: None,
                step: 1,
            }),
            &[xc],
        )?;
        b.concat(&[rotated, rest], last)?
    };
    b.cast(whole, ty.dtype)
}

//! The gradient of sort and top-k values: through a one-hot of the op's own indices.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::ir::{Cast, CompareOp, Dim, NodeId, Op, Permute, ReduceOp, Shape};

/// Sorted or top-k values came from the positions the same op's indices name: each value's
/// gradient goes back there, through a one-hot of those indices along the axis (`k × n`
/// per row: fine for the sizes sorting is used at; a take-along-axis op would make it
/// linear).
pub(crate) fn select_back(
    e: &mut Emitter<'_>,
    x: NodeId,
    indices_op: Op,
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let shape = e.shape(x);
    let rank = shape.rank();
    let last = rank - 1;
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(axis, last);
    let to_last = |e: &mut Emitter<'_>, t: NodeId| {
        if axis == last {
            Ok(t)
        } else {
            e.op(Op::Permute(Permute { perm: perm.clone() }), &[t])
        }
    };
    let indices = e.op(indices_op, &[x])?;
    let indices = to_last(e, indices)?;
    let g_last = to_last(e, g)?;
    let iota = e.iota(shape[axis].clone())?;
    let is = e.shape(indices);
    let mut column = is.dims().to_vec();
    column.push(Dim::Static(1));
    let indices = e.reshape(indices, Shape::new(column.clone()))?;
    let hit = e.op(Op::Compare(CompareOp::Eq), &[indices, iota])?;
    let dtype = e.dtype(g);
    let one_hot = e.op(Op::Cast(Cast { to: dtype }), &[hit])?;
    let g_col = e.reshape(g_last, Shape::new(column))?;
    let spread = e.mul(one_hot, g_col)?;
    let back = e.reduce(ReduceOp::Sum, spread, vec![rank - 1], false)?;
    let back = to_last(e, back)?;
    Ok(vec![Grad::Some(back)])
}

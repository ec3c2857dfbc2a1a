//! The gradient of sort and top-k values: scattered back to the positions the op's own
//! indices name.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::ir::{DType, Dim, NodeId, Op, Permute, ReduceOp, ScatterAdd, Shape};

/// Sorted or top-k values came from the positions the same op's indices name: each value's
/// gradient is added back there. Rows are flattened into one axis (row `r`'s position `i`
/// is `r·n + i`), so one scatter-add does every row, in time and memory linear in the
/// values.
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
    // A swap of two axes is its own inverse.
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
    let picked = e.shape(indices);
    let lead = &picked.dims()[..last];
    let rows = lead.iter().fold(Dim::Static(1), |r, d| r.mul(d));
    let (n, k) = (shape[axis].clone(), picked[last].clone());

    // Row offsets r·n, with n counted as a value (it may be a runtime dim).
    let one = e.int(1);
    let ones = e.broadcast(one, Shape::new([n.clone()]))?;
    let n_value = e.reduce(ReduceOp::Sum, ones, vec![0], false)?;
    let row = e.iota(rows.clone())?;
    let offsets = e.mul(row, n_value)?;
    let mut column = lead.to_vec();
    column.push(Dim::Static(1));
    let offsets = e.reshape(offsets, Shape::new(column))?;
    let indices = if e.dtype(indices) == DType::I64 {
        indices
    } else {
        e.op(Op::Cast(crate::ir::Cast { to: DType::I64 }), &[indices])?
    };
    let flat = e.add(indices, offsets)?;
    let flat = e.reshape(flat, Shape::new([rows.mul(&k)]))?;
    let updates = e.reshape(g_last, Shape::new([rows.mul(&k)]))?;
    let zeros = e.zeros(e.dtype(g), Shape::new([rows.mul(&n)]))?;
    let back = e.op(
        Op::ScatterAdd(ScatterAdd { axis: 0 }),
        &[zeros, flat, updates],
    )?;
    let mut whole = lead.to_vec();
    whole.push(n);
    let back = e.reshape(back, Shape::new(whole))?;
    let back = to_last(e, back)?;
    Ok(vec![Grad::Some(back)])
}

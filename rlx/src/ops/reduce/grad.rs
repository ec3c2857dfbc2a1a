//! Gradient rules of reductions and running sums.

use crate::autodiff::Emitter;
use crate::autodiff::Grad;
use crate::autodiff::GradError;
use crate::ir::{Cast, Cumsum};
use crate::ir::{CompareOp, Dim, NodeId, Op, ReduceOp, Shape};

/// `shape` with `axes` kept as size 1.
fn kept(shape: &Shape, axes: &[usize]) -> Shape {
    Shape::new(shape.dims().iter().enumerate().map(|(i, d)| {
        if axes.contains(&i) {
            Dim::Static(1)
        } else {
            d.clone()
        }
    }))
}

pub(crate) fn reduce(
    e: &mut Emitter<'_>,
    op: ReduceOp,
    x: NodeId,
    axes: &[usize],
    y: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let shape = e.shape(x);
    let keep = kept(&shape, axes);
    let g_keep = e.reshape(g, keep.clone())?;
    let spread = e.broadcast(g_keep, shape.clone())?;
    let dtype = e.dtype(x);
    let grad = match op {
        ReduceOp::Sum => spread,
        ReduceOp::Mean => {
            let n = e.count(&shape, axes, dtype)?;
            e.div(spread, n)?
        }
        ReduceOp::Max | ReduceOp::Min => {
            // Split evenly between the elements equal to the extreme.
            let y_keep = e.reshape(y, keep)?;
            let hit = e.op(Op::Compare(CompareOp::Eq), &[x, y_keep])?;
            let hit = e.op(Op::Cast(Cast { to: dtype }), &[hit])?;
            let ties = e.reduce(ReduceOp::Sum, hit, axes.to_vec(), true)?;
            let share = e.div(hit, ties)?;
            e.mul(spread, share)?
        }
        ReduceOp::Prod => {
            // ∂/∂xᵢ = Π_{j≠i} xⱼ: y/xᵢ where xᵢ ≠ 0; at a zero, the product of the others
            // when it is the only zero, else 0.
            let zero = e.scalar(0.0, dtype);
            let one = e.scalar(1.0, dtype);
            let is_zero = e.op(Op::Compare(CompareOp::Eq), &[x, zero])?;
            let y_keep = e.reshape(y, keep)?;
            let others = e.div(y_keep, x)?;
            let nonzero = e.op(Op::Where, &[is_zero, one, x])?;
            let nonzero_prod = e.reduce(ReduceOp::Prod, nonzero, axes.to_vec(), true)?;
            let zeros = e.op(Op::Cast(Cast { to: dtype }), &[is_zero])?;
            let zeros = e.reduce(ReduceOp::Sum, zeros, axes.to_vec(), true)?;
            let single = e.op(Op::Compare(CompareOp::Eq), &[zeros, one])?;
            let at_zero = e.keep_where(single, nonzero_prod)?;
            let d = e.op(Op::Where, &[is_zero, at_zero, others])?;
            e.mul(spread, d)?
        }
    };
    Ok(vec![Grad::Some(grad)])
}

/// A cumulative sum's adjoint is the cumulative sum the other way.
pub(crate) fn cumsum(
    e: &mut Emitter<'_>,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let op = Op::Cumsum(Cumsum {
        axis,
        exclusive,
        reverse: !reverse,
    });
    Ok(vec![Grad::Some(e.op(op, &[g])?)])
}

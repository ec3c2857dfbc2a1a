//! Reductions, cumulative sums, softmax and the normalizations.

use crate::autodiff::Emitter;
use crate::autodiff::Grad;
use crate::autodiff::GradError;
use crate::ir::{Cast, Cumsum, Permute};
use crate::ir::{CompareOp, Dim, NodeId, Op, ReduceOp, Shape, UnaryOp};

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

/// softmax: `y·(g − Σ g·y)`; log-softmax: `g − exp(y)·Σ g`.
pub(crate) fn softmax(
    e: &mut Emitter<'_>,
    axis: usize,
    log: bool,
    y: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let grad = if log {
        let total = e.reduce(ReduceOp::Sum, g, vec![axis], true)?;
        let p = e.unary(UnaryOp::Exp, y)?;
        let spread = e.mul(p, total)?;
        e.sub(g, spread)?
    } else {
        let gy = e.mul(g, y)?;
        let dot = e.reduce(ReduceOp::Sum, gy, vec![axis], true)?;
        let centered = e.sub(g, dot)?;
        e.mul(y, centered)?
    };
    Ok(vec![Grad::Some(grad)])
}

/// The axes before the last: what a per-feature weight's gradient sums over.
fn leading(e: &Emitter<'_>, x: NodeId) -> Vec<usize> {
    (0..e.shape(x).rank() - 1).collect()
}

/// `y = x̂·w + b` with `x̂ = (x − μ)·r`, `r = 1/sqrt(var + eps)` over the last axis:
/// `gx = r·(gx̂ − mean(gx̂) − x̂·mean(gx̂·x̂))` with `gx̂ = g·w`.
pub(crate) fn layer_norm(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    eps: f64,
    has_weight: bool,
    has_bias: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let input = x[0];
    let last = e.shape(input).rank() - 1;
    let mean = e.reduce(ReduceOp::Mean, input, vec![last], true)?;
    let centered = e.sub(input, mean)?;
    let square = e.mul(centered, centered)?;
    let var = e.reduce(ReduceOp::Mean, square, vec![last], true)?;
    let var = e.shift(var, eps)?;
    let r = e.unary(UnaryOp::Rsqrt, var)?;
    let normed = e.mul(centered, r)?;
    let mut grads = Vec::with_capacity(x.len());
    let g_normed = if has_weight { e.mul(g, x[1])? } else { g };
    let mean_g = e.reduce(ReduceOp::Mean, g_normed, vec![last], true)?;
    let gn = e.mul(g_normed, normed)?;
    let mean_gn = e.reduce(ReduceOp::Mean, gn, vec![last], true)?;
    let along = e.mul(normed, mean_gn)?;
    let inner = e.sub(g_normed, mean_g)?;
    let inner = e.sub(inner, along)?;
    grads.push(Grad::Some(e.mul(r, inner)?));
    if has_weight {
        let gw = e.mul(g, normed)?;
        let gw = e.reduce(ReduceOp::Sum, gw, leading(e, input), false)?;
        grads.push(Grad::Some(gw));
    }
    if has_bias {
        let gb = e.reduce(ReduceOp::Sum, g, leading(e, input), false)?;
        grads.push(Grad::Some(gb));
    }
    Ok(grads)
}

/// `y = x·r·w` with `r = 1/sqrt(mean(x²) + eps)`: `gx = r·(gx̂ − x·r²·mean(gx̂·x))` with
/// `gx̂ = g·w`.
pub(crate) fn rms_norm(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    eps: f64,
    has_weight: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let input = x[0];
    let last = e.shape(input).rank() - 1;
    let square = e.mul(input, input)?;
    let ms = e.reduce(ReduceOp::Mean, square, vec![last], true)?;
    let ms = e.shift(ms, eps)?;
    let r = e.unary(UnaryOp::Rsqrt, ms)?;
    let g_normed = if has_weight { e.mul(g, x[1])? } else { g };
    let gx = e.mul(g_normed, input)?;
    let mean_gx = e.reduce(ReduceOp::Mean, gx, vec![last], true)?;
    let r2 = e.mul(r, r)?;
    let along = e.mul(input, r2)?;
    let along = e.mul(along, mean_gx)?;
    let inner = e.sub(g_normed, along)?;
    let mut grads = vec![Grad::Some(e.mul(r, inner)?)];
    if has_weight {
        let normed = e.mul(input, r)?;
        let gw = e.mul(g, normed)?;
        let gw = e.reduce(ReduceOp::Sum, gw, leading(e, input), false)?;
        grads.push(Grad::Some(gw));
    }
    Ok(grads)
}

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

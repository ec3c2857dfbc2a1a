//! Reshapes, permutations, slices, concatenation, padding, gather and scatter-add.

use crate::autodiff::Emitter;
use crate::autodiff::Grad;
use crate::autodiff::GradError;
use crate::ir::{Concat, Gather, Pad, Permute, ScatterAdd, Slice};
use crate::ir::{DType, Dim, NodeId, Op, Scalar, Shape};

pub(crate) fn reshape(e: &mut Emitter<'_>, x: NodeId, g: NodeId) -> Result<Vec<Grad>, GradError> {
    Ok(vec![Grad::Some(e.reshape(g, e.shape(x))?)])
}

pub(crate) fn permute(
    e: &mut Emitter<'_>,
    perm: &[usize],
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let mut inverse = vec![0; perm.len()];
    for (to, &from) in perm.iter().enumerate() {
        inverse[from] = to;
    }
    Ok(vec![Grad::Some(
        e.op(Op::Permute(Permute { perm: inverse }), &[g])?,
    )])
}

/// `shape` with axis `axis` set to `dim`.
fn with_axis(shape: &Shape, axis: usize, dim: Dim) -> Shape {
    let mut dims = shape.dims().to_vec();
    dims[axis] = dim;
    Shape::new(dims)
}

/// The slice's gradient is `g` put back in place: spread out by the step (zeros between),
/// with zeros before and after, so symbolic axis lengths work.
pub(crate) fn slice(
    e: &mut Emitter<'_>,
    x: NodeId,
    axis: usize,
    start: i64,
    _stop: Option<i64>,
    step: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let shape = e.shape(x);
    let size = shape[axis].clone();
    let count = e.shape(g)[axis].clone();
    if count.as_static() == Some(0) {
        return Ok(vec![Grad::Some(e.zeros_like(x)?)]);
    }
    let fail = |e: &Emitter<'_>| GradError::Rule {
        at: e.site(),
        message: "the slice's position could not be expressed in its axis".into(),
    };
    let begin = if start >= 0 {
        Dim::Static(start.unsigned_abs() as usize)
    } else {
        size.checked_sub(&Dim::Static(start.unsigned_abs() as usize))
            .ok_or_else(|| fail(e))?
    };
    let mut part = g;
    if step > 1 {
        // [.., count, ..] -> [.., count, step, ..] with zeros after each element, flattened,
        // then the trailing step − 1 zeros dropped.
        let gs = e.shape(g);
        let mut spread = gs.dims().to_vec();
        spread.insert(axis + 1, Dim::Static(1));
        let spread = e.reshape(g, Shape::new(spread))?;
        let mut pads = vec![(0, 0); gs.rank() + 1];
        pads[axis + 1] = (0, step - 1);
        let padded = e.op(
            Op::Pad(Pad {
                pads,
                value: Scalar::Float(0.0),
            }),
            &[spread],
        )?;
        let flat = with_axis(&gs, axis, count.mul(&Dim::Static(step)));
        let flat = e.reshape(padded, flat)?;
        let trim = Op::Slice(Slice {
            axis,
            start: 0,
            stop: Some(-((step - 1) as i64)),
            step: 1,
        });
        part = e.op(trim, &[flat])?;
    }
    let span = e.shape(part)[axis].clone();
    let after = size
        .checked_sub(&begin)
        .and_then(|rest| rest.checked_sub(&span))
        .ok_or_else(|| fail(e))?;
    let dtype = e.dtype(g);
    let mut pieces = Vec::with_capacity(3);
    if begin.as_static() != Some(0) {
        pieces.push(e.zeros(dtype, with_axis(&shape, axis, begin))?);
    }
    pieces.push(part);
    if after.as_static() != Some(0) {
        pieces.push(e.zeros(dtype, with_axis(&shape, axis, after))?);
    }
    let grad = if pieces.len() == 1 {
        part
    } else {
        e.op(Op::Concat(Concat { axis }), &pieces)?
    };
    Ok(vec![Grad::Some(grad)])
}

/// Each operand gets its slice of `g`, addressed from the front or, when the sizes before
/// it are symbolic, from the back.
pub(crate) fn concat(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let sizes: Vec<Dim> = x.iter().map(|i| e.shape(*i)[axis].clone()).collect();
    let mut grads = Vec::with_capacity(x.len());
    for i in 0..x.len() {
        let before = total(&sizes[..i]);
        let after = total(&sizes[i + 1..]);
        let size = sizes[i].as_static();
        let bounds = match (before.as_static(), size, after.as_static()) {
            (Some(b), Some(s), _) => Some((b as i64, Some((b + s) as i64))),
            (_, Some(s), Some(a)) => Some((-((a + s) as i64), (a > 0).then(|| -(a as i64)))),
            (Some(b), _, Some(a)) => Some((b as i64, (a > 0).then(|| -(a as i64)))),
            _ => None,
        };
        let part = match bounds {
            Some((start, stop)) => {
                let op = Op::Slice(Slice {
                    axis,
                    start,
                    stop,
                    step: 1,
                });
                e.op(op, &[g])?
            }
            // Symbolic sizes on both sides: gather positions `before + 0..size`, counted
            // at run time.
            None => {
                let positions = offset_iota(e, &sizes[..i], sizes[i].clone())?;
                e.op(Op::Gather(Gather { axis }), &[g, positions])?
            }
        };
        grads.push(Grad::Some(part));
    }
    Ok(grads)
}

/// `before + [0, 1, …, len)` as `i64`, where `before` is the total of `sizes` (symbolic
/// allowed), counted at run time.
fn offset_iota(e: &mut Emitter<'_>, sizes: &[Dim], len: Dim) -> Result<NodeId, GradError> {
    let iota = e.iota(len)?;
    let before = total(sizes);
    if before.as_static() == Some(0) {
        return Ok(iota);
    }
    let offset = e.count(&Shape::new([before]), &[0], DType::I64)?;
    e.add(iota, offset)
}

/// The sum of `dims` (`None` cannot occur for sizes, which are never negative).
fn total(dims: &[Dim]) -> Dim {
    dims.iter()
        .try_fold(Dim::Static(0), |acc, d| acc.checked_add(d))
        .unwrap_or(Dim::Static(0))
}

/// Padding's gradient is the interior of `g`.
pub(crate) fn pad(
    e: &mut Emitter<'_>,
    pads: &[(usize, usize)],
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let mut grad = g;
    for (axis, &(before, after)) in pads.iter().enumerate() {
        if before == 0 && after == 0 {
            continue;
        }
        let op = Op::Slice(Slice {
            axis,
            start: before as i64,
            stop: (after > 0).then(|| -(after as i64)),
            step: 1,
        });
        grad = e.op(op, &[grad])?;
    }
    Ok(vec![Grad::Some(grad)])
}

/// Gathered rows send their gradient back to where they came from (summed over repeats).
pub(crate) fn gather(
    e: &mut Emitter<'_>,
    data: NodeId,
    indices: NodeId,
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let zeros = e.zeros_like(data)?;
    let grad = e.op(Op::ScatterAdd(ScatterAdd { axis }), &[zeros, indices, g])?;
    Ok(vec![Grad::Some(grad), Grad::Discrete])
}

/// `data` passes `g` through; each update receives `g` at the position it was added to.
pub(crate) fn scatter_add(
    e: &mut Emitter<'_>,
    indices: NodeId,
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let updates = e.op(Op::Gather(Gather { axis }), &[g, indices])?;
    Ok(vec![Grad::Some(g), Grad::Discrete, Grad::Some(updates)])
}

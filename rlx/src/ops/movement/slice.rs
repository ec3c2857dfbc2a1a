//! Slice: a strided range of one axis.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{Concat, Dim, InferError, NodeId, Op, Pad, Scalar, Shape, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, check_axis};
use crate::ops::sample::{Sampled, Sampler, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// `x[start:stop:step]` along one axis. Negative `start`/`stop` count from the end;
/// bounds are never clamped: out-of-range slices are errors. Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    /// Axis sliced.
    pub axis: usize,
    /// First index (negative: from the end).
    pub start: i64,
    /// One past the last index (negative: from the end); `None` is the end.
    pub stop: Option<i64>,
    /// Stride, at least 1.
    pub step: usize,
}

impl Primitive for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        let stop = self.stop.map(|s| s.to_string()).unwrap_or_default();
        let step = if self.step == 1 {
            String::new()
        } else {
            format!(":{}", self.step)
        };
        out.push(format!("axis={}, {}:{stop}{step}", self.axis, self.start));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Slice(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        slice_type(self.axis, self.start, self.stop, self.step, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        slice_vjp(e, x[0], self.axis, self.start, self.stop, self.step, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(slice_value(self.axis, self.start, self.step, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_slice(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn slice_type(
    axis: usize,
    start: i64,
    stop: Option<i64>,
    step: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let shape = &inputs[0].shape;
    check_axis(axis, shape.rank())?;
    if step == 0 {
        return Err(attr_err!("slice step must be at least 1"));
    }
    let size = &shape[axis];
    let begin = slice_index(start, size, "start")?;
    let end = match stop {
        Some(stop) => slice_index(stop, size, "stop")?,
        None => size.clone(),
    };
    let stop_text = stop.map(|s| s.to_string()).unwrap_or_default();
    let len = end.checked_sub(&begin).ok_or_else(|| {
        attr_err!("slice {start}:{stop_text} ends before it starts on an axis of size {size}")
    })?;
    let len = match len.as_static() {
        Some(n) => Dim::Static(n.div_ceil(step)),
        None if step == 1 => len,
        None => len.div_exact(&Dim::Static(step)).ok_or_else(|| {
            attr_err!("a step of {step} over the symbolic length {len} has no exact size")
        })?,
    };
    let mut dims = shape.dims().to_vec();
    dims[axis] = len;
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// The slice's gradient is `g` put back in place: spread out by the step (zeros between),
/// with zeros before and after, so symbolic axis lengths work.
fn slice_vjp(
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

fn slice_value(axis: usize, start: i64, step: usize, x: &Array, out: &Out) -> Array {
    let begin = first(start, x.shape[axis]);
    let mut at = Vec::new();
    out.fill(|o| {
        at.clear();
        at.extend_from_slice(o);
        at[axis] = begin + o[axis] * step;
        x.at(&at)
    })
}

/// In-range bounds for the case's sizes, a negative start now and then, stride 1 or 2.
fn random_slice(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.rank() > 0)?;
    let axis = s.below(s.ty(x).rank());
    let size = s.sizes(x)[axis] as i64;
    let start = s.below(size as usize + 1) as i64;
    let stop = if chance(s, 0.5) {
        None
    } else {
        Some(start + s.below((size - start) as usize + 1) as i64)
    };
    let start = if chance(s, 0.3) && size > 0 {
        start - size
    } else {
        start
    };
    let step = 1 + s.below(2);
    let op = Op::Slice(Slice {
        axis,
        start,
        stop,
        step,
    });
    Some((op, vec![x]))
}

/// An index of a slice as a dim: negative indices count back from `size`.
fn slice_index(index: i64, size: &Dim, what: &str) -> Result<Dim, InferError> {
    let resolved = if index >= 0 {
        Some(Dim::Static(index.unsigned_abs() as usize))
    } else {
        size.checked_sub(&Dim::Static(index.unsigned_abs() as usize))
    };
    match (resolved, size.as_static()) {
        (Some(d), Some(n)) if d.as_static().is_some_and(|v| v <= n) => Ok(d),
        (Some(d), None) => Ok(d),
        _ => Err(attr_err!(
            "slice {what} {index} is out of range for an axis of size {size}"
        )),
    }
}

/// `shape` with axis `axis` set to `dim`.
fn with_axis(shape: &Shape, axis: usize, dim: Dim) -> Shape {
    let mut dims = shape.dims().to_vec();
    dims[axis] = dim;
    Shape::new(dims)
}

/// Where a slice's first element sits: a negative `start` counts from the end.
fn first(start: i64, len: usize) -> usize {
    if start < 0 {
        (len as i64 + start) as usize
    } else {
        start as usize
    }
}

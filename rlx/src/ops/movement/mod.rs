//! Ops that move values: reshape, permute, slice, concat, broadcast, pad, gather,
//! scatter-add, and the gradient cut `stop_gradient`.

mod grad;
mod infer;
mod reference;
mod sample;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, Op, Scalar, Shape, TensorType};

/// Same data, new dims; element counts must be provably equal. Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reshape {
    /// Target shape.
    pub shape: Shape,
}

/// Axis permutation: output axis `i` is input axis `perm[i]`. Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Permute {
    /// A permutation of `0..rank`.
    pub perm: Vec<usize>,
}

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

/// Concatenation along an axis. Operands: one or more tensors of one dtype and rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Concat {
    /// Axis joined.
    pub axis: usize,
}

/// Numpy broadcast to `shape` (size-1 or missing leading dims stretch). Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Broadcast {
    /// Target shape.
    pub shape: Shape,
}

/// Constant padding. Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Pad {
    /// `(before, after)` per axis.
    pub pads: Vec<(usize, usize)>,
    /// Fill value, converted to the dtype of `x`.
    pub value: Scalar,
}

/// Take along `axis` (`numpy.take`, embedding lookup): output dims are
/// `data[..axis] ++ indices ++ data[axis+1..]`. Operands: `data`, `indices` (`i32`/`i64`).
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    /// Axis indexed.
    pub axis: usize,
}

/// The adjoint of [`Op::Gather`]: adds `updates` into a copy of `data` at `indices` along
/// `axis`; repeated indices accumulate. Operands: `data`, `indices`, `updates` (shaped
/// like the gather output).
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterAdd {
    /// Axis indexed.
    pub axis: usize,
}

/// `x` unchanged, with no gradient through it ([`Op::StopGradient`]).
pub(crate) struct StopGradient;

/// The `Primitive` methods of an op whose only attribute is an axis.
macro_rules! axis_attrs {
    () => {
        fn attrs(&self, out: &mut Vec<String>) {
            out.push(format!("axis={}", self.axis));
        }
    };
}

impl Primitive for StopGradient {
    fn name(&self) -> &'static str {
        "stop_gradient"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::StopGradient
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::identity(inputs)
    }

    /// Cut on purpose: the operand takes nothing, and that is no error.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::Discrete])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(out.holding(x[0].data.clone()))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let x = s.operand(&|_| true)?;
        Some((Op::StopGradient, vec![x]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("shape={}", self.shape));
    }

    fn bind_dims(&self, out: &[usize]) -> Op {
        Op::Reshape(Reshape {
            shape: Shape::from(out),
        })
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::reshape(&self.shape, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::reshape(e, x[0], g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(out.holding(x[0].data.clone()))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::reshape(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Permute {
    fn name(&self) -> &'static str {
        "permute"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("perm={:?}", self.perm));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Permute(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::permute(&self.perm, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::permute(e, &self.perm, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::permute(&self.perm, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::permute(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
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
        infer::slice(self.axis, self.start, self.stop, self.step, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::slice(e, x[0], self.axis, self.start, self.stop, self.step, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::slice(
            self.axis, self.start, self.step, &x[0], out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::slice(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Concat {
    fn name(&self) -> &'static str {
        "concat"
    }

    axis_attrs!();

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Concat(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::concat(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::concat(e, x, self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::concat(self.axis, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::concat(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("shape={}", self.shape));
    }

    fn bind_dims(&self, out: &[usize]) -> Op {
        Op::Broadcast(Broadcast {
            shape: Shape::from(out),
        })
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::broadcast(&self.shape, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let shape = e.shape(x[0]);
        Ok(vec![Grad::Some(e.unbroadcast(g, &shape)?)])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::broadcast(&x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::broadcast(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Pad {
    fn name(&self) -> &'static str {
        "pad"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        let pads: Vec<String> = self.pads.iter().map(|(a, b)| format!("{a}:{b}")).collect();
        out.push(format!("pads=[{}]", pads.join(",")));
        out.push(format!("value={}", self.value));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Pad(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::pad(&self.pads, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::pad(e, &self.pads, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::pad(&self.pads, self.value, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::pad(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    axis_attrs!();

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Gather(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::gather(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::gather(e, x[0], x[1], self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        reference::gather(self.axis, x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::gather(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for ScatterAdd {
    fn name(&self) -> &'static str {
        "scatter_add"
    }

    axis_attrs!();

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ScatterAdd(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::scatter_add(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::scatter_add(e, x[1], self.axis, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // A sum of each position's updates.
        let n = x.dims(2).iter().product::<usize>().max(1) as f64;
        Bound::Within {
            rel: 2.0 * x.u,
            abs: 2.0 * x.u * n * x.scale + x.tiny,
            growth: n * x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        reference::scatter_add(self.axis, x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::scatter_add(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

//! Reductions, arg-reductions and running sums along axes.

mod grad;
mod infer;
mod reference;
mod sample;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError, flag};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{ArgReduceOp, InferError, NodeId, Op, ReduceOp, TensorType};

/// Reduction over `axes` (sorted, unique, at least one). Operands: `x`. NaN propagates
/// through max and min. Over an empty axis, sum is 0, prod 1, and for floats mean is NaN and
/// max and min are −∞ and +∞.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// Function.
    pub op: ReduceOp,
    /// Axes reduced.
    pub axes: Vec<usize>,
    /// Keep reduced axes as size 1.
    pub keep_dims: bool,
}

/// Argmax/argmin along one axis, as `i64`; the first of equal best values wins. Operands:
/// `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct ArgReduce {
    /// Function.
    pub op: ArgReduceOp,
    /// Axis reduced.
    pub axis: usize,
    /// Keep the axis as size 1.
    pub keep_dims: bool,
}

/// Running sum along an axis. Operands: `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct Cumsum {
    /// Axis summed along.
    pub axis: usize,
    /// Exclude the current element (the first output is 0).
    pub exclusive: bool,
    /// Sum from the end of the axis.
    pub reverse: bool,
}

impl Primitive for Reduce {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axes={:?}", self.axes));
        flag(out, self.keep_dims, "keep_dims");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Reduce(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::reduce(self.op, &self.axes, self.keep_dims, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::reduce(e, self.op, x[0], &self.axes, y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let dims = x.dims(0);
        let n = self
            .axes
            .iter()
            .map(|&a| dims.get(a).copied().unwrap_or(1))
            .product::<usize>()
            .max(1) as f64;
        let (u, scale) = (x.u, x.scale);
        match self.op {
            ReduceOp::Max | ReduceOp::Min => Bound::Exact,
            ReduceOp::Sum => x.sum(n),
            ReduceOp::Mean => Bound::Within {
                rel: 2.0 * u,
                abs: 2.0 * u * n * scale + x.tiny,
                growth: n * scale,
            },
            ReduceOp::Prod => Bound::Within {
                rel: 4.0 * u * n,
                abs: x.tiny,
                growth: scale.powf(n),
            },
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::reduce(
            self.op,
            &self.axes,
            self.keep_dims,
            &x[0],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::reduce(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for ArgReduce {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.keep_dims, "keep_dims");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ArgReduce(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::arg_reduce(self.axis, self.keep_dims, inputs)
    }

    /// Its result is `i64`: the driver gives its operand nothing before asking.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::None; x.len()])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::arg_reduce(
            self.op,
            self.axis,
            self.keep_dims,
            &x[0],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::arg_reduce(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Cumsum {
    fn name(&self) -> &'static str {
        "cumsum"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.exclusive, "exclusive");
        flag(out, self.reverse, "reverse");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Cumsum(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::cumsum(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::cumsum(e, self.axis, self.exclusive, self.reverse, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        x.sum(x.axis_len(self.axis))
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::cumsum(
            self.axis,
            self.exclusive,
            self.reverse,
            &x[0],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::cumsum(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

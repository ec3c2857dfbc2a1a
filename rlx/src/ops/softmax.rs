//! Softmax and log-softmax along an axis, a composite.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{BinaryOp, DType, InferError, NodeId, Op, ReduceOp, TensorType, UnaryOp};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, check_axis, require_float};
use crate::ops::sample::{Sampled, Sampler, axis_of, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, composite};

/// Softmax (or log-softmax) along an axis. Operands: `x` (float).
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    /// Axis normalized.
    pub axis: usize,
    /// Produce log-softmax.
    pub log: bool,
}

impl Primitive for Softmax {
    fn name(&self) -> &'static str {
        if self.log { "log_softmax" } else { "softmax" }
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Softmax(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        softmax_type(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        softmax_vjp(e, self.axis, self.log, y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let n = x.axis_len(self.axis);
        Bound::Within {
            rel: 4.0 * x.u,
            abs: 64.0 * x.u * n * (1.0 + x.scale) + x.tiny,
            growth: x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        composite::reference(&Op::Softmax(self.clone()), x, out)
    }

    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        Some(softmax_decomposition(self, b, x[0]))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (x, axis) = axis_of(s, DType::is_float)?;
        let log = chance(s, 0.4);
        Some((Op::Softmax(Softmax { axis, log }), vec![x]))
    }
}

fn softmax_type(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_float(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(inputs[0].clone())
}

/// softmax: `y·(g − Σ g·y)`; log-softmax: `g − exp(y)·Σ g`.
fn softmax_vjp(
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

/// `e^(x − max) / Σ e^(x − max)` along the axis, or `(x − max) − log Σ e^(x − max)`. The
/// max only shifts (softmax does not change under a shift), so no gradient goes through it.
fn softmax_decomposition(
    op: &Softmax,
    b: &mut GraphBuilder,
    x: NodeId,
) -> Result<NodeId, BuildError> {
    let max = b.reduce(ReduceOp::Max, x, &[op.axis], true)?;
    let max = b.op(Op::StopGradient, &[max])?;
    let shifted = b.binary(BinaryOp::Sub, x, max)?;
    let exp = b.unary(UnaryOp::Exp, shifted)?;
    let sum = b.reduce(ReduceOp::Sum, exp, &[op.axis], true)?;
    if op.log {
        let log_sum = b.unary(UnaryOp::Log, sum)?;
        b.binary(BinaryOp::Sub, shifted, log_sum)
    } else {
        b.binary(BinaryOp::Div, exp, sum)
    }
}

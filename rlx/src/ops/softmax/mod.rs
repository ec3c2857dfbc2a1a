//! Softmax and log-softmax along an axis.

mod decompose;
mod grad;
mod infer;

use super::array::{Array, Out};
use super::composite;
use super::sample::{Sampled, Sampler, axis_of, chance};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, TensorType};

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
        infer::softmax(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::softmax(e, self.axis, self.log, y, g)
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
        Some(decompose::softmax(self, b, x[0]))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (x, axis) = axis_of(s, DType::is_float)?;
        let log = chance(s, 0.4);
        Some((Op::Softmax(Softmax { axis, log }), vec![x]))
    }
}

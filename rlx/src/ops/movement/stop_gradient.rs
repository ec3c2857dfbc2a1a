//! Stop-gradient: its operand unchanged, with no gradient through it.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, Op, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::arity;
use crate::ops::sample::{Sampled, Sampler};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// `x` unchanged, with no gradient through it ([`Op::StopGradient`]).
pub(crate) struct StopGradient;

impl Primitive for StopGradient {
    fn name(&self) -> &'static str {
        "stop_gradient"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::StopGradient
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        identity_type(inputs)
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

pub(super) fn identity_type(inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    Ok(inputs[0].clone())
}

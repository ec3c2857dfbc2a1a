//! The two identities activation recomputation rests on: `checkpoint` marks a value the
//! backward pass keeps, `after` orders a recomputation behind the gradient that needs it.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, Op, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::arity;
use crate::ops::sample::{Sampled, Sampler};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

use super::stop_gradient::identity_type;

/// `x` unchanged ([`Op::Checkpoint`]): a value a training graph that recomputes
/// activations keeps from the forward pass; the values between checkpoints are computed
/// again in the backward pass instead of being kept.
pub(crate) struct Checkpoint;

impl Primitive for Checkpoint {
    fn name(&self) -> &'static str {
        "checkpoint"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Checkpoint
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        identity_type(inputs)
    }

    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::Some(g)])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(out.holding(x[0].data.clone()))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let x = s.operand(&|_| true)?;
        Some((Op::Checkpoint, vec![x]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

/// `x` unchanged, available only once `token` is computed ([`Op::After`]). A recomputed
/// value reads its checkpoints through `after(checkpoint, gradient)`, so it is computed
/// when the backward pass reaches it (not with the forward pass) and no pass merges it
/// with the forward value it repeats.
pub(crate) struct After;

impl Primitive for After {
    fn name(&self) -> &'static str {
        "after"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::After
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 2, "2 (x, token)")?;
        Ok(inputs[0].clone())
    }

    /// `x`'s gradient passes; the token only orders, so it takes none.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::Some(g), Grad::Discrete])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(out.holding(x[0].data.clone()))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let x = s.operand(&|_| true)?;
        let token = s.operand(&|_| true)?;
        Some((Op::After, vec![x, token]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

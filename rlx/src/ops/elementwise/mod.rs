//! Elementwise ops: unary and binary math, comparisons, `where` and casts.

mod grad;
pub(crate) mod infer;
pub(crate) mod reference;
mod sample;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{BinaryOp, CompareOp, DType, InferError, NodeId, Op, TensorType, UnaryOp};

/// Conversion to another dtype (Rust `as` semantics). Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cast {
    /// Target dtype.
    pub to: DType,
}

/// `cond ? a : b` ([`Op::Where`]).
pub(crate) struct Where;

impl Primitive for UnaryOp {
    fn name(&self) -> &'static str {
        UnaryOp::name(*self)
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Unary(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::unary(*self, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::unary(e, *self, x[0], y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        match self {
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Relu
            | UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round => Bound::Exact,
            _ => x.transcendental(),
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::unary(*self, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::unary(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for BinaryOp {
    fn name(&self) -> &'static str {
        BinaryOp::name(*self)
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Binary(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::binary(*self, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::binary(e, *self, x[0], x[1], y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let (u, scale, tiny) = (x.u, x.scale, x.tiny);
        match self {
            BinaryOp::Max | BinaryOp::Min => Bound::Exact,
            // One rounding.
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => Bound::Within {
                rel: 2.0 * u,
                abs: tiny,
                growth: scale * scale,
            },
            BinaryOp::Rem => Bound::Within {
                rel: 2.0 * u,
                abs: 4.0 * u * scale + tiny,
                growth: scale,
            },
            BinaryOp::Pow => Bound::Within {
                rel: 64.0 * u,
                abs: 64.0 * u + tiny,
                growth: scale,
            },
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::binary(*self, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::binary(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for CompareOp {
    fn name(&self) -> &'static str {
        CompareOp::name(*self)
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Compare(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::compare(*self, inputs)
    }

    /// Its result is `bool`: the driver gives its operands nothing before asking.
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
        Ok(reference::compare(*self, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::compare(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Where {
    fn name(&self) -> &'static str {
        "where"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Where
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::select(inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::select(e, x, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::select(x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::select(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Cast {
    fn name(&self) -> &'static str {
        "cast"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("to={}", self.to));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Cast(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::cast(self.to, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::cast(e, x[0], g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // One rounding to a float (a cast to an integer has an integer output: exact).
        Bound::Within {
            rel: x.u,
            abs: x.tiny,
            growth: x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::cast(self.to, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::cast(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

//! The leaves: inputs, params and states (typed by their declaration) and constants (typed
//! by their data). They take no operands and pass no gradient on.

use super::array::{Array, Out};
use super::check::arity;
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{ConstantData, InferError, NodeId, Op, TensorType, attr_err};

/// A graph input ([`Op::Input`]).
pub(crate) struct Input;

/// A weight ([`Op::Param`]).
pub(crate) struct Param;

/// Persistent state ([`Op::State`]).
pub(crate) struct State;

/// What inputs, params and states share: no operands, a declared type, no gradient rule (the
/// driver collects their cotangents).
macro_rules! declared_leaf {
    ($leaf:ident, $name:literal, $op:expr) => {
        impl Primitive for $leaf {
            fn name(&self) -> &'static str {
                $name
            }

            fn attrs(&self, _: &mut Vec<String>) {}

            fn bind_dims(&self, _: &[usize]) -> Op {
                $op
            }

            fn infer(&self, _: &[TensorType]) -> Result<TensorType, InferError> {
                Err(attr_err!(
                    "{} nodes take their type from their declaration, not from operands",
                    $name
                ))
            }

            fn vjp(
                &self,
                _: &mut Emitter<'_>,
                _: NodeId,
                _: &[NodeId],
                _: NodeId,
            ) -> Result<Vec<Grad>, GradError> {
                Ok(Vec::new())
            }

            fn tolerance(&self, _: &Operands<'_>) -> Bound {
                Bound::Exact
            }

            fn reference(&self, _: &[Array], _: &Out) -> Result<Array, ReferenceError> {
                Err(ReferenceError::Leaf { op: $name })
            }

            /// The random graphs make their own inputs and params.
            fn sample(_: &mut dyn Sampler) -> Sampled {
                None
            }

            /// A primitive.
            fn decompose(
                &self,
                _: &mut GraphBuilder,
                _: &[NodeId],
            ) -> Option<Result<NodeId, BuildError>> {
                None
            }
        }
    };
}

declared_leaf!(Input, "input", Op::Input);
declared_leaf!(Param, "param", Op::Param);
declared_leaf!(State, "state", Op::State);

impl Primitive for ConstantData {
    fn name(&self) -> &'static str {
        "const"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Constant(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 0, "0")?;
        Ok(self.ty().clone())
    }

    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(Vec::new())
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, _: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let values = (0..self.len()).map(|i| self.get(i).map_or(f64::NAN, |v| v.as_f64()));
        Ok(out.holding(values.collect()))
    }

    /// The random graphs make constants where an op needs them (indices, scalars).
    fn sample(_: &mut dyn Sampler) -> Sampled {
        None
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

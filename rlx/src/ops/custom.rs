//! User ops with kernels registered per backend.

use std::collections::BTreeMap;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{AttrValue, InferError, NodeId, Op, Shape, TensorType, attr_err};

/// A user op with kernels registered per backend under `name`. Any operands; the
/// output type is declared when the node is made.
#[derive(Clone, Debug, PartialEq)]
pub struct Custom {
    /// Registry key.
    pub name: String,
    /// Attributes passed to the kernels.
    pub attrs: BTreeMap<String, AttrValue>,
    /// The declared result type.
    pub output: TensorType,
}

impl Primitive for Custom {
    fn name(&self) -> &'static str {
        "custom"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("{:?}", self.name));
        out.extend(self.attrs.iter().map(|(k, v)| format!("{k}={v}")));
        out.push(format!("-> {}", self.output));
    }

    fn bind_dims(&self, out: &[usize]) -> Op {
        Op::Custom(Custom {
            name: self.name.clone(),
            attrs: self.attrs.clone(),
            output: TensorType::new(self.output.dtype, Shape::from(out)),
        })
    }

    fn infer(&self, _: &[TensorType]) -> Result<TensorType, InferError> {
        if self.name.is_empty() {
            return Err(attr_err!("a custom op needs a non-empty name"));
        }
        Ok(self.output.clone())
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Err(GradError::NotYet { at: e.site() })
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        // A custom op's kernels are the user's; one met by the random graphs must match its
        // float64 run exactly.
        Bound::Exact
    }

    /// A custom op is known only by its kernels.
    fn reference(&self, _: &[Array], _: &Out) -> Result<Array, ReferenceError> {
        Err(ReferenceError::NoReference {
            op: self.name.clone(),
        })
    }

    /// Known only by its kernels, which the random graphs cannot supply.
    fn sample(_: &mut dyn Sampler) -> Sampled {
        None
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

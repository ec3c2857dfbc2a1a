//! Reshape: the same elements under new dims.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{Dim, InferError, NodeId, Op, Shape, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::arity;
use crate::ops::sample::{Sampled, Sampler, chance, dims};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Same data, new dims; element counts must be provably equal. Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reshape {
    /// Target shape.
    pub shape: Shape,
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
        reshape_type(&self.shape, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        reshape_vjp(e, x[0], g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(out.holding(x[0].data.clone()))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_reshape(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn reshape_type(shape: &Shape, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let from = &inputs[0].shape;
    let (from_numel, to_numel) = (from.numel(), shape.numel());
    if from_numel != to_numel {
        return Err(InferError::Reshape {
            from: from.clone(),
            from_numel,
            to: shape.clone(),
            to_numel,
        });
    }
    Ok(TensorType::new(inputs[0].dtype, shape.clone()))
}

fn reshape_vjp(e: &mut Emitter<'_>, x: NodeId, g: NodeId) -> Result<Vec<Grad>, GradError> {
    Ok(vec![Grad::Some(e.reshape(g, e.shape(x))?)])
}

/// Two adjacent axes merged, or a unit axis added.
fn random_reshape(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let mut to = dims(s, x);
    let rank = to.len();
    if rank >= 2 && chance(s, 0.6) {
        let i = s.below(rank - 1);
        let merged = to[i].mul(&to[i + 1]);
        to.splice(i..i + 2, [merged]);
    } else {
        to.insert(s.below(rank + 1), Dim::from(1));
    }
    Some((Op::Reshape(Reshape { shape: to.into() }), vec![x]))
}

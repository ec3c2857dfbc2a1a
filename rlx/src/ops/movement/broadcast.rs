//! Broadcast: numpy's stretching of size-1 and missing leading dims.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{Dim, InferError, NodeId, Op, Shape, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::arity;
use crate::ops::sample::{Sampled, Sampler, chance, dims};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Numpy broadcast to `shape` (size-1 or missing leading dims stretch). Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Broadcast {
    /// Target shape.
    pub shape: Shape,
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
        broadcast_type(&self.shape, inputs)
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
        Ok(broadcast_value(&x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_broadcast(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn broadcast_type(shape: &Shape, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let from = &inputs[0].shape;
    if from.rank() > shape.rank() {
        return Err(attr_err!(
            "cannot broadcast {from} to {shape}: the target has fewer axes"
        ));
    }
    let offset = shape.rank() - from.rank();
    for (i, d) in from.dims().iter().enumerate() {
        let target = &shape[offset + i];
        if d != target && !d.is_one() {
            return Err(InferError::Broadcast {
                a: from.clone(),
                b: shape.clone(),
                a_dim: d.clone(),
                b_dim: target.clone(),
            });
        }
    }
    Ok(TensorType::new(inputs[0].dtype, shape.clone()))
}

fn broadcast_value(x: &Array, out: &Out) -> Array {
    out.fill(|o| x.at_broadcast(o))
}

/// Unit axes stretched to random dims, and maybe a new leading axis.
fn random_broadcast(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let mut to = dims(s, x);
    for d in to.iter_mut() {
        if *d == Dim::from(1) && chance(s, 0.5) {
            *d = s.dim();
        }
    }
    if chance(s, 0.5) {
        to.insert(0, s.dim());
    }
    Some((Op::Broadcast(Broadcast { shape: to.into() }), vec![x]))
}

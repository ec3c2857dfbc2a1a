//! `where`: an elementwise choice between two operands by a `bool` condition.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, broadcast_shapes, require, same_dtype};
use crate::ops::sample::{Sampled, Sampler, partner};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// `cond ? a : b` ([`Op::Where`]).
pub(crate) struct Where;

impl Primitive for Where {
    fn name(&self) -> &'static str {
        "where"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Where
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        select_type(inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        select_vjp(e, x, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(select_value(x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_select(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn select_type(inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 3, "3")?;
    require(inputs, 0, |d| d == DType::Bool, "bool")?;
    same_dtype(inputs, 1, 2)?;
    let shape = broadcast_shapes(&inputs[0].shape, &inputs[1].shape)?;
    let shape = broadcast_shapes(&shape, &inputs[2].shape)?;
    Ok(TensorType::new(inputs[1].dtype, shape))
}

/// `where(cond, a, b)`: the condition selects; each branch gets `g` where it was chosen.
fn select_vjp(e: &mut Emitter<'_>, x: &[NodeId], g: NodeId) -> Result<Vec<Grad>, GradError> {
    let (cond, a, b) = (x[0], x[1], x[2]);
    let zero = e.scalar(0.0, e.dtype(g));
    let ga = e.op(Op::Where, &[cond, g, zero])?;
    let gb = e.op(Op::Where, &[cond, zero, g])?;
    let ga = e.unbroadcast(ga, &e.shape(a))?;
    let gb = e.unbroadcast(gb, &e.shape(b))?;
    Ok(vec![Grad::Discrete, Grad::Some(ga), Grad::Some(gb)])
}

fn select_value(x: &[Array], out: &Out) -> Array {
    out.fill(|i| {
        if x[0].at_broadcast(i) != 0.0 {
            x[1].at_broadcast(i)
        } else {
            x[2].at_broadcast(i)
        }
    })
}

fn random_select(s: &mut dyn Sampler) -> Sampled {
    let cond = s.operand(&|t| t.dtype == DType::Bool)?;
    let a = s.operand(&|t| t.dtype != DType::Bool)?;
    let b = partner(s, a)?;
    Some((Op::Where, vec![cond, a, b]))
}

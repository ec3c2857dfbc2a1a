//! Permute: an axis permutation.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{Dim, InferError, NodeId, Op, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, check_axis};
use crate::ops::sample::{Sampled, Sampler};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Axis permutation: output axis `i` is input axis `perm[i]`. Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Permute {
    /// A permutation of `0..rank`.
    pub perm: Vec<usize>,
}

impl Primitive for Permute {
    fn name(&self) -> &'static str {
        "permute"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("perm={:?}", self.perm));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Permute(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        permute_type(&self.perm, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        permute_vjp(e, &self.perm, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(permute_value(&self.perm, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_permute(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn permute_type(perm: &[usize], inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let shape = &inputs[0].shape;
    let mut seen = vec![false; shape.rank()];
    for &axis in perm {
        check_axis(axis, shape.rank())?;
        seen[axis] = true;
    }
    if perm.len() != shape.rank() || seen.contains(&false) {
        return Err(attr_err!(
            "{perm:?} is not a permutation of the {} axes of {shape}",
            shape.rank()
        ));
    }
    let dims: Vec<Dim> = perm.iter().map(|&a| shape[a].clone()).collect();
    Ok(TensorType::new(inputs[0].dtype, dims))
}

fn permute_vjp(e: &mut Emitter<'_>, perm: &[usize], g: NodeId) -> Result<Vec<Grad>, GradError> {
    let mut inverse = vec![0; perm.len()];
    for (to, &from) in perm.iter().enumerate() {
        inverse[from] = to;
    }
    Ok(vec![Grad::Some(
        e.op(Op::Permute(Permute { perm: inverse }), &[g])?,
    )])
}

fn permute_value(perm: &[usize], x: &Array, out: &Out) -> Array {
    let mut at = vec![0; perm.len()];
    out.fill(|o| {
        for (i, p) in perm.iter().enumerate() {
            at[*p] = o[i];
        }
        x.at(&at)
    })
}

fn random_permute(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let rank = s.ty(x).rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, s.below(i + 1));
    }
    Some((Op::Permute(Permute { perm }), vec![x]))
}

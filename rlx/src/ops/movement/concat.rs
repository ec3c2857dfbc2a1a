//! Concat: operands joined along an axis.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, Dim, Gather, InferError, NodeId, Op, Shape, Slice, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{check_axis, same_dim, same_dtype};
use crate::ops::sample::{Sampled, Sampler, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Concatenation along an axis. Operands: one or more tensors of one dtype and rank.
#[derive(Clone, Debug, PartialEq)]
pub struct Concat {
    /// Axis joined.
    pub axis: usize,
}

impl Primitive for Concat {
    fn name(&self) -> &'static str {
        "concat"
    }

    axis_attrs!();

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Concat(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        concat_type(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        concat_vjp(e, x, self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(concat_value(self.axis, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_concat(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn concat_type(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    if inputs.is_empty() {
        return Err(InferError::Arity {
            expected: "at least 1",
            got: 0,
        });
    }
    let first = &inputs[0].shape;
    check_axis(axis, first.rank())?;
    let mut total = Dim::Static(0);
    for (operand, input) in inputs.iter().enumerate() {
        same_dtype(inputs, 0, operand)?;
        if input.rank() != first.rank() {
            return Err(InferError::Rank {
                operand,
                expected: first.rank().to_string(),
                got: input.rank(),
            });
        }
        for (i, (a, b)) in first.dims().iter().zip(input.shape.dims()).enumerate() {
            if i != axis {
                same_dim(
                    &format!("dims of axis {i} of operands 0 and {operand}"),
                    a,
                    b,
                )?;
            }
        }
        total = total
            .checked_add(&input.shape[axis])
            .ok_or_else(|| attr_err!("concatenated size along axis {axis} is negative"))?;
    }
    let mut dims = first.dims().to_vec();
    dims[axis] = total;
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// Each operand gets its slice of `g`, addressed from the front or, when the sizes before
/// it are symbolic, from the back.
fn concat_vjp(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let sizes: Vec<Dim> = x.iter().map(|i| e.shape(*i)[axis].clone()).collect();
    let mut grads = Vec::with_capacity(x.len());
    for i in 0..x.len() {
        let before = total(&sizes[..i]);
        let after = total(&sizes[i + 1..]);
        let size = sizes[i].as_static();
        let bounds = match (before.as_static(), size, after.as_static()) {
            (Some(b), Some(s), _) => Some((b as i64, Some((b + s) as i64))),
            (_, Some(s), Some(a)) => Some((-((a + s) as i64), (a > 0).then(|| -(a as i64)))),
            (Some(b), _, Some(a)) => Some((b as i64, (a > 0).then(|| -(a as i64)))),
            _ => None,
        };
        let part = match bounds {
            Some((start, stop)) => {
                let op = Op::Slice(Slice {
                    axis,
                    start,
                    stop,
                    step: 1,
                });
                e.op(op, &[g])?
            }
            // Symbolic sizes on both sides: gather positions `before + 0..size`, counted
            // at run time.
            None => {
                let positions = offset_iota(e, &sizes[..i], sizes[i].clone())?;
                e.op(Op::Gather(Gather { axis }), &[g, positions])?
            }
        };
        grads.push(Grad::Some(part));
    }
    Ok(grads)
}

fn concat_value(axis: usize, x: &[Array], out: &Out) -> Array {
    let mut at = Vec::new();
    out.fill(|o| {
        at.clear();
        at.extend_from_slice(o);
        for part in x {
            if at[axis] < part.shape[axis] {
                return part.at(&at);
            }
            at[axis] -= part.shape[axis];
        }
        unreachable!("the output axis is the sum of the parts'")
    })
}

/// An operand with itself, or with another of its type between two copies of it.
fn random_concat(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.rank() > 0)?;
    let ty = s.ty(x);
    let axis = s.below(ty.rank());
    let other = s.operand(&|t| *t == ty);
    let parts = match other {
        Some(y) if chance(s, 0.5) => vec![x, y, x],
        _ => vec![x, x],
    };
    Some((Op::Concat(Concat { axis }), parts))
}

/// `before + [0, 1, …, len)` as `i64`, where `before` is the total of `sizes` (symbolic
/// allowed), counted at run time.
fn offset_iota(e: &mut Emitter<'_>, sizes: &[Dim], len: Dim) -> Result<NodeId, GradError> {
    let iota = e.iota(len)?;
    let before = total(sizes);
    if before.as_static() == Some(0) {
        return Ok(iota);
    }
    let offset = e.count(&Shape::new([before]), &[0], DType::I64)?;
    e.add(iota, offset)
}

/// The sum of `dims` (`None` cannot occur for sizes, which are never negative).
fn total(dims: &[Dim]) -> Dim {
    dims.iter()
        .try_fold(Dim::Static(0), |acc, d| acc.checked_add(d))
        .unwrap_or(Dim::Static(0))
}

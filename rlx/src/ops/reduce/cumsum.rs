//! Cumulative sum along an axis: inclusive or exclusive, forward or reversed.

use std::collections::HashMap;

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, check_axis, require_numeric};
use crate::ops::sample::{Sampled, Sampler, axis_of, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, flag};

/// Running sum along an axis. Operands: `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct Cumsum {
    /// Axis summed along.
    pub axis: usize,
    /// Exclude the current element (the first output is 0).
    pub exclusive: bool,
    /// Sum from the end of the axis.
    pub reverse: bool,
}

impl Primitive for Cumsum {
    fn name(&self) -> &'static str {
        "cumsum"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.exclusive, "exclusive");
        flag(out, self.reverse, "reverse");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Cumsum(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        cumsum_type(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        cumsum_vjp(e, self.axis, self.exclusive, self.reverse, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        x.sum(x.axis_len(self.axis))
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(cumsum_value(
            self.axis,
            self.exclusive,
            self.reverse,
            &x[0],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_cumsum(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn cumsum_type(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(inputs[0].clone())
}

/// A cumulative sum's adjoint is the cumulative sum the other way.
fn cumsum_vjp(
    e: &mut Emitter<'_>,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let op = Op::Cumsum(Cumsum {
        axis,
        exclusive,
        reverse: !reverse,
    });
    Ok(vec![Grad::Some(e.op(op, &[g])?)])
}

/// The running sum along `axis`, from the end when `reverse`, without the current element
/// when `exclusive`.
fn cumsum_value(axis: usize, exclusive: bool, reverse: bool, x: &Array, out: &Out) -> Array {
    // Each line is read once (its elements are not adjacent unless `axis` is last); every
    // element's sum is still its own, term by term.
    let mut lines: HashMap<Vec<usize>, Vec<f64>> = HashMap::new();
    out.fill(|o| {
        let mut start = o.to_vec();
        start[axis] = 0;
        let line = lines
            .entry(start)
            .or_insert_with_key(|start| x.line(start, axis));
        let k = o[axis];
        let range = match (reverse, exclusive) {
            (false, false) => 0..k + 1,
            (false, true) => 0..k,
            (true, false) => k..line.len(),
            (true, true) => k + 1..line.len(),
        };
        if x.dtype.is_float() {
            line[range].iter().sum()
        } else {
            line[range]
                .iter()
                .fold(0i64, |s, v| s.wrapping_add(*v as i64)) as f64
        }
    })
}

fn random_cumsum(s: &mut dyn Sampler) -> Sampled {
    let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
    let (exclusive, reverse) = (chance(s, 0.3), chance(s, 0.3));
    let op = Op::Cumsum(Cumsum {
        axis,
        exclusive,
        reverse,
    });
    Some((op, vec![x]))
}

//! Stable sort, argsort and top-k along an axis.

mod grad;
mod infer;
mod reference;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler, axis_of, chance, pick};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError, flag};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, SortOutput, TensorType};

/// The `k` largest elements along an axis, largest first. `k` is checked against a
/// symbolic axis when its size is bound. Operands: `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    /// Elements kept.
    pub k: usize,
    /// Axis searched.
    pub axis: usize,
    /// Values or `i64` indices.
    pub output: SortOutput,
}

/// Stable sort along an axis. Operands: `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct Sort {
    /// Axis sorted.
    pub axis: usize,
    /// Largest first.
    pub descending: bool,
    /// Values or `i64` indices (argsort).
    pub output: SortOutput,
}

impl Primitive for TopK {
    fn name(&self) -> &'static str {
        "topk"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("k={}, axis={}", self.k, self.axis));
        flag(out, self.output == SortOutput::Indices, "indices");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::TopK(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::topk(self.k, self.axis, self.output, inputs)
    }

    /// Through a one-hot of the op's own indices.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let indices = Op::TopK(TopK {
            output: SortOutput::Indices,
            ..self.clone()
        });
        grad::select_back(e, x[0], indices, self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::sorted(self.axis, true, self.output, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
        let size = s.sizes(x)[axis];
        if size == 0 {
            return None;
        }
        let k = 1 + s.below(size);
        let output = pick(s, &SortOutput::ALL);
        Some((TopK { k, axis, output }.into(), vec![x]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Sort {
    fn name(&self) -> &'static str {
        match self.output {
            SortOutput::Values => "sort",
            SortOutput::Indices => "argsort",
        }
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.descending, "descending");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Sort(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::sort(self.axis, self.output, inputs)
    }

    /// Through a one-hot of the op's own indices.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let indices = Op::Sort(Sort {
            output: SortOutput::Indices,
            ..self.clone()
        });
        grad::select_back(e, x[0], indices, self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::sorted(
            self.axis,
            self.descending,
            self.output,
            &x[0],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
        let descending = chance(s, 0.5);
        let output = pick(s, &SortOutput::ALL);
        let op = Sort {
            axis,
            descending,
            output,
        };
        Some((op.into(), vec![x]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

//! Reductions, arg-reductions, running sums, softmax, layer and RMS norm, sort and top-k.

mod grad;
mod infer;

use super::Primitive;
use super::tolerance::{Bound, Operands};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::ir::{ArgReduceOp, InferError, NodeId, Op, ReduceOp, SortOutput, TensorType};

/// Reduction over `axes` (sorted, unique, at least one). Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// Function.
    pub op: ReduceOp,
    /// Axes reduced.
    pub axes: Vec<usize>,
    /// Keep reduced axes as size 1.
    pub keep_dims: bool,
}

/// Argmax/argmin along one axis, as `i64`. Operands: `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct ArgReduce {
    /// Function.
    pub op: ArgReduceOp,
    /// Axis reduced.
    pub axis: usize,
    /// Keep the axis as size 1.
    pub keep_dims: bool,
}

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

/// Softmax (or log-softmax) along an axis. Operands: `x` (float).
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    /// Axis normalized.
    pub axis: usize,
    /// Produce log-softmax.
    pub log: bool,
}

/// Layer normalization over the last axis. Operands: `x`, then `weight` and `bias`
/// (each `[last]`, dtype of `x`) when present.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    /// Added to the variance.
    pub eps: f64,
    /// A `weight` operand follows `x`.
    pub has_weight: bool,
    /// A `bias` operand follows.
    pub has_bias: bool,
}

/// RMS normalization over the last axis. Operands: `x`, then `weight` (`[last]`) when
/// present.
#[derive(Clone, Debug, PartialEq)]
pub struct RmsNorm {
    /// Added to the mean square.
    pub eps: f64,
    /// A `weight` operand follows `x`.
    pub has_weight: bool,
}

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

/// Pushes `name` when `on`.
fn flag(out: &mut Vec<String>, on: bool, name: &str) {
    if on {
        out.push(name.into());
    }
}

impl Primitive for Reduce {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axes={:?}", self.axes));
        flag(out, self.keep_dims, "keep_dims");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Reduce(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::reduce(self.op, &self.axes, self.keep_dims, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::reduce(e, self.op, x[0], &self.axes, y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let dims = x.dims(0);
        let n = self
            .axes
            .iter()
            .map(|&a| dims.get(a).copied().unwrap_or(1))
            .product::<usize>()
            .max(1) as f64;
        let (u, scale) = (x.u, x.scale);
        match self.op {
            ReduceOp::Max | ReduceOp::Min => Bound::Exact,
            ReduceOp::Sum => x.sum(n),
            ReduceOp::Mean => Bound::Within {
                rel: 2.0 * u,
                abs: 2.0 * u * n * scale + x.tiny,
                growth: n * scale,
            },
            ReduceOp::Prod => Bound::Within {
                rel: 4.0 * u * n,
                abs: x.tiny,
                growth: scale.powf(n),
            },
        }
    }
}

impl Primitive for ArgReduce {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.keep_dims, "keep_dims");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ArgReduce(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::arg_reduce(self.axis, self.keep_dims, inputs)
    }

    /// Its result is `i64`: the driver gives its operand nothing before asking.
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
        infer::cumsum(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::cumsum(e, self.axis, self.exclusive, self.reverse, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        x.sum(axis_len(x, self.axis))
    }
}

impl Primitive for Softmax {
    fn name(&self) -> &'static str {
        if self.log { "log_softmax" } else { "softmax" }
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Softmax(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::softmax(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::softmax(e, self.axis, self.log, y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let n = axis_len(x, self.axis);
        Bound::Within {
            rel: 4.0 * x.u,
            abs: 64.0 * x.u * n * (1.0 + x.scale) + x.tiny,
            growth: x.scale,
        }
    }
}

impl Primitive for LayerNorm {
    fn name(&self) -> &'static str {
        "layer_norm"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("eps={:e}", self.eps));
        flag(out, !self.has_weight, "no_weight");
        flag(out, !self.has_bias, "no_bias");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::LayerNorm(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::norm(self.eps, self.has_weight, self.has_bias, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::layer_norm(e, x, self.eps, self.has_weight, self.has_bias, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        norm_bound(x, self.eps, self.has_weight, true)
    }
}

impl Primitive for RmsNorm {
    fn name(&self) -> &'static str {
        "rms_norm"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("eps={:e}", self.eps));
        flag(out, !self.has_weight, "no_weight");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::RmsNorm(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::norm(self.eps, self.has_weight, false, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::rms_norm(e, x, self.eps, self.has_weight, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        norm_bound(x, self.eps, self.has_weight, false)
    }
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
}

/// The length of operand 0's `axis` (at least 1).
fn axis_len(x: &Operands<'_>, axis: usize) -> f64 {
    x.dims(0).get(axis).copied().unwrap_or(1).max(1) as f64
}

/// Layer norm (`centered`) or RMS norm over the last axis: the sum bound times the rows'
/// largest amplification `1 / sqrt(var + eps)` and the weight's scale.
fn norm_bound(x: &Operands<'_>, eps: f64, has_weight: bool, centered: bool) -> Bound {
    let values = &x.values[0];
    let n = values.shape().last().copied().unwrap_or(1).max(1);
    let mut amplification = 0.0f64;
    for row in values.to_f64_vec().chunks(n) {
        let mean = if centered {
            row.iter().sum::<f64>() / n as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        amplification = amplification.max(1.0 / (var + eps).sqrt());
    }
    let weight = if has_weight {
        x.largest(1).max(1.0)
    } else {
        1.0
    };
    let (n, u, scale) = (n as f64, x.u, x.scale);
    Bound::Within {
        rel: 4.0 * u,
        abs: 32.0 * u * n * scale * amplification * weight + 4.0 * u * scale + x.tiny,
        growth: n * scale * amplification * weight,
    }
}

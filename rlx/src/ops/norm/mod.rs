//! Layer and RMS normalization over the last axis.

mod decompose;
mod grad;
mod infer;

use super::array::{Array, Out};
use super::composite;
use super::sample::{Sampled, Sampler, chance};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError, flag};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, Op, TensorType};

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

/// A float operand of rank 1 or more, and a weight for its last axis more often than not.
fn norm_operands(s: &mut dyn Sampler) -> Option<(NodeId, Vec<NodeId>)> {
    let x = s.operand(&|t| t.dtype.is_float() && t.rank() > 0)?;
    let ty = s.ty(x);
    let mut operands = vec![x];
    if chance(s, 0.6) {
        operands.push(s.input(ty.dtype, vec![ty.shape[ty.rank() - 1].clone()])?);
    }
    Some((x, operands))
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

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        composite::reference(&Op::LayerNorm(self.clone()), x, out)
    }

    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        let weight = x.get(1).copied().filter(|_| self.has_weight);
        let bias = x
            .get(1 + usize::from(self.has_weight))
            .copied()
            .filter(|_| self.has_bias);
        Some(decompose::normalize(b, true, self.eps, x[0], weight, bias))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (x, mut operands) = norm_operands(s)?;
        let has_weight = operands.len() > 1;
        let has_bias = chance(s, 0.6);
        if has_bias {
            let ty = s.ty(x);
            operands.push(s.input(ty.dtype, vec![ty.shape[ty.rank() - 1].clone()])?);
        }
        let op = LayerNorm {
            eps: 1e-5,
            has_weight,
            has_bias,
        };
        Some((op.into(), operands))
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

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        composite::reference(&Op::RmsNorm(self.clone()), x, out)
    }

    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        let weight = x.get(1).copied().filter(|_| self.has_weight);
        Some(decompose::normalize(b, false, self.eps, x[0], weight, None))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (_, operands) = norm_operands(s)?;
        let has_weight = operands.len() > 1;
        Some((
            RmsNorm {
                eps: 1e-5,
                has_weight,
            }
            .into(),
            operands,
        ))
    }
}

/// Layer norm (`centered`) or RMS norm over the last axis: the sum bound times the rows'
/// largest amplification `1 / sqrt(var + eps)` and the weight's scale.
fn norm_bound(x: &Operands<'_>, eps: f64, has_weight: bool, centered: bool) -> Bound {
    let Some(values) = x.values.first() else {
        return Bound::Exact;
    };
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

//! Layer norm and RMS norm over the last axis, composites sharing one decomposition.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    BinaryOp, InferError, NodeId, Op, ReduceOp, Scalar, TensorType, UnaryOp, attr_err,
};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, exact_rank, min_rank, require_float, same_dim, same_dtype};
use crate::ops::sample::{Sampled, Sampler, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, composite, flag};

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
        norm_type(self.eps, self.has_weight, self.has_bias, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        layer_norm_vjp(e, x, self.eps, self.has_weight, self.has_bias, g)
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
        Some(normalize(b, true, self.eps, x[0], weight, bias))
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
        norm_type(self.eps, self.has_weight, false, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        rms_norm_vjp(e, x, self.eps, self.has_weight, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        norm_bound(x, self.eps, self.has_weight, false)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        composite::reference(&Op::RmsNorm(self.clone()), x, out)
    }

    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        let weight = x.get(1).copied().filter(|_| self.has_weight);
        Some(normalize(b, false, self.eps, x[0], weight, None))
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

/// Layer-norm and RMS-norm: `x` then optional per-feature `weight` and `bias`.
fn norm_type(
    eps: f64,
    has_weight: bool,
    has_bias: bool,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    let expected = 1 + usize::from(has_weight) + usize::from(has_bias);
    let label = match expected {
        1 => "1 (x)",
        2 if has_weight => "2 (x, weight)",
        2 => "2 (x, bias)",
        _ => "3 (x, weight, bias)",
    };
    arity(inputs, expected, label)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(attr_err!("eps must be finite and non-negative, got {eps}"));
    }
    require_float(inputs, 0)?;
    min_rank(inputs, 0, 1)?;
    let x = &inputs[0].shape;
    let features = &x[x.rank() - 1];
    for operand in 1..expected {
        same_dtype(inputs, 0, operand)?;
        exact_rank(inputs, operand, 1)?;
        same_dim(
            "normalized features and affine parameter size",
            features,
            &inputs[operand].shape[0],
        )?;
    }
    Ok(inputs[0].clone())
}

/// `y = x̂·w + b` with `x̂ = (x − μ)·r`, `r = 1/sqrt(var + eps)` over the last axis:
/// `gx = r·(gx̂ − mean(gx̂) − x̂·mean(gx̂·x̂))` with `gx̂ = g·w`.
fn layer_norm_vjp(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    eps: f64,
    has_weight: bool,
    has_bias: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let input = x[0];
    let last = e.shape(input).rank() - 1;
    let mean = e.reduce(ReduceOp::Mean, input, vec![last], true)?;
    let centered = e.sub(input, mean)?;
    let square = e.mul(centered, centered)?;
    let var = e.reduce(ReduceOp::Mean, square, vec![last], true)?;
    let var = e.shift(var, eps)?;
    let r = e.unary(UnaryOp::Rsqrt, var)?;
    let normed = e.mul(centered, r)?;
    let mut grads = Vec::with_capacity(x.len());
    let g_normed = if has_weight { e.mul(g, x[1])? } else { g };
    let mean_g = e.reduce(ReduceOp::Mean, g_normed, vec![last], true)?;
    let gn = e.mul(g_normed, normed)?;
    let mean_gn = e.reduce(ReduceOp::Mean, gn, vec![last], true)?;
    let along = e.mul(normed, mean_gn)?;
    let inner = e.sub(g_normed, mean_g)?;
    let inner = e.sub(inner, along)?;
    grads.push(Grad::Some(e.mul(r, inner)?));
    if has_weight {
        let gw = e.mul(g, normed)?;
        let gw = e.reduce(ReduceOp::Sum, gw, leading(e, input), false)?;
        grads.push(Grad::Some(gw));
    }
    if has_bias {
        let gb = e.reduce(ReduceOp::Sum, g, leading(e, input), false)?;
        grads.push(Grad::Some(gb));
    }
    Ok(grads)
}

/// `y = x·r·w` with `r = 1/sqrt(mean(x²) + eps)`: `gx = r·(gx̂ − x·r²·mean(gx̂·x))` with
/// `gx̂ = g·w`.
fn rms_norm_vjp(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    eps: f64,
    has_weight: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let input = x[0];
    let last = e.shape(input).rank() - 1;
    let square = e.mul(input, input)?;
    let ms = e.reduce(ReduceOp::Mean, square, vec![last], true)?;
    let ms = e.shift(ms, eps)?;
    let r = e.unary(UnaryOp::Rsqrt, ms)?;
    let g_normed = if has_weight { e.mul(g, x[1])? } else { g };
    let gx = e.mul(g_normed, input)?;
    let mean_gx = e.reduce(ReduceOp::Mean, gx, vec![last], true)?;
    let r2 = e.mul(r, r)?;
    let along = e.mul(input, r2)?;
    let along = e.mul(along, mean_gx)?;
    let inner = e.sub(g_normed, along)?;
    let mut grads = vec![Grad::Some(e.mul(r, inner)?)];
    if has_weight {
        let normed = e.mul(input, r)?;
        let gw = e.mul(g, normed)?;
        let gw = e.reduce(ReduceOp::Sum, gw, leading(e, input), false)?;
        grads.push(Grad::Some(gw));
    }
    Ok(grads)
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

/// The axes before the last: what a per-feature weight's gradient sums over.
fn leading(e: &Emitter<'_>, x: NodeId) -> Vec<usize> {
    (0..e.shape(x).rank() - 1).collect()
}

/// Each row of the last axis centred by its mean (`centered`, layer norm) or not (RMS
/// norm), divided by `sqrt(mean of squares + eps)`, then times `weight` and plus `bias`
/// when given.
fn normalize(
    b: &mut GraphBuilder,
    centered: bool,
    eps: f64,
    x: NodeId,
    weight: Option<NodeId>,
    bias: Option<NodeId>,
) -> Result<NodeId, BuildError> {
    let ty = b.ty(x).expect("an operand of the graph").clone();
    let last = ty.rank() - 1;
    let centred = if centered {
        let mean = b.reduce(ReduceOp::Mean, x, &[last], true)?;
        b.binary(BinaryOp::Sub, x, mean)?
    } else {
        x
    };
    let square = b.mul(centred, centred)?;
    let variance = b.reduce(ReduceOp::Mean, square, &[last], true)?;
    let eps = b.scalar(Scalar::Float(eps), ty.dtype);
    let shifted = b.add(variance, eps)?;
    let inverse = b.unary(UnaryOp::Rsqrt, shifted)?;
    let mut y = b.mul(centred, inverse)?;
    if let Some(w) = weight {
        y = b.mul(y, w)?;
    }
    if let Some(bias) = bias {
        y = b.add(y, bias)?;
    }
    Ok(y)
}

//! The gradients of layer and RMS norm, which recompute the normalized values from the input.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::ir::{NodeId, ReduceOp, UnaryOp};

/// The axes before the last: what a per-feature weight's gradient sums over.
fn leading(e: &Emitter<'_>, x: NodeId) -> Vec<usize> {
    (0..e.shape(x).rank() - 1).collect()
}

/// `y = x̂·w + b` with `x̂ = (x − μ)·r`, `r = 1/sqrt(var + eps)` over the last axis:
/// `gx = r·(gx̂ − mean(gx̂) − x̂·mean(gx̂·x̂))` with `gx̂ = g·w`.
pub(crate) fn layer_norm(
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
pub(crate) fn rms_norm(
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

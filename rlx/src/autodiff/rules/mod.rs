//! Gradient rules (vector-Jacobian products), one module per op family as in
//! `ir/infer/`: given the cotangent `g` of a node's output, each rule emits the cotangent of
//! each operand. The match in [`vjp`] is exhaustive over [`Op`], so a new op does not
//! compile until it states its rule (or that it has none).

mod elementwise;
mod linalg;
mod movement;
mod nn;
mod reduce;
mod spatial;

use super::GradError;
use super::emit::Emitter;
use crate::ir::{NodeId, Op, SortOutput};

/// What flows back to one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grad {
    /// Its cotangent.
    Some(NodeId),
    /// Nothing, by design: the operand selects or indexes (a `where` condition, gather
    /// indices) and takes no gradient.
    Discrete,
    /// Nothing, because the op has no derivative with respect to it.
    None,
    /// A derivative exists but RLX has no rule for it yet.
    NotYet,
}

/// The cotangents of node `id`'s operands given `g`, its output's cotangent.
pub(crate) fn vjp(e: &mut Emitter<'_>, id: NodeId, g: NodeId) -> Result<Vec<Grad>, GradError> {
    let node = e.node(id);
    let none = || Ok(vec![Grad::None; node.inputs.len()]);
    if !node.ty.dtype.is_float() {
        // Integer and bool values are piecewise constant: no gradient flows through them.
        return none();
    }
    let x = &node.inputs;
    match &node.op {
        Op::Input | Op::Param | Op::Constant(_) => Ok(Vec::new()),
        Op::Unary(kind) => elementwise::unary(e, *kind, x[0], id, g),
        Op::Binary(kind) => elementwise::binary(e, *kind, x[0], x[1], id, g),
        Op::FusedElementwise { steps } => elementwise::fused(e, x, steps, g),
        Op::Compare(_) => none(),
        Op::Where => elementwise::select(e, x, g),
        Op::Cast { .. } => elementwise::cast(e, x[0], g),
        Op::MatMul {
            transpose_a,
            transpose_b,
        } => linalg::matmul(e, x[0], x[1], *transpose_a, *transpose_b, g),
        Op::FusedMatMul {
            transpose_a,
            transpose_b,
            epilogue,
        } => linalg::fused_matmul(e, x, *transpose_a, *transpose_b, epilogue, g),
        Op::Solve => linalg::solve(e, x[0], x[1], id, g),
        Op::Reduce { op, axes, .. } => reduce::reduce(e, *op, x[0], axes, id, g),
        Op::ArgReduce { .. } => none(),
        Op::Cumsum {
            axis,
            exclusive,
            reverse,
        } => reduce::cumsum(e, *axis, *exclusive, *reverse, g),
        Op::Softmax { axis, log } => reduce::softmax(e, *axis, *log, id, g),
        Op::LayerNorm {
            eps,
            has_weight,
            has_bias,
        } => reduce::layer_norm(e, x, *eps, *has_weight, *has_bias, g),
        Op::RmsNorm { eps, has_weight } => reduce::rms_norm(e, x, *eps, *has_weight, g),
        // Cut on purpose: the operand takes nothing, and that is no error.
        Op::StopGradient => Ok(vec![Grad::Discrete]),
        Op::Reshape { .. } => movement::reshape(e, x[0], g),
        Op::Permute { perm } => movement::permute(e, perm, g),
        Op::Slice {
            axis,
            start,
            stop,
            step,
        } => movement::slice(e, x[0], *axis, *start, *stop, *step, g),
        Op::Concat { axis } => movement::concat(e, x, *axis, g),
        Op::Broadcast { .. } => Ok(vec![Grad::Some(e.unbroadcast(g, &e.shape(x[0]))?)]),
        Op::Pad { pads, .. } => movement::pad(e, pads, g),
        Op::Gather { axis } => movement::gather(e, x[0], x[1], *axis, g),
        Op::ScatterAdd { axis } => movement::scatter_add(e, x[1], *axis, g),
        Op::TopK { k, axis, .. } => {
            let indices = Op::TopK {
                k: *k,
                axis: *axis,
                output: SortOutput::Indices,
            };
            reduce::select_back(e, x[0], indices, *axis, g)
        }
        Op::Sort {
            axis, descending, ..
        } => {
            let indices = Op::Sort {
                axis: *axis,
                descending: *descending,
                output: SortOutput::Indices,
            };
            reduce::select_back(e, x[0], indices, *axis, g)
        }
        Op::Attention { scale, mask } => nn::attention(e, x, *scale, *mask, g),
        Op::Rope {
            dims,
            base,
            scale,
            traditional,
        } => nn::rope(e, x, *dims, *base, *scale, *traditional, g),
        Op::Conv {
            stride,
            padding,
            dilation,
            groups,
        } => {
            let win = spatial::Window {
                stride,
                padding,
                dilation,
                groups: *groups,
            };
            spatial::conv(e, x, &win, g)
        }
        Op::ConvTranspose {
            stride,
            padding,
            dilation,
            groups,
            ..
        } => {
            let win = spatial::Window {
                stride,
                padding,
                dilation,
                groups: *groups,
            };
            spatial::conv_transpose(e, x, &win, g)
        }
        Op::Pool {
            kind,
            kernel,
            stride,
            padding,
        } => spatial::pool(e, x[0], id, *kind, kernel, stride, padding, g),
        Op::Upsample { mode, .. } => spatial::upsample(e, x[0], *mode, g),
        // Quantized weights (packed integers, their scales and offsets) are not trained; the
        // activations' gradient needs a dequantizing op the IR does not have yet.
        Op::QuantizedMatMul { .. } => Ok(vec![Grad::NotYet, Grad::None, Grad::None, Grad::None]),
        Op::Custom { .. } => Err(GradError::NotYet { at: e.site() }),
    }
}

//! Attention and rotary position embedding (a composite: `decompose.rs`).

mod decompose;
mod grad;
mod infer;
mod reference;
mod sample;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError, composite};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{AttentionMask, InferError, NodeId, Op, TensorType};

/// Scaled dot-product attention `softmax(q kᵀ · scale + mask) v`. Operands: `q`
/// `[.., Sq, D]`, `k` `[.., Sk, D]`, `v` `[.., Sk, Dv]`, then the mask for
/// [`AttentionMask::Tensor`]. With rank ≥ 3 the axis before the sequence is heads: `q`
/// may have a multiple of `k`'s heads (grouped-query attention). A query row whose keys are
/// all masked yields zeros.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    /// Multiplies the scores, typically `1/sqrt(D)`.
    pub scale: f64,
    /// Masking.
    pub mask: AttentionMask,
}

/// Rotary position embedding on the first `dims` features of the last axis; positions
/// run along the second-to-last axis starting at the optional `offset`. Operands: `x`
/// (float, rank ≥ 2), then `offset` (`i32`/`i64` scalar) when present.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// Features rotated (even, at most the last dim).
    pub dims: usize,
    /// Frequency base, e.g. 10000.
    pub base: f64,
    /// Positions are multiplied by this.
    pub scale: f64,
    /// Rotate adjacent pairs `(2i, 2i+1)` instead of the two halves.
    pub traditional: bool,
}

impl Primitive for Attention {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("scale={}", self.scale));
        match self.mask {
            AttentionMask::None => {}
            AttentionMask::Causal => out.push("causal".into()),
            AttentionMask::SlidingWindow(w) => out.push(format!("window={w}")),
            AttentionMask::Tensor => out.push("mask".into()),
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Attention(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::attention(self.scale, self.mask, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::attention(e, x, self.scale, self.mask, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // Scores of up to `d * scale^2 * |factor|`, probabilities over `t` keys, then a
        // weighted sum of values.
        let (q, k) = (x.dims(0), x.dims(1));
        let d = q.last().copied().unwrap_or(1).max(1) as f64;
        let t = k.get(k.len().wrapping_sub(2)).copied().unwrap_or(1).max(1) as f64;
        let scores = self.scale.abs() * d * x.scale * x.scale;
        Bound::Within {
            rel: 4.0 * x.u,
            abs: 64.0 * x.u * t * (1.0 + scores) * x.scale + x.tiny,
            growth: scores.max(t * x.scale),
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::attention(self.scale, self.mask, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::attention(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Rope {
    fn name(&self) -> &'static str {
        "rope"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("dims={}, base={}", self.dims, self.base));
        if self.scale != 1.0 {
            out.push(format!("scale={}", self.scale));
        }
        if self.traditional {
            out.push("traditional".into());
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Rope(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::rope(self.dims, self.base, self.scale, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::rope(e, x, self.dims, self.base, self.scale, self.traditional, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // Angles up to `position * |factor|` carry an f32 rounding each (MLX computes them
        // in f32), which sin and cos turn into absolute errors.
        let dims = x.dims(0);
        let rows = dims.get(dims.len().wrapping_sub(2)).copied().unwrap_or(1) as f64;
        let offset = x.values.get(1).map_or(0.0, |o| {
            o.to_f64_vec().first().copied().unwrap_or(0.0).abs()
        });
        let angle = (rows + offset) * self.scale.abs().max(1.0);
        Bound::Within {
            rel: 8.0 * x.u,
            abs: 16.0 * x.u * x.scale * (1.0 + angle) + x.tiny,
            growth: x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        composite::reference(&Op::Rope(self.clone()), x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::rope(s)
    }

    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        Some(decompose::rope(self, b, x))
    }
}

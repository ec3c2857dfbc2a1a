//! Transformer blocks: multi-head self-attention and the feed-forward block.

use std::marker::PhantomData;

use super::Linear;
use crate::Params;
use crate::typed::{Dim, Float, Tensor};

/// Multi-head self-attention over `(Batch, Seq, D)` with `H` heads of `HD` features
/// (`H * HD` must equal `D`; checked when the graph is built). Names follow BERT's
/// `query`, `key`, `value` and `output`.
#[derive(Params)]
pub struct SelfAttention<'g, D: Dim, H: Dim, HD: Dim, E: Float = f32> {
    /// Query projection.
    pub query: Linear<'g, D, D, E>,
    /// Key projection.
    pub key: Linear<'g, D, D, E>,
    /// Value projection.
    pub value: Linear<'g, D, D, E>,
    /// Output projection.
    pub output: Linear<'g, D, D, E>,
    /// The head layout.
    pub heads: PhantomData<(H, HD)>,
}

impl<'g, D: Dim, H: Dim, HD: Dim, E: Float> SelfAttention<'g, D, H, HD, E> {
    fn heads<B: Dim, S: Dim>(x: Tensor<'g, (B, S, D), E>) -> Tensor<'g, (B, H, S, HD), E> {
        x.reshape::<(B, S, H, HD)>().swap_axes::<1, 2>()
    }

    fn attend<B: Dim, S: Dim>(
        &self,
        x: Tensor<'g, (B, S, D), E>,
        attend: impl FnOnce(
            Tensor<'g, (B, H, S, HD), E>,
            Tensor<'g, (B, H, S, HD), E>,
            Tensor<'g, (B, H, S, HD), E>,
        ) -> Tensor<'g, (B, H, S, HD), E>,
    ) -> Tensor<'g, (B, S, D), E> {
        let q = Self::heads(self.query.forward(x));
        let k = Self::heads(self.key.forward(x));
        let v = Self::heads(self.value.forward(x));
        let context = attend(q, k, v).swap_axes::<1, 2>().reshape::<(B, S, D)>();
        self.output.forward(context)
    }

    /// `1 / sqrt(HD)`, the usual score scale.
    fn scale(x: &Tensor<'g, impl crate::typed::Shape, E>) -> f64 {
        let hd = x.scope().size::<HD>().max(1);
        1.0 / (hd as f64).sqrt()
    }

    /// Every position attends to every position.
    #[track_caller]
    pub fn forward<B: Dim, S: Dim>(&self, x: Tensor<'g, (B, S, D), E>) -> Tensor<'g, (B, S, D), E> {
        let scale = Self::scale(&x);
        self.attend(x, |q, k, v| q.attention(k, v, scale))
    }

    /// Position `i` attends to positions `0..=i` (decoders).
    #[track_caller]
    pub fn forward_causal<B: Dim, S: Dim>(
        &self,
        x: Tensor<'g, (B, S, D), E>,
    ) -> Tensor<'g, (B, S, D), E> {
        let scale = Self::scale(&x);
        self.attend(x, |q, k, v| q.attention_causal(k, v, scale))
    }

    /// Positions attend only to keys where `mask[b, j]` is true (padded batches).
    #[track_caller]
    pub fn forward_masked<B: Dim, S: Dim>(
        &self,
        x: Tensor<'g, (B, S, D), E>,
        mask: Tensor<'g, (B, S), bool>,
    ) -> Tensor<'g, (B, S, D), E> {
        let scale = Self::scale(&x);
        self.attend(x, |q, k, v| q.attention_masked(k, v, mask, scale))
    }
}

/// The transformer feed-forward block: `down(act(up(x)))`.
#[derive(Params)]
pub struct FeedForward<'g, D: Dim, F: Dim, E: Float = f32> {
    /// `D -> F`.
    pub up: Linear<'g, D, F, E>,
    /// `F -> D`.
    pub down: Linear<'g, F, D, E>,
}

impl<'g, D: Dim, F: Dim, E: Float> FeedForward<'g, D, F, E> {
    /// Applies the block with GELU (erf form) between the two projections.
    #[track_caller]
    pub fn forward<B: Dim, S: Dim>(&self, x: Tensor<'g, (B, S, D), E>) -> Tensor<'g, (B, S, D), E> {
        self.down.forward(self.up.forward(x).gelu())
    }
}

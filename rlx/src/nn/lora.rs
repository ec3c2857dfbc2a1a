//! Low-rank adapters (LoRA, Hu et al. 2021): a frozen linear map `W` plus a trained update
//! `scale · B·A` of rank `r`, where `A` is `[r, in]`, `B` is `[out, r]` and `scale` is
//! `alpha / r`. Fine-tuning trains `A` and `B` alone ([`Trainable`](crate::train::Trainable)),
//! a few megabytes beside a base of hundreds, and the base may stay quantized (QLoRA).

use crate::Params;
use crate::ir::{BinaryOp, Scalar};
use crate::typed::{Dim, Float, LastDim, Tensor};

crate::config_dims!(
    /// The rank of low-rank adapters: the inner width of [`Lora`]'s two factors.
    LoraRank
);

/// The two factors of a low-rank update of a linear map `I → O`, stored as Hugging Face
/// PEFT stores them: `lora_a` is `A` `[rank, I]` (`lora_A.weight`), `lora_b` is `B`
/// `[O, rank]` (`lora_B.weight`). PEFT starts `A` random and `B` at zero, so an untrained
/// adapter changes nothing.
///
/// ```
/// use rlx::nn::{Lora, LoraRank, Projection};
/// use rlx::typed::{Const, Sizes, Tensor, build_with};
/// rlx::dims!(Batch);
///
/// #[derive(rlx::Params)]
/// struct Adapted<'g> {
///     base: Projection<'g, Const<16>, Const<8>>,
///     adapter: Lora<'g, Const<16>, Const<8>>,
/// }
///
/// let graph = build_with(&Sizes::new().with::<LoraRank>(4), |g| {
///     let p: Adapted = g.params();
///     let x: Tensor<(Batch, Const<16>)> = g.input("x");
///     g.output("y", p.base.forward(x) + p.adapter.forward(x, 2.0));
/// })?;
/// assert_eq!(graph.params().count(), 3);
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[derive(Params)]
pub struct Lora<'g, I: Dim, O: Dim, E: Float = f32> {
    /// `A`, `[rank, I]`: the first factor (PEFT's `lora_A.weight`).
    pub lora_a: Tensor<'g, (LoraRank, I), E>,
    /// `B`, `[O, rank]`: the second factor (PEFT's `lora_B.weight`).
    pub lora_b: Tensor<'g, (O, LoraRank), E>,
}

impl<'g, I: Dim, O: Dim, E: Float> Lora<'g, I, O, E> {
    /// The update `scale · x·Aᵀ·Bᵀ` along the last dim of `x`: two thin products through
    /// the rank, never the `[I, O]` matrix.
    #[track_caller]
    pub fn forward<S: LastDim<I>>(
        &self,
        x: Tensor<'g, S, E>,
        scale: f64,
    ) -> Tensor<'g, S::WithLast<O>, E> {
        let down: Tensor<'g, S::WithLast<LoraRank>, E> = x.project_t(self.lora_a);
        // `(.., rank) x (O, rank)ᵀ`: the shape is `S`'s with `O` last, which the types
        // cannot see through `WithLast` twice.
        let up: Tensor<'g, S::WithLast<O>, E> = down.product(self.lora_b.id(), true);
        up.with_scalar(BinaryOp::Mul, Scalar::Float(scale))
    }
}

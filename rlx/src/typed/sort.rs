//! Sorting and top-k along a typed axis.

use super::dim::Dim;
use super::element::{Float, Numeric};
use super::movement::Replace;
use super::shape::{HasAxis, Shape};
use super::tensor::Tensor;
use crate::ir::{Op, SortOutput};
use crate::ir::{Sort, TopK};

impl<'g, S: Shape, E: Numeric> Tensor<'g, S, E> {
    /// The `K` largest entries along axis `I`, largest first, ties in index order. `K` is a
    /// static or config dim; against a runtime axis it is checked when the graph runs.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let logits: Tensor<(Batch, Const<1000>)> = g.input("logits");
    ///     g.output("best", logits.topk::<1, Const<5>>());
    ///     g.output("best_ids", logits.topk_indices::<1, Const<5>>());
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn topk<const I: usize, K: Dim>(self) -> Tensor<'g, <S as Replace<I, K>>::Out, E>
    where
        S: Replace<I, K>,
    {
        self.top::<_, _, K>(I, SortOutput::Values)
    }

    /// The indices (`i64`) of [`topk`](Self::topk)'s entries.
    #[track_caller]
    pub fn topk_indices<const I: usize, K: Dim>(self) -> Tensor<'g, <S as Replace<I, K>>::Out, i64>
    where
        S: Replace<I, K>,
    {
        self.top::<_, _, K>(I, SortOutput::Indices)
    }

    #[track_caller]
    fn top<S2: Shape, E2: super::Element, K: Dim>(
        self,
        axis: usize,
        output: SortOutput,
    ) -> Tensor<'g, S2, E2> {
        let scope = self.scope();
        match scope.static_size("topk", self.id(), K::KIND, "count") {
            Some(k) => self.then(Op::TopK(TopK { k, axis, output }), &[]),
            None => Tensor::from_id(scope, None),
        }
    }

    /// Sorted along axis `I` (stable: equal entries keep their order).
    #[track_caller]
    pub fn sort<const I: usize>(self, descending: bool) -> Self
    where
        S: HasAxis<I>,
    {
        let op = Op::Sort(Sort {
            axis: I,
            descending,
            output: SortOutput::Values,
        });
        self.then(op, &[])
    }

    /// The indices (`i64`) that sort axis `I` (stable).
    #[track_caller]
    pub fn argsort<const I: usize>(self, descending: bool) -> Tensor<'g, S, i64>
    where
        S: HasAxis<I>,
    {
        let op = Op::Sort(Sort {
            axis: I,
            descending,
            output: SortOutput::Indices,
        });
        self.then(op, &[])
    }
}

/// The per-row settings of [`Tensor::sample_token`], each one value per row of logits.
/// Given as tensors (graph inputs, usually) so one compiled graph serves any mix of
/// settings across its rows and runs.
#[derive(Clone, Copy)]
pub struct SamplingSettings<'g, B: Dim, E: Float = f32> {
    /// A uniform draw in `[0, 1)` per row, from the caller's seeded generator.
    pub uniform: Tensor<'g, (B,), E>,
    /// `<= 0` takes the most likely token.
    pub temperature: Tensor<'g, (B,), E>,
    /// Keep the `top_k` most likely tokens (`<= 0`: all).
    pub top_k: Tensor<'g, (B,), i64>,
    /// Keep the shortest run of likeliest tokens holding `top_p` of the mass (`1`: all).
    pub top_p: Tensor<'g, (B,), E>,
    /// Keep tokens at least `min_p` times as likely as the top one (`0`: all).
    pub min_p: Tensor<'g, (B,), E>,
}

impl<'g, B: Dim, V: Dim, E: Float> Tensor<'g, (B, V), E> {
    /// One token per row drawn from these logits under `settings`
    /// ([`SampleToken`](crate::ir::SampleToken) says exactly how).
    ///
    /// ```
    /// use rlx::typed::{Const, SamplingSettings, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let logits: Tensor<(Batch, Const<1000>)> = g.input("logits");
    ///     let settings = SamplingSettings {
    ///         uniform: g.input("uniform"),
    ///         temperature: g.input("temperature"),
    ///         top_k: g.input("top_k"),
    ///         top_p: g.input("top_p"),
    ///         min_p: g.input("min_p"),
    ///     };
    ///     g.output("token", logits.sample_token(&settings));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn sample_token(self, settings: &SamplingSettings<'g, B, E>) -> Tensor<'g, (B,), i64> {
        let s = settings;
        self.then(
            Op::SampleToken(crate::ir::SampleToken),
            &[
                s.uniform.id(),
                s.temperature.id(),
                s.top_k.id(),
                s.top_p.id(),
                s.min_p.id(),
            ],
        )
    }
}

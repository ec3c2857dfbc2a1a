//! Sorting and top-k along a typed axis.

use super::dim::Dim;
use super::element::Numeric;
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

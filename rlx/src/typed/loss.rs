//! Losses: scalar results to minimize with [`crate::train`].

use super::dim::Dim;
use super::element::Float;
use super::movement::Index;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::ir::{self, BinaryOp, CompareOp, Op, ReduceOp, Scalar, UnaryOp};
use crate::ir::{Broadcast, Cast, Cumsum, Reduce, Reshape, Softmax};

impl<'g, B: Dim, C: Dim, E: Float> Tensor<'g, (B, C), E> {
    /// Mean cross-entropy of these logits `(B, C)` against class labels `(B,)` in `0..C`,
    /// as PyTorch's `cross_entropy` with mean reduction. Fused with a log-softmax, so it is
    /// stable for any logits. A label outside `0..C` matches no class and adds 0 to the
    /// sum (PyTorch raises an error instead).
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let logits: Tensor<(Batch, Const<10>)> = g.input("logits");
    ///     let labels: Tensor<(Batch,), i64> = g.input("labels");
    ///     g.output("loss", logits.cross_entropy(labels));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn cross_entropy<I: Index>(self, labels: Tensor<'g, (B,), I>) -> Tensor<'g, (), E> {
        let scope = self.scope();
        let Some((picked, _)) = self.picked_log_probs(labels) else {
            return Tensor::from_id(scope, None);
        };
        let per_row = scope.apply(sum(vec![1]), &[picked]);
        let mean = scope.apply(
            Op::Reduce(Reduce {
                op: ReduceOp::Mean,
                axes: vec![0],
                keep_dims: false,
            }),
            &[per_row],
        );
        Tensor::from_id(scope, scope.apply(Op::Unary(UnaryOp::Neg), &[mean]))
    }

    /// Mean cross-entropy over the rows whose label is in `0..C`; rows labelled outside
    /// (such as -100, PyTorch's `ignore_index`) count neither in the sum nor in the mean,
    /// as PyTorch's `cross_entropy` with `ignore_index` does. A language model's loss over
    /// the answer's tokens alone: the prompt's positions are labelled -100. With no row
    /// labelled the loss is 0.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Tokens);
    /// let graph = build(|g| {
    ///     let logits: Tensor<(Tokens, Const<10>)> = g.input("logits");
    ///     let labels: Tensor<(Tokens,), i64> = g.input("labels");
    ///     g.output("loss", logits.masked_cross_entropy(labels));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn masked_cross_entropy<I: Index>(self, labels: Tensor<'g, (B,), I>) -> Tensor<'g, (), E> {
        let scope = self.scope();
        let Some((picked, one_hot)) = self.picked_log_probs(labels) else {
            return Tensor::from_id(scope, None);
        };
        let total = scope.apply(sum(vec![0, 1]), &[picked]);
        let count = scope.apply(sum(vec![0, 1]), &[one_hot]);
        let one = scope.scalar(Scalar::Float(1.0), E::DTYPE);
        let count = scope.apply(Op::Binary(BinaryOp::Max), &[count, one]);
        let mean = scope.apply(Op::Binary(BinaryOp::Div), &[total, count]);
        Tensor::from_id(scope, scope.apply(Op::Unary(UnaryOp::Neg), &[mean]))
    }

    /// The log-probability of each row's label at its column (0 elsewhere, and in rows
    /// whose label is out of range), and the one-hot rows that pick them.
    #[track_caller]
    fn picked_log_probs<I: Index>(
        self,
        labels: Tensor<'g, (B,), I>,
    ) -> Option<(Option<ir::NodeId>, Option<ir::NodeId>)> {
        let scope = self.scope();
        let ty = self.id().and_then(|id| scope.ty(id))?;
        let (batch, classes) = (ty.shape[0].clone(), ty.shape[1].clone());
        let logp = scope.apply(Op::Softmax(Softmax { axis: 1, log: true }), &[self.id()]);
        // 0..C in the labels' dtype: an exclusive running sum of ones.
        let one = scope.scalar(Scalar::Int(1), I::DTYPE);
        let ones = scope.apply(
            Op::Broadcast(Broadcast {
                shape: ir::Shape::new([classes]),
            }),
            &[one],
        );
        let cumsum = Op::Cumsum(Cumsum {
            axis: 0,
            exclusive: true,
            reverse: false,
        });
        let class_ids = scope.apply(cumsum, &[ones]);
        let column = ir::Shape::new([batch, ir::Dim::Static(1)]);
        let labels = scope.apply(Op::Reshape(Reshape { shape: column }), &[labels.id()]);
        let hit = scope.apply(Op::Compare(CompareOp::Eq), &[labels, class_ids]);
        let one_hot = scope.apply(Op::Cast(Cast { to: E::DTYPE }), &[hit]);
        let picked = scope.apply(Op::Binary(BinaryOp::Mul), &[one_hot, logp]);
        Some((picked, one_hot))
    }
}

/// A sum over `axes`, dropping them.
fn sum(axes: Vec<usize>) -> Op {
    Op::Reduce(Reduce {
        op: ReduceOp::Sum,
        axes,
        keep_dims: false,
    })
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// Mean squared error against `target` of the same shape (PyTorch's `mse_loss`).
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let pred: Tensor<(Batch, Const<3>)> = g.input("pred");
    ///     let target: Tensor<(Batch, Const<3>)> = g.input("target");
    ///     g.output("loss", pred.mse(target));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn mse(self, target: Tensor<'g, S, E>) -> Tensor<'g, (), E> {
        let scope = self.scope();
        let diff = scope.apply(Op::Binary(BinaryOp::Sub), &[self.id(), target.id()]);
        let square = scope.apply(Op::Binary(BinaryOp::Mul), &[diff, diff]);
        let id = if S::RANK == 0 {
            square
        } else {
            let mean = Op::Reduce(Reduce {
                op: ReduceOp::Mean,
                axes: (0..S::RANK).collect(),
                keep_dims: false,
            });
            scope.apply(mean, &[square])
        };
        Tensor::from_id(scope, id)
    }
}

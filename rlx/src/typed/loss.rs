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
        let mean = scope.apply(
            Op::Reduce(Reduce {
                op: ReduceOp::Mean,
                axes: vec![0],
                keep_dims: false,
            }),
            &[picked],
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
        let Some((picked, labelled)) = self.picked_log_probs(labels) else {
            return Tensor::from_id(scope, None);
        };
        let total = scope.apply(sum(vec![0]), &[picked]);
        let count = scope.apply(sum(vec![0]), &[labelled]);
        let one = scope.scalar(Scalar::Float(1.0), E::DTYPE);
        let count = scope.apply(Op::Binary(BinaryOp::Max), &[count, one]);
        let mean = scope.apply(Op::Binary(BinaryOp::Div), &[total, count]);
        Tensor::from_id(scope, scope.apply(Op::Unary(UnaryOp::Neg), &[mean]))
    }

    /// The log-probability of each row's label (0 in rows whose label is outside `0..C`),
    /// and 1 where the label is in range, 0 elsewhere: both `(B,)`. The label's entry is
    /// gathered from the flattened log-probabilities (row · C + label), so no `(B, C)`
    /// one-hot matrix is made, nor kept for the backward pass.
    #[track_caller]
    fn picked_log_probs<I: Index>(
        self,
        labels: Tensor<'g, (B,), I>,
    ) -> Option<(Option<ir::NodeId>, Option<ir::NodeId>)> {
        let scope = self.scope();
        let ty = self.id().and_then(|id| scope.ty(id))?;
        let (batch, classes) = (ty.shape[0].clone(), ty.shape[1].clone());
        let logp = scope.apply(Op::Softmax(Softmax { axis: 1, log: true }), &[self.id()]);
        let flat = ir::Shape::new([ir::Dim::product(&[batch.clone(), classes.clone()])]);
        let flat = scope.apply(Op::Reshape(Reshape { shape: flat }), &[logp]);
        // Indices in i64 whatever the labels' dtype: row · C overflows i32 on large batches.
        let i64 = ir::DType::I64;
        let labels = scope.apply(Op::Cast(Cast { to: i64 }), &[labels.id()]);
        let one = scope.scalar(Scalar::Int(1), i64);
        let count = |dim: ir::Dim| match dim.as_static() {
            Some(n) => scope.scalar(Scalar::Int(n as i64), i64),
            None => {
                let ones = scope.apply(
                    Op::Broadcast(Broadcast {
                        shape: ir::Shape::new([dim]),
                    }),
                    &[one],
                );
                scope.apply(sum(vec![0]), &[ones])
            }
        };
        let classes = count(classes);
        // The label clamped into 0..C; in range where clamping left it unchanged.
        let zero = scope.scalar(Scalar::Int(0), i64);
        let last = scope.apply(Op::Binary(BinaryOp::Sub), &[classes, one]);
        let clamped = scope.apply(Op::Binary(BinaryOp::Max), &[labels, zero]);
        let clamped = scope.apply(Op::Binary(BinaryOp::Min), &[clamped, last]);
        let in_range = scope.apply(Op::Compare(CompareOp::Eq), &[clamped, labels]);
        // Row offsets 0, C, 2C, …: an exclusive running sum of ones, times C.
        let ones = scope.apply(
            Op::Broadcast(Broadcast {
                shape: ir::Shape::new([batch]),
            }),
            &[one],
        );
        let cumsum = Op::Cumsum(Cumsum {
            axis: 0,
            exclusive: true,
            reverse: false,
        });
        let rows = scope.apply(cumsum, &[ones]);
        let offsets = scope.apply(Op::Binary(BinaryOp::Mul), &[rows, classes]);
        let index = scope.apply(Op::Binary(BinaryOp::Add), &[offsets, clamped]);
        let gathered = scope.apply(Op::Gather(ir::Gather { axis: 0 }), &[flat, index]);
        let labelled = scope.apply(Op::Cast(Cast { to: E::DTYPE }), &[in_range]);
        let picked = scope.apply(Op::Binary(BinaryOp::Mul), &[gathered, labelled]);
        Some((picked, labelled))
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

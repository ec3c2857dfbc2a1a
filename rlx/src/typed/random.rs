//! Seeded randomness in typed code: dropout.

use super::element::Float;
use super::scope::Scope;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::ir::{BinaryOp, CompareOp, DType, NodeId, Op, RandomUniform, Scalar};

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// Inverted dropout: each element zeroed with probability `p`, the others scaled by
    /// `1 / (1 − p)`, so the expected value is unchanged. The mask is a pure function of
    /// `seed` and `stream` ([`RandomUniform`]): pass a new seed each training step, and
    /// give each dropout site of a model its own stream. `p` outside `[0, 1)` is a build
    /// error; `p = 0` is `self`.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let x: Tensor<(Const<4>, Const<8>)> = g.input("x");
    ///     let seed: Tensor<(), i64> = g.input("seed");
    ///     g.output("y", x.dropout(0.1, seed, 0));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn dropout(self, p: f64, seed: Tensor<'g, (), i64>, stream: u32) -> Self {
        let id = dropout(self.scope(), self.id(), p, seed.id(), stream);
        Tensor::from_id(self.scope(), id)
    }
}

#[track_caller]
fn dropout(
    g: &Scope<'_>,
    x: Option<NodeId>,
    p: f64,
    seed: Option<NodeId>,
    stream: u32,
) -> Option<NodeId> {
    if !(0.0..1.0).contains(&p) {
        return g.reject(
            "dropout",
            x,
            format!("the dropout probability must be in [0, 1), got {p}"),
        );
    }
    if p == 0.0 {
        return x;
    }
    let ty = g.ty(x?)?;
    let draw = Op::RandomUniform(RandomUniform {
        shape: ty.shape.clone(),
        stream,
    });
    let u = g.apply(draw, &[seed])?;
    let threshold = g.scalar(Scalar::Float(p), DType::F32);
    let keep = g.apply(Op::Compare(CompareOp::Ge), &[Some(u), threshold]);
    let factor = g.scalar(Scalar::Float(1.0 / (1.0 - p)), ty.dtype);
    let scaled = g.apply(Op::Binary(BinaryOp::Mul), &[x, factor]);
    let zero = g.scalar(Scalar::Float(0.0), ty.dtype);
    g.apply(Op::Where, &[keep, scaled, zero])
}

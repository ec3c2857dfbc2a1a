//! `Tensor<'g, S, E>`: a typed handle to a node of the graph being built.
//!
//! Every method is a thin generic shell over one non-generic call into the [`Scope`], so
//! models compile quickly however many shapes they use.

use std::marker::PhantomData;
use std::ops::{Add, Div, Mul, Neg, Sub};

use super::dim::Dim;
use super::element::{Element, Float, Numeric};
use super::scope::Scope;
use super::shape::{HasAxis, RemoveAxis, Shape, SuffixOf};
use crate::ir::{ArgReduceOp, BinaryOp, NodeId, Op, ReduceOp, Scalar, UnaryOp};

/// A handle to a tensor of shape `S` and element type `E` in the graph `'g`. `Copy`:
/// pass it around freely; it cannot outlive or leave its graph.
pub struct Tensor<'g, S: Shape, E: Element = f32> {
    scope: &'g Scope<'g>,
    /// `None` when the op that made it was rejected (the error is already recorded).
    id: Option<NodeId>,
    _type: PhantomData<(S, E)>,
}

impl<S: Shape, E: Element> Clone for Tensor<'_, S, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S: Shape, E: Element> Copy for Tensor<'_, S, E> {}

impl<'g, S: Shape, E: Element> Tensor<'g, S, E> {
    pub(crate) fn from_id(scope: &'g Scope<'g>, id: Option<NodeId>) -> Self {
        Tensor {
            scope,
            id,
            _type: PhantomData,
        }
    }

    /// The node, or `None` if the op that made this handle was rejected.
    pub fn id(&self) -> Option<NodeId> {
        self.id
    }

    #[track_caller]
    fn then<S2: Shape, E2: Element>(self, op: Op, others: &[Option<NodeId>]) -> Tensor<'g, S2, E2> {
        let mut inputs = Vec::with_capacity(1 + others.len());
        inputs.push(self.id);
        inputs.extend_from_slice(others);
        Tensor::from_id(self.scope, self.scope.apply(op, &inputs))
    }

    /// The same data with element type `E2`.
    #[track_caller]
    pub fn cast<E2: Element>(self) -> Tensor<'g, S, E2> {
        self.then(Op::Cast { to: E2::DTYPE }, &[])
    }

    /// The same elements in shape `S2`. The element counts must match; that is checked when
    /// the graph is built (it needs arithmetic on dims), and reported with this call's line.
    #[track_caller]
    pub fn reshape<S2: Shape>(self) -> Tensor<'g, S2, E> {
        self.then(Op::Reshape { shape: S2::ir() }, &[])
    }

    #[track_caller]
    fn with_scalar(self, kind: BinaryOp, value: Scalar) -> Tensor<'g, S, E> {
        let c = self.scope.scalar(value, E::DTYPE);
        self.then(Op::Binary(kind), &[c])
    }
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    #[track_caller]
    fn unary(self, kind: UnaryOp) -> Self {
        self.then(Op::Unary(kind), &[])
    }

    /// `e^x`.
    #[track_caller]
    pub fn exp(self) -> Self {
        self.unary(UnaryOp::Exp)
    }

    /// Natural logarithm.
    #[track_caller]
    pub fn log(self) -> Self {
        self.unary(UnaryOp::Log)
    }

    /// Square root.
    #[track_caller]
    pub fn sqrt(self) -> Self {
        self.unary(UnaryOp::Sqrt)
    }

    /// `tanh(x)`.
    #[track_caller]
    pub fn tanh(self) -> Self {
        self.unary(UnaryOp::Tanh)
    }

    /// Logistic sigmoid.
    #[track_caller]
    pub fn sigmoid(self) -> Self {
        self.unary(UnaryOp::Sigmoid)
    }

    /// `max(x, 0)`.
    #[track_caller]
    pub fn relu(self) -> Self {
        self.unary(UnaryOp::Relu)
    }

    /// GELU, exact (erf) form.
    #[track_caller]
    pub fn gelu(self) -> Self {
        self.unary(UnaryOp::Gelu)
    }

    /// SiLU (`x * sigmoid(x)`).
    #[track_caller]
    pub fn silu(self) -> Self {
        self.unary(UnaryOp::Silu)
    }

    /// Softmax along axis `I`.
    #[track_caller]
    pub fn softmax<const I: usize>(self) -> Self
    where
        S: HasAxis<I>,
    {
        self.then(
            Op::Softmax {
                axis: I,
                log: false,
            },
            &[],
        )
    }

    /// Mean over axis `I`, which disappears from the shape.
    #[track_caller]
    pub fn mean<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, E>
    where
        S: RemoveAxis<I>,
    {
        self.reduce(ReduceOp::Mean, I, false)
    }
}

impl<'g, S: Shape, E: Numeric> Tensor<'g, S, E> {
    #[track_caller]
    fn reduce<S2: Shape>(self, op: ReduceOp, axis: usize, keep_dims: bool) -> Tensor<'g, S2, E> {
        self.then(
            Op::Reduce {
                op,
                axes: vec![axis],
                keep_dims,
            },
            &[],
        )
    }

    /// Sum over axis `I`, which disappears from the shape.
    #[track_caller]
    pub fn sum<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, E>
    where
        S: RemoveAxis<I>,
    {
        self.reduce(ReduceOp::Sum, I, false)
    }

    /// Sum over axis `I`, kept as size 1.
    #[track_caller]
    pub fn sum_keepdim<const I: usize>(self) -> Tensor<'g, <S as HasAxis<I>>::Kept, E>
    where
        S: HasAxis<I>,
    {
        self.reduce(ReduceOp::Sum, I, true)
    }

    /// Maximum over axis `I`, which disappears from the shape.
    #[track_caller]
    pub fn max<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, E>
    where
        S: RemoveAxis<I>,
    {
        self.reduce(ReduceOp::Max, I, false)
    }

    /// Index of the first maximum along axis `I`, as `i64`.
    #[track_caller]
    pub fn argmax<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, i64>
    where
        S: RemoveAxis<I>,
    {
        self.then(
            Op::ArgReduce {
                op: ArgReduceOp::ArgMax,
                axis: I,
                keep_dims: false,
            },
            &[],
        )
    }
}

impl<'g, M: Dim, K: Dim, E: Float> Tensor<'g, (M, K), E> {
    /// `(M, K) x (K, N) -> (M, N)`. The inner dims must be the same type: a mismatch is a
    /// compile error at the argument ("expected `784`, found `785`").
    #[track_caller]
    pub fn matmul<N: Dim>(self, rhs: Tensor<'g, (K, N), E>) -> Tensor<'g, (M, N), E> {
        self.then(
            Op::MatMul {
                transpose_a: false,
                transpose_b: false,
            },
            &[rhs.id],
        )
    }

    /// `(M, K) x (N, K)ᵀ -> (M, N)`: PyTorch `Linear` weights, read without a copy.
    #[track_caller]
    pub fn matmul_t<N: Dim>(self, rhs: Tensor<'g, (N, K), E>) -> Tensor<'g, (M, N), E> {
        self.then(
            Op::MatMul {
                transpose_a: false,
                transpose_b: true,
            },
            &[rhs.id],
        )
    }

    /// The transpose.
    #[track_caller]
    pub fn t(self) -> Tensor<'g, (K, M), E> {
        self.then(Op::Permute { perm: vec![1, 0] }, &[])
    }
}

impl<'g, B: Dim, M: Dim, K: Dim, E: Float> Tensor<'g, (B, M, K), E> {
    /// Batched `(B, M, K) x (B, K, N) -> (B, M, N)`.
    #[track_caller]
    pub fn matmul<N: Dim>(self, rhs: Tensor<'g, (B, K, N), E>) -> Tensor<'g, (B, M, N), E> {
        self.then(
            Op::MatMul {
                transpose_a: false,
                transpose_b: false,
            },
            &[rhs.id],
        )
    }

    /// `(B, M, K) x (K, N) -> (B, M, N)`: one matrix applied to every batch entry.
    #[track_caller]
    pub fn matmul_shared<N: Dim>(self, rhs: Tensor<'g, (K, N), E>) -> Tensor<'g, (B, M, N), E> {
        self.then(
            Op::MatMul {
                transpose_a: false,
                transpose_b: false,
            },
            &[rhs.id],
        )
    }
}

macro_rules! arithmetic {
    ($tr:ident, $method:ident, $kind:expr) => {
        /// Elementwise, with `rhs` broadcast along the trailing dims (`(B, N)` with `(N,)`).
        impl<'g, S: Shape, R: Shape, E: Numeric, E2: Element> $tr<Tensor<'g, R, E2>>
            for Tensor<'g, S, E>
        where
            S: Broadcasts<R>,
            E: SameElement<E2>,
        {
            type Output = Tensor<'g, S, E>;
            #[track_caller]
            fn $method(self, rhs: Tensor<'g, R, E2>) -> Self::Output {
                self.then(Op::Binary($kind), &[rhs.id])
            }
        }

        /// Elementwise with a scalar of the element type.
        impl<'g, S: Shape, E: Numeric + Into<Scalar>> $tr<E> for Tensor<'g, S, E> {
            type Output = Tensor<'g, S, E>;
            #[track_caller]
            fn $method(self, rhs: E) -> Self::Output {
                self.with_scalar($kind, rhs.into())
            }
        }
    };
}

arithmetic!(Add, add, BinaryOp::Add);
arithmetic!(Sub, sub, BinaryOp::Sub);
arithmetic!(Mul, mul, BinaryOp::Mul);
arithmetic!(Div, div, BinaryOp::Div);

impl<'g, S: Shape, E: Numeric> Neg for Tensor<'g, S, E> {
    type Output = Self;
    #[track_caller]
    fn neg(self) -> Self {
        self.then(Op::Unary(UnaryOp::Neg), &[])
    }
}

/// Operands of one elementwise op share an element type: there is no implicit promotion.
#[diagnostic::on_unimplemented(
    message = "cannot combine `{Self}` and `{E2}` elements",
    label = "`{E2}` operand with a `{Self}` tensor",
    note = "RLX never converts implicitly; cast one side, e.g. `.cast::<{Self}>()`"
)]
pub trait SameElement<E2>: Element {}

#[diagnostic::do_not_recommend]
impl<E: Element> SameElement<E> for E {}

/// Right-hand shapes an elementwise op accepts: the same shape, or a trailing suffix.
#[diagnostic::on_unimplemented(
    message = "cannot combine `{Self}` with `{R}` elementwise",
    label = "`{R}` is neither `{Self}` nor a trailing part of it",
    note = "typed broadcasting matches trailing dims only, e.g. `(Batch, N) + (N,)`"
)]
pub trait Broadcasts<R: Shape>: Shape {}

#[diagnostic::do_not_recommend]
impl<S: Shape> Broadcasts<S> for S {}

macro_rules! broadcast_suffix {
    (($($d:ident),*) : ($($s:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> Broadcasts<($($s,)*)> for ($($d,)*) where ($($d,)*): SuffixOf<($($s,)*)> {}
    };
}

broadcast_suffix!((A, B) : (B));
broadcast_suffix!((A, B, C) : (C));
broadcast_suffix!((A, B, C) : (B, C));
broadcast_suffix!((A, B, C, D) : (D));
broadcast_suffix!((A, B, C, D) : (C, D));
broadcast_suffix!((A, B, C, D) : (B, C, D));

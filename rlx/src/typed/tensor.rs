//! `Tensor<'g, S, E>`: a typed handle to a node of the graph being built.
//!
//! Every method is a thin generic shell over one non-generic call into the [`Scope`], so
//! models compile quickly however many shapes they use.

use crate::ir::{ArgReduce, Cast, Cumsum, LinearScan, Reduce};
use std::marker::PhantomData;
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};

use super::dim::{Const, Dim};
use super::element::{Element, Float, Numeric};
use super::movement::Replace;
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

    /// The graph this handle belongs to.
    pub fn scope(&self) -> &'g Scope<'g> {
        self.scope
    }

    /// The node, or `None` if the op that made this handle was rejected.
    pub fn id(&self) -> Option<NodeId> {
        self.id
    }

    #[track_caller]
    pub(super) fn then<S2: Shape, E2: Element>(
        self,
        op: Op,
        others: &[Option<NodeId>],
    ) -> Tensor<'g, S2, E2> {
        let mut inputs = Vec::with_capacity(1 + others.len());
        inputs.push(self.id);
        inputs.extend_from_slice(others);
        Tensor::from_id(self.scope, self.scope.apply(op, &inputs))
    }

    /// The same values, with no gradient flowing back through them when the graph is
    /// differentiated ([`crate::autodiff`]): PyTorch's `detach`.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let x: Tensor<(Const<3>,)> = g.input("x");
    ///     g.output("y", x * x.detach());
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn detach(self) -> Self {
        self.then(Op::StopGradient, &[])
    }

    /// The same values, marked as a checkpoint ([`Op::Checkpoint`]): a training graph
    /// that recomputes activations ([`TrainConfig::recompute_activations`](crate::train::TrainConfig::recompute_activations))
    /// keeps this value and computes the values before it again in the backward pass.
    /// Models mark the outputs of their repeated blocks (each decoder layer's).
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let x: Tensor<(Const<3>,)> = g.input("x");
    ///     let h = x.tanh().checkpoint();
    ///     g.output("y", h * h);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn checkpoint(self) -> Self {
        self.then(Op::Checkpoint, &[])
    }

    /// The same data with element type `E2`.
    #[track_caller]
    pub fn cast<E2: Element>(self) -> Tensor<'g, S, E2> {
        self.then(Op::Cast(Cast { to: E2::DTYPE }), &[])
    }

    #[track_caller]
    pub(crate) fn with_scalar(self, kind: BinaryOp, value: Scalar) -> Tensor<'g, S, E> {
        let c = self.scope.scalar(value, E::DTYPE);
        self.then(Op::Binary(kind), &[c])
    }
}

/// Float methods that apply one [`UnaryOp`] elementwise.
macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $kind:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(self) -> Self {
            self.unary(UnaryOp::$kind)
        }
    )*};
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    #[track_caller]
    fn unary(self, kind: UnaryOp) -> Self {
        self.then(Op::Unary(kind), &[])
    }

    unary_methods! {
        /// `e^x`.
        exp => Exp,
        /// Natural logarithm.
        log => Log,
        /// Square root.
        sqrt => Sqrt,
        /// `1 / sqrt(x)`.
        rsqrt => Rsqrt,
        /// `tanh(x)`.
        tanh => Tanh,
        /// Logistic sigmoid.
        sigmoid => Sigmoid,
        /// `1 / x`.
        recip => Recip,
        /// Sine.
        sin => Sin,
        /// Cosine.
        cos => Cos,
        /// The error function.
        erf => Erf,
        /// Rounds down.
        floor => Floor,
        /// Rounds up.
        ceil => Ceil,
        /// Rounds to the nearest integer, ties to even.
        round => Round,
        /// `ln(1 + e^x)`.
        softplus => Softplus,
        /// GELU, exact (erf) form.
        gelu => Gelu,
        /// GELU, tanh approximation.
        gelu_tanh => GeluTanh,
        /// SiLU (`x * sigmoid(x)`).
        silu => Silu,
    }

    /// Softmax along axis `I`.
    #[track_caller]
    pub fn softmax<const I: usize>(self) -> Self
    where
        S: HasAxis<I>,
    {
        self.then(
            Op::Softmax(crate::ir::Softmax {
                axis: I,
                log: false,
            }),
            &[],
        )
    }

    /// Log-softmax along axis `I` (computed in one pass, not as `softmax().log()`).
    #[track_caller]
    pub fn log_softmax<const I: usize>(self) -> Self
    where
        S: HasAxis<I>,
    {
        self.then(Op::Softmax(crate::ir::Softmax { axis: I, log: true }), &[])
    }

    /// `self ^ rhs` elementwise, `rhs` broadcast along the trailing dims.
    #[track_caller]
    pub fn pow<R: Shape>(self, rhs: Tensor<'g, R, E>) -> Self
    where
        S: Broadcasts<R>,
    {
        self.then(Op::Binary(BinaryOp::Pow), &[rhs.id])
    }

    /// Mean over axis `I`, kept as size 1.
    #[track_caller]
    pub fn mean_keepdim<const I: usize>(self) -> Tensor<'g, <S as HasAxis<I>>::Kept, E>
    where
        S: HasAxis<I>,
    {
        self.reduce(ReduceOp::Mean, I, true)
    }

    /// Mean over axis `I`, which disappears from the shape.
    #[track_caller]
    pub fn mean<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, E>
    where
        S: RemoveAxis<I>,
    {
        self.reduce(ReduceOp::Mean, I, false)
    }

    /// The linear recurrence `h_t = self_t · h_{t-1} + b_t` along axis `I` from a zero
    /// state ([`LinearScan`]): `self` holds the decays, `b` the inputs. The scan
    /// state-space layers are built on; [`linear_scan_from`](Self::linear_scan_from) starts
    /// from a given state.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let decay: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("decay");
    ///     let x: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("x");
    ///     g.output("h", decay.linear_scan::<1>(x));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn linear_scan<const I: usize>(self, b: Self) -> Self
    where
        S: HasAxis<I>,
    {
        self.then(
            Op::LinearScan(LinearScan {
                axis: I,
                reverse: false,
            }),
            &[b.id()],
        )
    }

    /// [`linear_scan`](Self::linear_scan) from the state `start` before the first step
    /// (`self`'s shape with axis `I` of length 1): a recurrence continued from an earlier
    /// chunk.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let decay: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("decay");
    ///     let x: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("x");
    ///     let h0: Tensor<(Const<2>, Const<1>, Const<8>)> = g.input("h0");
    ///     g.output("h", decay.linear_scan_from::<1>(x, h0));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn linear_scan_from<const I: usize>(
        self,
        b: Self,
        start: Tensor<'g, <S as Replace<I, Const<1>>>::Out, E>,
    ) -> Self
    where
        S: HasAxis<I> + Replace<I, Const<1>>,
    {
        self.then(
            Op::LinearScan(LinearScan {
                axis: I,
                reverse: false,
            }),
            &[b.id(), start.id()],
        )
    }
}

impl<'g, S: Shape, E: Numeric> Tensor<'g, S, E> {
    #[track_caller]
    fn reduce<S2: Shape>(self, op: ReduceOp, axis: usize, keep_dims: bool) -> Tensor<'g, S2, E> {
        self.then(
            Op::Reduce(Reduce {
                op,
                axes: vec![axis],
                keep_dims,
            }),
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

    /// Running sum along axis `I` (`[1, 2, 3] -> [1, 3, 6]`).
    #[track_caller]
    pub fn cumsum<const I: usize>(self) -> Self
    where
        S: HasAxis<I>,
    {
        self.then(
            Op::Cumsum(Cumsum {
                axis: I,
                exclusive: false,
                reverse: false,
            }),
            &[],
        )
    }

    /// `max(x, floor)` elementwise.
    #[track_caller]
    pub fn clamp_min(self, floor: E) -> Self
    where
        E: Into<Scalar>,
    {
        self.with_scalar(BinaryOp::Max, floor.into())
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

    /// Maximum over axis `I`, kept as size 1.
    #[track_caller]
    pub fn max_keepdim<const I: usize>(self) -> Tensor<'g, <S as HasAxis<I>>::Kept, E>
    where
        S: HasAxis<I>,
    {
        self.reduce(ReduceOp::Max, I, true)
    }

    /// Minimum over axis `I`, which disappears from the shape.
    #[track_caller]
    pub fn min<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, E>
    where
        S: RemoveAxis<I>,
    {
        self.reduce(ReduceOp::Min, I, false)
    }

    /// Product over axis `I`, which disappears from the shape.
    #[track_caller]
    pub fn prod<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, E>
    where
        S: RemoveAxis<I>,
    {
        self.reduce(ReduceOp::Prod, I, false)
    }

    /// Index of the first maximum along axis `I`, as `i64`.
    #[track_caller]
    pub fn argmax<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, i64>
    where
        S: RemoveAxis<I>,
    {
        self.arg_reduce(ArgReduceOp::ArgMax, I)
    }

    /// Index of the first minimum along axis `I`, as `i64`.
    #[track_caller]
    pub fn argmin<const I: usize>(self) -> Tensor<'g, <S as RemoveAxis<I>>::Out, i64>
    where
        S: RemoveAxis<I>,
    {
        self.arg_reduce(ArgReduceOp::ArgMin, I)
    }

    #[track_caller]
    fn arg_reduce<S2: Shape>(self, op: ArgReduceOp, axis: usize) -> Tensor<'g, S2, i64> {
        let op = Op::ArgReduce(ArgReduce {
            op,
            axis,
            keep_dims: false,
        });
        self.then(op, &[])
    }

    /// `|x|`.
    #[track_caller]
    pub fn abs(self) -> Self {
        self.then(Op::Unary(UnaryOp::Abs), &[])
    }

    /// `-1`, `0` or `1` by the sign of `x`.
    #[track_caller]
    pub fn sign(self) -> Self {
        self.then(Op::Unary(UnaryOp::Sign), &[])
    }

    /// `max(x, 0)`.
    #[track_caller]
    pub fn relu(self) -> Self {
        self.then(Op::Unary(UnaryOp::Relu), &[])
    }

    /// The larger of `self` and `rhs` elementwise (NaN wins), `rhs` broadcast along the
    /// trailing dims.
    #[track_caller]
    pub fn maximum<R: Shape>(self, rhs: Tensor<'g, R, E>) -> Self
    where
        S: Broadcasts<R>,
    {
        self.then(Op::Binary(BinaryOp::Max), &[rhs.id])
    }

    /// The smaller of `self` and `rhs` elementwise (NaN wins), `rhs` broadcast along the
    /// trailing dims.
    #[track_caller]
    pub fn minimum<R: Shape>(self, rhs: Tensor<'g, R, E>) -> Self
    where
        S: Broadcasts<R>,
    {
        self.then(Op::Binary(BinaryOp::Min), &[rhs.id])
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
arithmetic!(Rem, rem, BinaryOp::Rem);

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

broadcast_suffix!((A) : ());
broadcast_suffix!((A, B) : ());
broadcast_suffix!((A, B, C) : ());
broadcast_suffix!((A, B, C, D) : ());
broadcast_suffix!((A, B) : (B));
broadcast_suffix!((A, B, C) : (C));
broadcast_suffix!((A, B, C) : (B, C));
broadcast_suffix!((A, B, C, D) : (D));
broadcast_suffix!((A, B, C, D) : (C, D));
broadcast_suffix!((A, B, C, D) : (B, C, D));

/// A tensor whose last dim is `N`: what norms, biases and projections attach to.
#[diagnostic::on_unimplemented(
    message = "the last dim of `{Self}` is not `{N}`",
    label = "expected a tensor ending in `{N}`"
)]
pub trait LastDim<N: Dim>: Shape {
    /// The same shape with the last dim replaced by `M`.
    type WithLast<M: Dim>: Shape + LastDim<M>;
}

macro_rules! last_dim {
    ($($d:ident),* ; $n:ident) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim,)* $n: Dim> LastDim<$n> for ($($d,)* $n,) {
            type WithLast<M: Dim> = ($($d,)* M,);
        }
    };
}

last_dim!(; N);
last_dim!(A; N);
last_dim!(A, B; N);
last_dim!(A, B, C; N);
last_dim!(A, B, C, D; N);

impl<'g, S: Shape, E: Numeric> Tensor<'g, S, E> {
    /// Adds `bias` along the last dim (any rank).
    #[track_caller]
    pub fn add_bias<N: Dim>(self, bias: Tensor<'g, (N,), E>) -> Self
    where
        S: LastDim<N>,
    {
        self.then(Op::Binary(BinaryOp::Add), &[bias.id])
    }
}

impl<'g, S: Shape, E: Element> Tensor<'g, S, E> {
    #[track_caller]
    fn compare(self, kind: crate::ir::CompareOp, rhs: Self) -> Tensor<'g, S, bool> {
        self.then(Op::Compare(kind), &[rhs.id])
    }

    /// `self == rhs` elementwise.
    #[track_caller]
    pub fn eq(self, rhs: Self) -> Tensor<'g, S, bool> {
        self.compare(crate::ir::CompareOp::Eq, rhs)
    }

    /// `self < rhs` elementwise.
    #[track_caller]
    pub fn lt(self, rhs: Self) -> Tensor<'g, S, bool> {
        self.compare(crate::ir::CompareOp::Lt, rhs)
    }

    /// `self > rhs` elementwise.
    #[track_caller]
    pub fn gt(self, rhs: Self) -> Tensor<'g, S, bool> {
        self.compare(crate::ir::CompareOp::Gt, rhs)
    }

    /// `self != rhs` elementwise.
    #[track_caller]
    pub fn ne(self, rhs: Self) -> Tensor<'g, S, bool> {
        self.compare(crate::ir::CompareOp::Ne, rhs)
    }

    /// `self <= rhs` elementwise.
    #[track_caller]
    pub fn le(self, rhs: Self) -> Tensor<'g, S, bool> {
        self.compare(crate::ir::CompareOp::Le, rhs)
    }

    /// `self >= rhs` elementwise.
    #[track_caller]
    pub fn ge(self, rhs: Self) -> Tensor<'g, S, bool> {
        self.compare(crate::ir::CompareOp::Ge, rhs)
    }
}

impl<'g, S: Shape> Tensor<'g, S, bool> {
    /// `self ? a : b` elementwise.
    #[track_caller]
    pub fn select<E: Element>(self, a: Tensor<'g, S, E>, b: Tensor<'g, S, E>) -> Tensor<'g, S, E> {
        self.then(Op::Where, &[a.id, b.id])
    }
}

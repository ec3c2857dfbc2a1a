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
use crate::ir::{ArgReduceOp, AttentionMask, BinaryOp, NodeId, Op, ReduceOp, Scalar, UnaryOp};

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
    fn then<S2: Shape, E2: Element>(self, op: Op, others: &[Option<NodeId>]) -> Tensor<'g, S2, E2> {
        let mut inputs = Vec::with_capacity(1 + others.len());
        inputs.push(self.id);
        inputs.extend_from_slice(others);
        Tensor::from_id(self.scope, self.scope.apply(op, &inputs))
    }

    /// A matrix product with `rhs` (stored transposed when `transpose_b`); the result type
    /// is fixed by the typed method that calls this.
    #[track_caller]
    fn product<S2: Shape>(self, rhs: Option<NodeId>, transpose_b: bool) -> Tensor<'g, S2, E> {
        let op = Op::MatMul {
            transpose_a: false,
            transpose_b,
        };
        self.then(op, &[rhs])
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
        match self.scope.shape(S2::DIMS) {
            Some(shape) => self.then(Op::Reshape { shape }, &[]),
            None => Tensor::from_id(self.scope, None),
        }
    }

    /// The same values repeated to shape `S2` (numpy rules: dims of size 1 stretch, leading
    /// dims are added). Checked when the graph is built.
    #[track_caller]
    pub fn broadcast<S2: Shape>(self) -> Tensor<'g, S2, E> {
        match self.scope.shape(S2::DIMS) {
            Some(shape) => self.then(Op::Broadcast { shape }, &[]),
            None => Tensor::from_id(self.scope, None),
        }
    }

    #[track_caller]
    fn with_scalar(self, kind: BinaryOp, value: Scalar) -> Tensor<'g, S, E> {
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
        /// `max(x, 0)`.
        relu => Relu,
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

    /// Running sum along axis `I` (`[1, 2, 3] -> [1, 3, 6]`).
    #[track_caller]
    pub fn cumsum<const I: usize>(self) -> Self
    where
        S: HasAxis<I>,
    {
        self.then(
            Op::Cumsum {
                axis: I,
                exclusive: false,
                reverse: false,
            },
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
        self.product(rhs.id, false)
    }

    /// `(M, K) x (N, K)ᵀ -> (M, N)`: PyTorch `Linear` weights, read without a copy.
    #[track_caller]
    pub fn matmul_t<N: Dim>(self, rhs: Tensor<'g, (N, K), E>) -> Tensor<'g, (M, N), E> {
        self.product(rhs.id, true)
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
        self.product(rhs.id, false)
    }

    /// `(B, M, K) x (K, N) -> (B, M, N)`: one matrix applied to every batch entry.
    #[track_caller]
    pub fn matmul_shared<N: Dim>(self, rhs: Tensor<'g, (K, N), E>) -> Tensor<'g, (B, M, N), E> {
        self.product(rhs.id, false)
    }
}

impl<'g, B: Dim, M: Dim, K: Dim, E: Float> Tensor<'g, (B, M, K), E> {
    /// `(B, M, K) x (N, K)ᵀ -> (B, M, N)`: a PyTorch `Linear` weight applied to every batch
    /// entry, read without a copy.
    #[track_caller]
    pub fn matmul_t_shared<N: Dim>(self, rhs: Tensor<'g, (N, K), E>) -> Tensor<'g, (B, M, N), E> {
        self.product(rhs.id, true)
    }
}

impl<'g, B: Dim, H: Dim, M: Dim, K: Dim, E: Float> Tensor<'g, (B, H, M, K), E> {
    /// Batched `(B, H, M, K) x (B, H, K, N) -> (B, H, M, N)` (attention weights times values).
    #[track_caller]
    pub fn matmul<N: Dim>(self, rhs: Tensor<'g, (B, H, K, N), E>) -> Tensor<'g, (B, H, M, N), E> {
        self.product(rhs.id, false)
    }

    /// Batched `(B, H, M, K) x (B, H, N, K)ᵀ -> (B, H, M, N)` (queries times keys), without
    /// transposing the keys.
    #[track_caller]
    pub fn matmul_t<N: Dim>(self, rhs: Tensor<'g, (B, H, N, K), E>) -> Tensor<'g, (B, H, M, N), E> {
        self.product(rhs.id, true)
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

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// `(.., K) x (K, N) -> (.., N)`: one matrix applied along the last dim, whatever the
    /// leading dims (what a linear layer does).
    #[track_caller]
    pub fn project<K: Dim, N: Dim>(
        self,
        weight: Tensor<'g, (K, N), E>,
    ) -> Tensor<'g, <S as LastDim<K>>::WithLast<N>, E>
    where
        S: LastDim<K>,
    {
        self.product(weight.id, false)
    }

    /// `(.., K) x (N, K)ᵀ -> (.., N)`: like [`project`](Self::project) with a weight stored
    /// `[out, in]`, read without a copy.
    #[track_caller]
    pub fn project_t<K: Dim, N: Dim>(
        self,
        weight: Tensor<'g, (N, K), E>,
    ) -> Tensor<'g, <S as LastDim<K>>::WithLast<N>, E>
    where
        S: LastDim<K>,
    {
        self.product(weight.id, true)
    }
}

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

impl<'g, B: Dim, H: Dim, Q: Dim, D: Dim, E: Float> Tensor<'g, (B, H, Q, D), E> {
    /// Scaled dot-product attention of these queries over `keys` and `values`, every query
    /// seeing every key: `softmax(q kᵀ · scale) v`, fused.
    #[track_caller]
    pub fn attention<K: Dim, V: Dim>(
        self,
        keys: Tensor<'g, (B, H, K, D), E>,
        values: Tensor<'g, (B, H, K, V), E>,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(AttentionMask::None, scale, &[keys.id, values.id])
    }

    /// Causal attention: query `i` sees keys `0..=i`.
    #[track_caller]
    pub fn attention_causal<K: Dim, V: Dim>(
        self,
        keys: Tensor<'g, (B, H, K, D), E>,
        values: Tensor<'g, (B, H, K, V), E>,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(AttentionMask::Causal, scale, &[keys.id, values.id])
    }

    /// Attention where query `i` of batch entry `b` sees key `j` only if
    /// `mask[b, j]` is true (the key-padding mask of right-padded batches).
    #[track_caller]
    pub fn attention_masked<K: Dim, V: Dim>(
        self,
        keys: Tensor<'g, (B, H, K, D), E>,
        values: Tensor<'g, (B, H, K, V), E>,
        mask: Tensor<'g, (B, K), bool>,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        let mask: Tensor<'g, (B, super::Const<1>, super::Const<1>, K), bool> = mask.reshape();
        self.fused_attention(AttentionMask::Tensor, scale, &[keys.id, values.id, mask.id])
    }

    /// The fused attention op with `mask` on the operands after the queries; the result
    /// type is fixed by the typed method that calls this.
    #[track_caller]
    fn fused_attention<S2: Shape>(
        self,
        mask: AttentionMask,
        scale: f64,
        operands: &[Option<NodeId>],
    ) -> Tensor<'g, S2, E> {
        self.then(Op::Attention { scale, mask }, operands)
    }
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// Layer normalization over the last dim `N`, with per-feature `weight` and `bias`.
    #[track_caller]
    pub fn layer_norm<N: Dim>(
        self,
        weight: Tensor<'g, (N,), E>,
        bias: Tensor<'g, (N,), E>,
        eps: f64,
    ) -> Self
    where
        S: LastDim<N>,
    {
        let op = Op::LayerNorm {
            eps,
            has_weight: true,
            has_bias: true,
        };
        self.then(op, &[weight.id, bias.id])
    }

    /// RMS normalization over the last dim `N`, scaled by `weight`.
    #[track_caller]
    pub fn rms_norm<N: Dim>(self, weight: Tensor<'g, (N,), E>, eps: f64) -> Self
    where
        S: LastDim<N>,
    {
        self.then(
            Op::RmsNorm {
                eps,
                has_weight: true,
            },
            &[weight.id],
        )
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

    /// Axes `A` and `B` swapped (both checked at compile time).
    #[track_caller]
    pub fn swap_axes<const A: usize, const B: usize>(
        self,
    ) -> Tensor<'g, <S as SwapAxes<A, B>>::Out, E>
    where
        S: SwapAxes<A, B>,
    {
        let mut perm: Vec<usize> = (0..S::RANK).collect();
        perm.swap(A, B);
        self.then(Op::Permute { perm }, &[])
    }

    /// `L` entries of axis `I` starting at `start` (`L` a static dim). Bounds are checked when
    /// the graph is built, or against a runtime axis when the graph runs.
    #[track_caller]
    pub fn narrow<const I: usize, L: Dim>(
        self,
        start: usize,
    ) -> Tensor<'g, <S as Replace<I, L>>::Out, E>
    where
        S: Replace<I, L>,
    {
        let Some(len) = self.scope.dim(L::KIND).and_then(|d| d.as_static()) else {
            let reason = format!(
                "narrow needs a static length, but `{}` is a runtime dim",
                L::KIND
            );
            return Tensor::from_id(self.scope, self.scope.reject("narrow", self.id, reason));
        };
        self.then(
            Op::Slice {
                axis: I,
                start: start as i64,
                stop: Some((start + len) as i64),
                step: 1,
            },
            &[],
        )
    }
}

impl<'g, S: Shape> Tensor<'g, S, bool> {
    /// `self ? a : b` elementwise.
    #[track_caller]
    pub fn select<E: Element>(self, a: Tensor<'g, S, E>, b: Tensor<'g, S, E>) -> Tensor<'g, S, E> {
        self.then(Op::Where, &[a.id, b.id])
    }
}

impl<'g, V: Dim, D: Dim, E: Element> Tensor<'g, (V, D), E> {
    /// Embedding lookup: the rows of this `(V, D)` table at `ids`.
    #[track_caller]
    pub fn embed<S: Shape + AppendDim<D>, I: Index>(
        self,
        ids: Tensor<'g, S, I>,
    ) -> Tensor<'g, <S as AppendDim<D>>::Out, E> {
        self.then(Op::Gather { axis: 0 }, &[ids.id])
    }
}

/// Index element types: `i32` and `i64`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot index a tensor",
    label = "indices must be i32 or i64"
)]
pub trait Index: Element {}
#[diagnostic::do_not_recommend]
impl Index for i32 {}
#[diagnostic::do_not_recommend]
impl Index for i64 {}

/// The shape with one more trailing dim `D`.
pub trait AppendDim<D: Dim>: Shape {
    /// `(..., D)`.
    type Out: Shape;
}

macro_rules! append {
    ($($d:ident),*) => {
        impl<$($d: Dim,)* Z: Dim> AppendDim<Z> for ($($d,)*) {
            type Out = ($($d,)* Z,);
        }
    };
}
append!();
append!(A);
append!(A, B);
append!(A, B, C);

/// The shape with axes `A` and `B` swapped.
#[diagnostic::on_unimplemented(
    message = "cannot swap axes {A} and {B} of `{Self}`",
    label = "an axis is out of range",
    note = "axes count from 0"
)]
pub trait SwapAxes<const A: usize, const B: usize>: Shape {
    /// The permuted dims.
    type Out: Shape;
}

/// The shape with axis `I` replaced by `L`.
#[diagnostic::on_unimplemented(
    message = "axis {I} does not exist in a tensor of shape `{Self}`",
    label = "no axis {I} here"
)]
pub trait Replace<const I: usize, L: Dim>: Shape {
    /// The new dims.
    type Out: Shape;
}

macro_rules! swap {
    ($a:literal, $b:literal; ($($d:ident),*) -> ($($o:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> SwapAxes<$a, $b> for ($($d,)*) {
            type Out = ($($o,)*);
        }
    };
}
swap!(0, 1; (A, B) -> (B, A));
swap!(1, 0; (A, B) -> (B, A));
swap!(0, 1; (A, B, C) -> (B, A, C));
swap!(1, 2; (A, B, C) -> (A, C, B));
swap!(0, 2; (A, B, C) -> (C, B, A));
swap!(1, 2; (A, B, C, D) -> (A, C, B, D));
swap!(2, 3; (A, B, C, D) -> (A, B, D, C));
swap!(1, 3; (A, B, C, D) -> (A, D, C, B));

macro_rules! replace {
    ($i:literal; ($($d:ident),*) -> ($($o:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim,)* L: Dim> Replace<$i, L> for ($($d,)*) {
            type Out = ($($o,)*);
        }
    };
}
replace!(0; (A) -> (L));
replace!(0; (A, B) -> (L, B));
replace!(1; (A, B) -> (A, L));
replace!(0; (A, B, C) -> (L, B, C));
replace!(1; (A, B, C) -> (A, L, C));
replace!(2; (A, B, C) -> (A, B, L));

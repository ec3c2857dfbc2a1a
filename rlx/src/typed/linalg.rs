//! Matrix products: plain, batched, shared-weight, transposed-operand and quantized.
//!
//! Inner dims meet by unification, so a mismatch is a compile error at the argument.

use super::dim::Dim;
use super::element::{Element, Float};
use super::movement::{AppendDim, Index};
use super::shape::Shape;
use super::tensor::{LastDim, Tensor};
use crate::ir::{GatherMatMul, MatMul, Permute, QuantizedMatMul};
use crate::ir::{NodeId, Op};

/// The right operand's inner dim (`Self`) is the left operand's (`K`).
///
/// Batched products check their inner dims through this trait rather than by unifying
/// whole shapes: rustc then names the two dims when they differ, where a mismatch of two
/// rank-3 or rank-4 shapes is elided to `(Batch, Const<12>, ..., _)`.
#[diagnostic::on_unimplemented(
    message = "the inner dims of this matrix product differ: `{K}` on the left, `{Self}` on the right",
    label = "inner dim `{Self}` where the left operand has `{K}`"
)]
pub trait InnerDim<K> {}

impl<K: Dim> InnerDim<K> for K {}

impl<'g, S: Shape, E: Element> Tensor<'g, S, E> {
    /// A matrix product with `rhs` (stored transposed when `transpose_b`); the result type
    /// is fixed by the typed method that calls this.
    #[track_caller]
    pub(crate) fn product<S2: Shape>(
        self,
        rhs: Option<NodeId>,
        transpose_b: bool,
    ) -> Tensor<'g, S2, E> {
        let op = Op::MatMul(MatMul {
            transpose_a: false,
            transpose_b,
        });
        self.then(op, &[rhs])
    }
}

impl<'g, M: Dim, K: Dim, E: Float> Tensor<'g, (M, K), E> {
    /// `(M, K) x (K, N) -> (M, N)`. The inner dims must be the same type: a mismatch is a
    /// compile error at the argument ("expected `784`, found `785`").
    #[track_caller]
    pub fn matmul<N: Dim>(self, rhs: Tensor<'g, (K, N), E>) -> Tensor<'g, (M, N), E> {
        self.product(rhs.id(), false)
    }

    /// `(M, K) x (N, K)ᵀ -> (M, N)`: PyTorch `Linear` weights, read without a copy.
    #[track_caller]
    pub fn matmul_t<N: Dim>(self, rhs: Tensor<'g, (N, K), E>) -> Tensor<'g, (M, N), E> {
        self.product(rhs.id(), true)
    }

    /// The transpose.
    #[track_caller]
    pub fn t(self) -> Tensor<'g, (K, M), E> {
        self.then(Op::Permute(Permute { perm: vec![1, 0] }), &[])
    }
}

impl<'g, B: Dim, M: Dim, K: Dim, E: Float> Tensor<'g, (B, M, K), E> {
    /// Batched `(B, M, K) x (B, K, N) -> (B, M, N)`. Differing inner dims are a compile
    /// error naming both ([`InnerDim`]).
    #[track_caller]
    pub fn matmul<K2: InnerDim<K> + Dim, N: Dim>(
        self,
        rhs: Tensor<'g, (B, K2, N), E>,
    ) -> Tensor<'g, (B, M, N), E> {
        self.product(rhs.id(), false)
    }

    /// `(B, M, K) x (K, N) -> (B, M, N)`: one matrix applied to every batch entry.
    #[track_caller]
    pub fn matmul_shared<N: Dim>(self, rhs: Tensor<'g, (K, N), E>) -> Tensor<'g, (B, M, N), E> {
        self.product(rhs.id(), false)
    }
}

impl<'g, B: Dim, M: Dim, K: Dim, E: Float> Tensor<'g, (B, M, K), E> {
    /// `(B, M, K) x (N, K)ᵀ -> (B, M, N)`: a PyTorch `Linear` weight applied to every batch
    /// entry, read without a copy.
    #[track_caller]
    pub fn matmul_t_shared<N: Dim>(self, rhs: Tensor<'g, (N, K), E>) -> Tensor<'g, (B, M, N), E> {
        self.product(rhs.id(), true)
    }
}

impl<'g, B: Dim, H: Dim, M: Dim, K: Dim, E: Float> Tensor<'g, (B, H, M, K), E> {
    /// Batched `(B, H, M, K) x (B, H, K, N) -> (B, H, M, N)` (attention weights times values).
    /// Differing inner dims are a compile error naming both ([`InnerDim`]).
    #[track_caller]
    pub fn matmul<K2: InnerDim<K> + Dim, N: Dim>(
        self,
        rhs: Tensor<'g, (B, H, K2, N), E>,
    ) -> Tensor<'g, (B, H, M, N), E> {
        self.product(rhs.id(), false)
    }

    /// Batched `(B, H, M, K) x (B, H, N, K)ᵀ -> (B, H, M, N)` (queries times keys), without
    /// transposing the keys.
    #[track_caller]
    pub fn matmul_t<K2: InnerDim<K> + Dim, N: Dim>(
        self,
        rhs: Tensor<'g, (B, H, N, K2), E>,
    ) -> Tensor<'g, (B, H, M, N), E> {
        self.product(rhs.id(), true)
    }
}

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
        self.product(weight.id(), false)
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
        self.product(weight.id(), true)
    }
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// Each row of `self` (`(.., K)`, a token) times the `Sel` matrices its `routes` pick
    /// among `weights` (`(Ex, N, K)`: `Ex` projections stored `[out, in]`, as a mixture's
    /// experts are) -> `(.., Sel, N)` ([`GatherMatMul`]). Only the picked matrices are
    /// read; an index outside `0..Ex` is an error when the graph runs.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Tokens);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Tokens, Const<16>)> = g.input("x");
    ///     let experts: Tensor<(Const<8>, Const<32>, Const<16>)> = g.param("experts");
    ///     let routes: Tensor<(Tokens, Const<2>), i64> = g.input("routes");
    ///     let y: Tensor<(Tokens, Const<2>, Const<32>)> = x.gather_project_t(experts, routes);
    ///     g.output("y", y);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn gather_project_t<K: Dim, N: Dim, Ex: Dim, Sel: Dim, X: Index>(
        self,
        weights: Tensor<'g, (Ex, N, K), E>,
        routes: Tensor<'g, <S as LastDim<K>>::WithLast<Sel>, X>,
    ) -> Tensor<'g, <<S as LastDim<K>>::WithLast<Sel> as AppendDim<N>>::Out, E>
    where
        S: LastDim<K>,
        <S as LastDim<K>>::WithLast<Sel>: AppendDim<N>,
    {
        let op = Op::GatherMatMul(GatherMatMul { transpose_b: true });
        self.then(op, &[weights.id(), routes.id()])
    }

    /// [`gather_project_t`](Self::gather_project_t) with a row per pair: `self` is
    /// `(.., Sel, K)` for `routes` `(.., Sel)`, each row times the matrix of its own route
    /// (an expert's hidden activations through its down projection).
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Tokens);
    /// let graph = build(|g| {
    ///     let h: Tensor<(Tokens, Const<2>, Const<32>)> = g.input("h");
    ///     let experts: Tensor<(Const<8>, Const<16>, Const<32>)> = g.param("down");
    ///     let routes: Tensor<(Tokens, Const<2>), i64> = g.input("routes");
    ///     g.output("y", h.gather_project_pairs_t(experts, routes));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn gather_project_pairs_t<K: Dim, N: Dim, Ex: Dim, R: AppendDim<K, Out = S>, X: Index>(
        self,
        weights: Tensor<'g, (Ex, N, K), E>,
        routes: Tensor<'g, R, X>,
    ) -> Tensor<'g, <S as LastDim<K>>::WithLast<N>, E>
    where
        S: LastDim<K>,
    {
        let op = Op::GatherMatMul(GatherMatMul { transpose_b: true });
        self.then(op, &[weights.id(), routes.id()])
    }
}

/// How a quantized weight is stored: `bits` per element (4 or 8) and one scale and bias per
/// `group_size` consecutive inputs (32, 64 or 128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantization {
    /// Bits per element: 4 or 8.
    pub bits: u8,
    /// Inputs sharing one scale and bias: 32, 64 or 128.
    pub group_size: usize,
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// `(.., K) x dequant(weight)ᵀ -> (.., N)`: a linear layer whose `N x K` weight is
    /// stored quantized, `weight` holding the packed bytes (`(N, K*bits/8)`, little-endian;
    /// at 4 bits the low nibble comes first) and `scales`/`biases` one affine pair per group
    /// (`(N, K/group_size)`). The weight's rows must match the scales' (rustc); the packed
    /// and grouped sizes are checked against `K` when the graph is built.
    ///
    /// ```
    /// use rlx::typed::{Const, Quantization, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<64>)> = g.input("x");
    ///     let w: Tensor<(Const<16>, Const<32>), u8> = g.param("w");
    ///     let scales: Tensor<(Const<16>, Const<2>)> = g.param("scales");
    ///     let biases: Tensor<(Const<16>, Const<2>)> = g.param("biases");
    ///     let q = Quantization { bits: 4, group_size: 32 };
    ///     g.output("y", x.quantized_matmul(w, scales, biases, q)); // (Batch, 16)
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn quantized_matmul<K: Dim, N: Dim, P: Dim, G: Dim>(
        self,
        weight: Tensor<'g, (N, P), u8>,
        scales: Tensor<'g, (N, G), E>,
        biases: Tensor<'g, (N, G), E>,
        quantization: Quantization,
    ) -> Tensor<'g, <S as LastDim<K>>::WithLast<N>, E>
    where
        S: LastDim<K>,
    {
        let op = Op::QuantizedMatMul(QuantizedMatMul {
            bits: quantization.bits,
            group_size: quantization.group_size,
        });
        self.then(op, &[weight.id(), scales.id(), biases.id()])
    }
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// `(.., K) x dequant(weight)ᵀ -> (.., N)`: a linear layer whose `N x K` weight is kept
    /// in a GGUF block format (`Q8_0`, `Q4_0`, `Q4_1`; `product` names it and how the
    /// activations enter), `weight` its rows of blocks as the file stores them (see [`Scope::block_param_at`](super::Scope::block_param_at)). `x`
    /// must be `f32`, and `K` whole blocks (checked when the graph is built).
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// use rlx::ir::BlockMatMul;
    /// use rlx::params::ParamPath;
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<64>)> = g.input("x");
    ///     let w = g.block_param_at::<Const<16>>(&ParamPath::root().field("w"), 64, GgmlType::Q4_0);
    ///     let product = BlockMatMul::exact(GgmlType::Q4_0);
    ///     g.output("y", x.block_matmul::<Const<64>, Const<16>>(w, product)); // (Batch, 16)
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn block_matmul<K: Dim, N: Dim>(
        self,
        weight: Tensor<'g, (N, super::Dyn), u8>,
        product: crate::ir::BlockMatMul,
    ) -> Tensor<'g, <S as LastDim<K>>::WithLast<N>, E>
    where
        S: LastDim<K>,
    {
        self.then(Op::BlockMatMul(product), &[weight.id()])
    }
}

impl<'g, N: Dim, E: Float> Tensor<'g, (N, N), E> {
    /// `x` with `self · x = rhs`, for square `self`. A singular matrix is a run-time error.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let a: Tensor<(Const<3>, Const<3>), f64> = g.input("a");
    ///     let b: Tensor<(Const<3>, Const<2>), f64> = g.input("b");
    ///     g.output("x", a.solve(b));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn solve<K: Dim>(self, rhs: Tensor<'g, (N, K), E>) -> Tensor<'g, (N, K), E> {
        self.then(Op::Solve, &[rhs.id()])
    }
}

impl<'g, B: Dim, N: Dim, E: Float> Tensor<'g, (B, N, N), E> {
    /// Batched [`solve`](Tensor::solve): one system per batch entry.
    #[track_caller]
    pub fn solve<K: Dim>(self, rhs: Tensor<'g, (B, N, K), E>) -> Tensor<'g, (B, N, K), E> {
        self.then(Op::Solve, &[rhs.id()])
    }
}

//! Neural-network ops: attention, normalization and rotary embeddings.
//!
//! Feature and channel dims meet by unification: a layer norm's weight must be `(N,)` for
//! a tensor ending in `N`, a group or batch norm's parameters `(C,)` for a tensor with `C`
//! channels at axis 1.

use super::dim::{Const, Dim};
use super::element::Float;
use super::positions::{FirstDim, Positions};
use super::shape::Shape;
use super::tensor::{LastDim, Tensor};
use crate::ir::{self, AttentionMask, BinaryOp, NodeId, Op, Scalar, UnaryOp};
use crate::ir::{LayerNorm, Reshape, RmsNorm};

impl<'g, B: Dim, H: Dim, T: Dim, K: Dim, E: Float> Tensor<'g, (B, H, T, K), E> {
    /// The gated delta rule of Gated DeltaNet with these queries ([`Op::DeltaRule`]): per
    /// batch row and head a `K x V` state decays by `exp(log_decay_t)`, moves its reading of
    /// `keys_t` towards `values_t` by `beta_t`, and is read by query `t`; from `start` or a
    /// zero state. Returns the `(B, H, T, V)` outputs and the state after the last step
    /// (what a decoder carries to its next step). `K` must be static. Gated DeltaNet feeds
    /// it unit keys and queries (queries also scaled by `1/√K`), `beta` in `(0, 1)` and
    /// `log_decay ≤ 0`; other values are computed as given.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Seq);
    /// let graph = build(|g| {
    ///     let q: Tensor<(Const<1>, Const<2>, Seq, Const<8>)> = g.input("q");
    ///     let k: Tensor<(Const<1>, Const<2>, Seq, Const<8>)> = g.input("k");
    ///     let v: Tensor<(Const<1>, Const<2>, Seq, Const<4>)> = g.input("v");
    ///     let log_decay: Tensor<(Const<1>, Const<2>, Seq)> = g.input("log_decay");
    ///     let beta: Tensor<(Const<1>, Const<2>, Seq)> = g.input("beta");
    ///     let (out, state) = q.delta_rule(k, v, log_decay, beta, None);
    ///     g.output("out", out);
    ///     g.output("state", state);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    #[allow(clippy::type_complexity)]
    pub fn delta_rule<V: Dim>(
        self,
        keys: Self,
        values: Tensor<'g, (B, H, T, V), E>,
        log_decay: Tensor<'g, (B, H, T), E>,
        beta: Tensor<'g, (B, H, T), E>,
        start: Option<Tensor<'g, (B, H, K, V), E>>,
    ) -> (Tensor<'g, (B, H, T, V), E>, Tensor<'g, (B, H, K, V), E>) {
        let scope = self.scope();
        let Some(k) = scope.static_size("delta_rule", self.id(), K::KIND, "key width") else {
            return (Tensor::from_id(scope, None), Tensor::from_id(scope, None));
        };
        let mut operands = vec![keys.id(), values.id(), log_decay.id(), beta.id()];
        operands.extend(start.map(|s| s.id()));
        let both: Tensor<'g, (B, H, crate::typed::Dyn, V), E> = self.then(Op::DeltaRule, &operands);
        let k = k as i64;
        let out = both.slice(super::shape::Axis::<2>, 0, Some(-k), 1);
        let state = both.slice(super::shape::Axis::<2>, -k, None, 1);
        (out, state)
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
        self.fused_attention(AttentionMask::None, scale, false, &[keys.id(), values.id()])
    }

    /// Causal attention: query `i` sees keys `0..=i`.
    #[track_caller]
    pub fn attention_causal<K: Dim, V: Dim>(
        self,
        keys: Tensor<'g, (B, H, K, D), E>,
        values: Tensor<'g, (B, H, K, V), E>,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(
            AttentionMask::Causal,
            scale,
            false,
            &[keys.id(), values.id()],
        )
    }

    /// Causal attention with grouped key/value heads (grouped-query attention): the `H`
    /// query heads share the `G` key and value heads in groups of `H / G`, query head `h`
    /// reading head `h / (H / G)`. `H` must be a multiple of `G`, checked when the graph is
    /// built.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch, Seq);
    /// let graph = build(|g| {
    ///     let q: Tensor<(Batch, Const<6>, Seq, Const<8>)> = g.input("q");
    ///     let k: Tensor<(Batch, Const<2>, Seq, Const<8>)> = g.input("k");
    ///     let v: Tensor<(Batch, Const<2>, Seq, Const<8>)> = g.input("v");
    ///     g.output("o", q.attention_causal_grouped(k, v, 0.35));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn attention_causal_grouped<G: Dim, K: Dim, V: Dim>(
        self,
        keys: Tensor<'g, (B, G, K, D), E>,
        values: Tensor<'g, (B, G, K, V), E>,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(
            AttentionMask::Causal,
            scale,
            false,
            &[keys.id(), values.id()],
        )
    }

    /// [`attention_causal_grouped`](Self::attention_causal_grouped) over the first `length`
    /// keys and values of a cache of capacity `C` (read in place): the `Q` queries are the
    /// last `Q` of those `length` positions, query `i` seeing keys `0..=length - Q + i`. A
    /// `length` outside `Q..=C` fails the run. `length` is a scalar, or a vector of one
    /// length per row of `B` (a batch of sequences each as long as its own; see
    /// [`Positions`]).
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Seq);
    /// let graph = build(|g| {
    ///     let q: Tensor<(Const<1>, Const<4>, Seq, Const<8>)> = g.input("q");
    ///     let k: Tensor<(Const<1>, Const<2>, Const<64>, Const<8>)> = g.input("k_cache");
    ///     let v: Tensor<(Const<1>, Const<2>, Const<64>, Const<8>)> = g.input("v_cache");
    ///     let filled: Tensor<(), i64> = g.input("filled");
    ///     g.output("o", q.attention_causal_grouped_upto(k, v, filled, 0.35));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn attention_causal_grouped_upto<G: Dim, C: Dim, V: Dim, P: Positions<'g, B>>(
        self,
        keys: Tensor<'g, (B, G, C, D), E>,
        values: Tensor<'g, (B, G, C, V), E>,
        length: P,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(
            AttentionMask::Causal,
            scale,
            true,
            &[keys.id(), values.id(), length.position_id()],
        )
    }

    /// [`attention_causal_grouped`](Self::attention_causal_grouped) within a sliding
    /// window: query `i` sees only the last `window` keys up to its own position
    /// (`i - window < j <= i`, queries aligned to the end of the keys), the local layers of
    /// Gemma and Mistral. A `window` of 0 is a build error.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Seq);
    /// let graph = build(|g| {
    ///     let q: Tensor<(Const<1>, Const<4>, Seq, Const<8>)> = g.input("q");
    ///     let k: Tensor<(Const<1>, Const<2>, Seq, Const<8>)> = g.input("k");
    ///     let v: Tensor<(Const<1>, Const<2>, Seq, Const<8>)> = g.input("v");
    ///     g.output("o", q.attention_windowed_grouped(k, v, 512, 0.35));
    /// })?;
    /// assert!(graph.to_string().contains("window=512"));
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn attention_windowed_grouped<G: Dim, K: Dim, V: Dim>(
        self,
        keys: Tensor<'g, (B, G, K, D), E>,
        values: Tensor<'g, (B, G, K, V), E>,
        window: usize,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(
            AttentionMask::SlidingWindow(window),
            scale,
            false,
            &[keys.id(), values.id()],
        )
    }

    /// [`attention_windowed_grouped`](Self::attention_windowed_grouped) over the first
    /// `length` positions of a cache of capacity `C`, read in place, as
    /// [`attention_causal_grouped_upto`](Self::attention_causal_grouped_upto) does.
    #[track_caller]
    pub fn attention_windowed_grouped_upto<G: Dim, C: Dim, V: Dim, P: Positions<'g, B>>(
        self,
        keys: Tensor<'g, (B, G, C, D), E>,
        values: Tensor<'g, (B, G, C, V), E>,
        length: P,
        window: usize,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(
            AttentionMask::SlidingWindow(window),
            scale,
            true,
            &[keys.id(), values.id(), length.position_id()],
        )
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
        let mask: Tensor<'g, (B, Const<1>, Const<1>, K), bool> = mask.reshape();
        self.fused_attention(
            AttentionMask::Tensor,
            scale,
            false,
            &[keys.id(), values.id(), mask.id()],
        )
    }

    /// The fused attention op with `mask` (and, with `key_length`, a key count last) on
    /// the operands after the queries; the result type is fixed by the typed method that
    /// calls this.
    #[track_caller]
    fn fused_attention<S2: Shape>(
        self,
        mask: AttentionMask,
        scale: f64,
        key_length: bool,
        operands: &[Option<NodeId>],
    ) -> Tensor<'g, S2, E> {
        self.then(
            Op::Attention(crate::ir::Attention {
                scale,
                mask,
                key_length,
            }),
            operands,
        )
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
        let op = Op::LayerNorm(LayerNorm {
            eps,
            has_weight: true,
            has_bias: true,
        });
        self.then(op, &[weight.id(), bias.id()])
    }

    /// RMS normalization over the last dim `N`, scaled by `weight`.
    #[track_caller]
    pub fn rms_norm<N: Dim>(self, weight: Tensor<'g, (N,), E>, eps: f64) -> Self
    where
        S: LastDim<N>,
    {
        self.then(
            Op::RmsNorm(RmsNorm {
                eps,
                has_weight: true,
            }),
            &[weight.id()],
        )
    }
}

/// Shapes with `C` channels at axis 1 after a batch axis: `(N, C)`, `(N, C, L)`,
/// `(N, C, H, W)` and `(N, C, D, H, W)`, the layouts PyTorch's group and batch norms take.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not have `{C}` channels at axis 1",
    label = "the per-channel parameters are `({C},)`",
    note = "group and batch norms take `(N, C, ...)` with parameters of `(C,)`"
)]
pub trait Channels<C: Dim>: Shape {}

#[diagnostic::do_not_recommend]
impl<N: Dim, C: Dim> Channels<C> for (N, C) {}
#[diagnostic::do_not_recommend]
impl<N: Dim, C: Dim, L: Dim> Channels<C> for (N, C, L) {}
#[diagnostic::do_not_recommend]
impl<N: Dim, C: Dim, H: Dim, W: Dim> Channels<C> for (N, C, H, W) {}
#[diagnostic::do_not_recommend]
impl<N: Dim, C: Dim, D: Dim, H: Dim, W: Dim> Channels<C> for (N, C, D, H, W) {}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// Group normalization (PyTorch's `GroupNorm`): the channels are split into `groups`
    /// groups, each normalized over its channels and spatial positions (biased variance),
    /// then scaled and shifted per channel. `groups` must divide `C`, checked when the graph
    /// is built. A composite: a layer norm over `[N, groups, C/groups · spatial]`.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<32>, Const<8>, Const<8>)> = g.input("x");
    ///     let (w, b): (Tensor<(Const<32>,)>, _) = (g.param("gn.weight"), g.param("gn.bias"));
    ///     g.output("y", x.group_norm(8, w, b, 1e-5));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn group_norm<C: Dim>(
        self,
        groups: usize,
        weight: Tensor<'g, (C,), E>,
        bias: Tensor<'g, (C,), E>,
        eps: f64,
    ) -> Self
    where
        S: Channels<C>,
    {
        let scope = self.scope();
        let Some(ty) = self.id().and_then(|id| scope.ty(id)) else {
            return Tensor::from_id(scope, None);
        };
        let dims = ty.shape.dims();
        let Some(per_group) = (groups > 0)
            .then(|| dims[1].div_exact(&ir::Dim::Static(groups)))
            .flatten()
        else {
            let reason = format!("{groups} groups do not divide {} channels", dims[1]);
            return Tensor::from_id(scope, scope.reject("group_norm", self.id(), reason));
        };
        let rest = ir::Dim::product(std::iter::once(&per_group).chain(&dims[2..]));
        let grouped = ir::Shape::new([dims[0].clone(), ir::Dim::Static(groups), rest]);
        let x = scope.apply(Op::Reshape(Reshape { shape: grouped }), &[self.id()]);
        let plain = Op::LayerNorm(LayerNorm {
            eps,
            has_weight: false,
            has_bias: false,
        });
        let normed = scope.apply(plain, &[x]);
        let normed = scope.apply(
            Op::Reshape(Reshape {
                shape: ty.shape.clone(),
            }),
            &[normed],
        );
        self.affine(normed, weight.id(), bias.id())
    }

    /// Batch normalization at inference (PyTorch's `BatchNorm*d` in `eval()` mode): each
    /// channel is normalized by its running statistics, then scaled and shifted:
    /// `(x − mean) / sqrt(var + eps) · weight + bias`. A composite: the per-channel scale
    /// and shift are computed once per run, then applied in one multiply-add.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// type C = Const<16>;
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, C, Const<8>, Const<8>)> = g.input("x");
    ///     let mean: Tensor<(C,)> = g.param("bn.running_mean");
    ///     let (var, w, b) = (g.param("bn.running_var"), g.param("bn.weight"), g.param("bn.bias"));
    ///     g.output("y", x.batch_norm(mean, var, w, b, 1e-5));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn batch_norm<C: Dim>(
        self,
        running_mean: Tensor<'g, (C,), E>,
        running_var: Tensor<'g, (C,), E>,
        weight: Tensor<'g, (C,), E>,
        bias: Tensor<'g, (C,), E>,
        eps: f64,
    ) -> Self
    where
        S: Channels<C>,
    {
        let scope = self.scope();
        let eps = scope.scalar(Scalar::Float(eps), E::DTYPE);
        let binary = |kind, a, b| scope.apply(Op::Binary(kind), &[a, b]);
        let var = binary(BinaryOp::Add, running_var.id(), eps);
        let inv_std = scope.apply(Op::Unary(UnaryOp::Rsqrt), &[var]);
        let scale = binary(BinaryOp::Mul, weight.id(), inv_std);
        let shifted_mean = binary(BinaryOp::Mul, running_mean.id(), scale);
        let shift = binary(BinaryOp::Sub, bias.id(), shifted_mean);
        self.affine(self.id(), scale, shift)
    }

    /// `x · scale + shift` with `[C]` parameters broadcast along axis 1 of `self`'s shape.
    #[track_caller]
    fn affine(self, x: Option<NodeId>, scale: Option<NodeId>, shift: Option<NodeId>) -> Self {
        let scope = self.scope();
        let per_channel = |p: Option<NodeId>| {
            let ty = scope.ty(p?)?;
            let mut dims = vec![ty.shape[0].clone()];
            dims.resize(S::RANK - 1, ir::Dim::Static(1));
            scope.apply(Op::Reshape(Reshape { shape: dims.into() }), &[p])
        };
        let scaled = scope.apply(Op::Binary(BinaryOp::Mul), &[x, per_channel(scale)]);
        let id = scope.apply(Op::Binary(BinaryOp::Add), &[scaled, per_channel(shift)]);
        Tensor::from_id(scope, id)
    }
}

/// Rotary position embedding settings, for [`Tensor::rope`].
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// Features rotated, from the start of the last axis (even).
    pub dims: usize,
    /// Frequency base, e.g. 10000.
    pub base: f64,
    /// Positions are multiplied by this.
    pub scale: f64,
    /// Rotate adjacent pairs `(2i, 2i+1)` (the original paper's layout) instead of the two
    /// halves of the rotated features (GPT-NeoX, Llama).
    pub traditional: bool,
    /// Each pair's frequency (radians per position, `dims / 2` of them) in place of
    /// `base^(−2i/dims)`: the scaled frequencies of long-context rotations (Llama 3, YaRN).
    pub freqs: Option<std::sync::Arc<[f64]>>,
}

impl Rope {
    /// Rotates the first `dims` features in halves with frequency base `base`, positions
    /// unscaled.
    ///
    /// ```
    /// let rope = rlx::typed::Rope::new(64, 10_000.0);
    /// assert!(!rope.traditional);
    /// ```
    pub fn new(dims: usize, base: f64) -> Rope {
        Rope {
            dims,
            base,
            scale: 1.0,
            traditional: false,
            freqs: None,
        }
    }

    fn op(self) -> Op {
        Op::Rope(crate::ir::Rope {
            dims: self.dims,
            base: self.base,
            scale: self.scale,
            traditional: self.traditional,
            freqs: self.freqs,
        })
    }
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// Rotary position embedding: positions run along the second-to-last axis from 0, the
    /// last axis holds the features. `rope.dims` (even, at most the features) is checked
    /// when the graph is built.
    ///
    /// ```
    /// use rlx::typed::{Const, Rope, Tensor, build};
    /// rlx::dims!(Batch, Seq);
    /// let graph = build(|g| {
    ///     let q: Tensor<(Batch, Const<4>, Seq, Const<16>)> = g.input("q");
    ///     g.output("q_rot", q.rope(Rope::new(16, 10_000.0)));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn rope(self, rope: Rope) -> Self {
        self.then(rope.op(), &[])
    }

    /// [`rope`](Self::rope) with positions starting at `offset`: a scalar (e.g. the length
    /// of a key-value cache), or for a tensor of rank 3 or more a vector with one offset
    /// per row of axis 0 (a batch of sequences, each at its own position; see
    /// [`Positions`]).
    ///
    /// ```
    /// use rlx::typed::{Const, Rope, Tensor, build};
    /// let graph = build(|g| {
    ///     let q: Tensor<(Const<3>, Const<4>, Const<1>, Const<16>)> = g.input("q");
    ///     let pos: Tensor<(Const<3>,), i64> = g.input("pos");
    ///     g.output("q_rot", q.rope_from(Rope::new(16, 10_000.0), pos));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn rope_from<P: Positions<'g, S::First>>(self, rope: Rope, offset: P) -> Self
    where
        S: FirstDim,
    {
        self.then(rope.op(), &[offset.position_id()])
    }
}

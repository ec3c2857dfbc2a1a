//! Neural-network ops: attention, normalization, rotary embeddings, convolution and
//! pooling.
//!
//! Feature and channel dims meet by unification (a layer norm's weight must be `(N,)` for
//! a tensor ending in `N`; a convolution's weight must take the input's channels). The
//! spatial dims a convolution or pool produces need arithmetic, so they come from the
//! result's type and are checked when the graph is built.

use super::dim::{Const, Dim};
use super::element::Float;
use super::movement::Index;
use super::shape::Shape;
use super::tensor::{LastDim, Tensor};
use crate::ir::{AttentionMask, NodeId, Op, PoolKind};

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
        self.fused_attention(AttentionMask::None, scale, &[keys.id(), values.id()])
    }

    /// Causal attention: query `i` sees keys `0..=i`.
    #[track_caller]
    pub fn attention_causal<K: Dim, V: Dim>(
        self,
        keys: Tensor<'g, (B, H, K, D), E>,
        values: Tensor<'g, (B, H, K, V), E>,
        scale: f64,
    ) -> Tensor<'g, (B, H, Q, V), E> {
        self.fused_attention(AttentionMask::Causal, scale, &[keys.id(), values.id()])
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
            &[keys.id(), values.id(), mask.id()],
        )
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
        self.then(op, &[weight.id(), bias.id()])
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
            &[weight.id()],
        )
    }
}

/// Rotary position embedding settings, for [`Tensor::rope`].
#[derive(Clone, Copy, Debug, PartialEq)]
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
        }
    }

    fn op(self) -> Op {
        Op::Rope {
            dims: self.dims,
            base: self.base,
            scale: self.scale,
            traditional: self.traditional,
        }
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

    /// [`rope`](Self::rope) with positions starting at `offset` (a scalar input, e.g. the
    /// length of a key-value cache).
    #[track_caller]
    pub fn rope_from<X: Index>(self, rope: Rope, offset: Tensor<'g, (), X>) -> Self {
        self.then(rope.op(), &[offset.id()])
    }
}

/// Convolution settings per spatial axis, for `conv1d` (`D = 1`) and `conv2d` (`D = 2`).
///
/// ```
/// let same = rlx::typed::ConvConfig::<2>::default().padding(1);
/// assert_eq!(same.padding, [(1, 1); 2]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvConfig<const D: usize> {
    /// Step between windows.
    pub stride: [usize; D],
    /// Zeros added `(before, after)`.
    pub padding: [(usize, usize); D],
    /// Spacing between window taps.
    pub dilation: [usize; D],
}

impl<const D: usize> Default for ConvConfig<D> {
    fn default() -> Self {
        ConvConfig {
            stride: [1; D],
            padding: [(0, 0); D],
            dilation: [1; D],
        }
    }
}

impl<const D: usize> ConvConfig<D> {
    /// The same stride on every spatial axis.
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = [stride; D];
        self
    }

    /// `padding` zeros on both sides of every spatial axis.
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = [(padding, padding); D];
        self
    }

    /// The same dilation on every spatial axis.
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = [dilation; D];
        self
    }

    fn op(self, groups: usize) -> Op {
        Op::Conv {
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
            dilation: self.dilation.to_vec(),
            groups,
        }
    }
}

/// Pooling settings per spatial axis, for `*_pool1d` (`D = 1`) and `*_pool2d` (`D = 2`).
///
/// ```
/// let halve = rlx::typed::PoolConfig::new([2, 2]);
/// assert_eq!(halve.stride, [2, 2]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig<const D: usize> {
    /// Window size.
    pub kernel: [usize; D],
    /// Step between windows.
    pub stride: [usize; D],
    /// Padding `(before, after)`, at most half the window; it never wins a max and counts
    /// as zero in a mean.
    pub padding: [(usize, usize); D],
}

impl<const D: usize> PoolConfig<D> {
    /// Windows of `kernel`, side by side (the stride is the window), no padding.
    pub fn new(kernel: [usize; D]) -> Self {
        PoolConfig {
            kernel,
            stride: kernel,
            padding: [(0, 0); D],
        }
    }

    /// The same stride on every spatial axis.
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = [stride; D];
        self
    }

    /// `padding` on both sides of every spatial axis.
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = [(padding, padding); D];
        self
    }

    fn op(self, kind: PoolKind) -> Op {
        Op::Pool {
            kind,
            kernel: self.kernel.to_vec(),
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
        }
    }
}

impl<'g, S: Shape, E: Float> Tensor<'g, S, E> {
    /// A convolution of `self` by `weight` (plus `bias`), result dims from the result type.
    #[track_caller]
    fn convolve<S2: Shape>(
        self,
        name: &str,
        op: Op,
        weight: Option<NodeId>,
        bias: Option<Option<NodeId>>,
    ) -> Tensor<'g, S2, E> {
        let mut operands = vec![weight];
        operands.extend(bias);
        self.declared(name, op, &operands)
    }
}

impl<'g, N: Dim, C: Dim, L: Dim, E: Float> Tensor<'g, (N, C, L), E> {
    /// 1-D convolution, channels first: `(N, C, L) * (O, C, K) -> (N, O, L2)`. The weight
    /// must take `C` channels (rustc); `L2` comes from the result type and is checked when
    /// the graph is built.
    ///
    /// ```
    /// use rlx::typed::{Const, ConvConfig, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<3>, Const<32>)> = g.input("x");
    ///     let w: Tensor<(Const<8>, Const<3>, Const<5>)> = g.param("w");
    ///     let y: Tensor<(Batch, Const<8>, Const<28>)> = x.conv1d(w, None, ConvConfig::default());
    ///     g.output("y", y);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn conv1d<O: Dim, K: Dim, L2: Dim>(
        self,
        weight: Tensor<'g, (O, C, K), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        config: ConvConfig<1>,
    ) -> Tensor<'g, (N, O, L2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv1d", config.op(1), weight.id(), bias)
    }

    /// 1-D convolution in `groups` channel groups: the weight takes `C / groups` channels,
    /// checked when the graph is built.
    #[track_caller]
    pub fn conv1d_grouped<O: Dim, G: Dim, K: Dim, L2: Dim>(
        self,
        weight: Tensor<'g, (O, G, K), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        groups: usize,
        config: ConvConfig<1>,
    ) -> Tensor<'g, (N, O, L2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv1d", config.op(groups), weight.id(), bias)
    }

    /// 1-D max pooling: `(N, C, L) -> (N, C, L2)`, `L2` from the result type.
    #[track_caller]
    pub fn max_pool1d<L2: Dim>(self, config: PoolConfig<1>) -> Tensor<'g, (N, C, L2), E> {
        self.declared("max_pool1d", config.op(PoolKind::Max), &[])
    }

    /// 1-D average pooling: `(N, C, L) -> (N, C, L2)`, `L2` from the result type.
    #[track_caller]
    pub fn avg_pool1d<L2: Dim>(self, config: PoolConfig<1>) -> Tensor<'g, (N, C, L2), E> {
        self.declared("avg_pool1d", config.op(PoolKind::Avg), &[])
    }
}

impl<'g, N: Dim, C: Dim, H: Dim, W: Dim, E: Float> Tensor<'g, (N, C, H, W), E> {
    /// 2-D convolution, channels first: `(N, C, H, W) * (O, C, KH, KW) -> (N, O, H2, W2)`.
    /// The weight must take `C` channels (rustc); `H2` and `W2` come from the result type
    /// and are checked when the graph is built.
    ///
    /// ```
    /// use rlx::typed::{Const, ConvConfig, PoolConfig, Tensor, build};
    /// rlx::dims!(Batch);
    /// type C<const N: usize> = Const<N>;
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, C<1>, C<28>, C<28>)> = g.input("image");
    ///     let w: Tensor<(C<8>, C<1>, C<3>, C<3>)> = g.param("conv.weight");
    ///     let b: Tensor<(C<8>,)> = g.param("conv.bias");
    ///     let same = ConvConfig::default().padding(1);
    ///     let y: Tensor<(Batch, C<8>, C<28>, C<28>)> = x.conv2d(w, Some(b), same);
    ///     let pooled: Tensor<(Batch, C<8>, C<14>, C<14>)> = y.relu().max_pool2d(PoolConfig::new([2, 2]));
    ///     g.output("features", pooled);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn conv2d<O: Dim, KH: Dim, KW: Dim, H2: Dim, W2: Dim>(
        self,
        weight: Tensor<'g, (O, C, KH, KW), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        config: ConvConfig<2>,
    ) -> Tensor<'g, (N, O, H2, W2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv2d", config.op(1), weight.id(), bias)
    }

    /// 2-D convolution in `groups` channel groups (`groups = C` is depthwise): the weight
    /// takes `C / groups` channels, checked when the graph is built.
    #[track_caller]
    pub fn conv2d_grouped<O: Dim, G: Dim, KH: Dim, KW: Dim, H2: Dim, W2: Dim>(
        self,
        weight: Tensor<'g, (O, G, KH, KW), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        groups: usize,
        config: ConvConfig<2>,
    ) -> Tensor<'g, (N, O, H2, W2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv2d", config.op(groups), weight.id(), bias)
    }

    /// 2-D max pooling: `(N, C, H, W) -> (N, C, H2, W2)`, `H2` and `W2` from the result type.
    #[track_caller]
    pub fn max_pool2d<H2: Dim, W2: Dim>(
        self,
        config: PoolConfig<2>,
    ) -> Tensor<'g, (N, C, H2, W2), E> {
        self.declared("max_pool2d", config.op(PoolKind::Max), &[])
    }

    /// 2-D average pooling: `(N, C, H, W) -> (N, C, H2, W2)`, `H2` and `W2` from the result
    /// type.
    #[track_caller]
    pub fn avg_pool2d<H2: Dim, W2: Dim>(
        self,
        config: PoolConfig<2>,
    ) -> Tensor<'g, (N, C, H2, W2), E> {
        self.declared("avg_pool2d", config.op(PoolKind::Avg), &[])
    }
}

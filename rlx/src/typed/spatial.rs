//! Spatial ops, channels first: convolution and its transpose, pooling, upsampling.
//!
//! Channel dims meet by unification (a convolution's weight must take the input's
//! channels). The spatial dims these ops produce need arithmetic, so they come from the
//! result's type and are checked when the graph is built.

use super::dim::Dim;
use super::element::Float;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::ir::{self, NodeId, Op, PoolKind, UpsampleMode};
use crate::ir::{Conv, Pool};

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
        Op::Conv(Conv {
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
            dilation: self.dilation.to_vec(),
            groups,
        })
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
        Op::Pool(Pool {
            kind,
            kernel: self.kernel.to_vec(),
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
        })
    }
}

/// Transposed convolution settings per spatial axis, for `conv_transpose1d` (`D = 1`) and
/// `conv_transpose2d` (`D = 2`), as PyTorch's `ConvTranspose*d` takes them.
///
/// ```
/// // Doubles a length-16 signal: (16 − 1)·2 + 3 + 1 − 2 = 32.
/// let up = rlx::typed::ConvTransposeConfig::<1>::default().stride(2).padding(1).output_padding(1);
/// assert_eq!(up.padding, [(1, 1)]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeConfig<const D: usize> {
    /// Step between the output windows of consecutive input positions.
    pub stride: [usize; D],
    /// Positions `(before, after)` cropped from the full output.
    pub padding: [(usize, usize); D],
    /// Positions added after the end (less than the stride or the dilation).
    pub output_padding: [usize; D],
    /// Spacing between kernel taps.
    pub dilation: [usize; D],
}

impl<const D: usize> Default for ConvTransposeConfig<D> {
    fn default() -> Self {
        ConvTransposeConfig {
            stride: [1; D],
            padding: [(0, 0); D],
            output_padding: [0; D],
            dilation: [1; D],
        }
    }
}

impl<const D: usize> ConvTransposeConfig<D> {
    /// The same stride on every spatial axis.
    pub fn stride(mut self, stride: usize) -> Self {
        self.stride = [stride; D];
        self
    }

    /// `padding` positions cropped from both ends of every spatial axis.
    pub fn padding(mut self, padding: usize) -> Self {
        self.padding = [(padding, padding); D];
        self
    }

    /// The same output padding on every spatial axis.
    pub fn output_padding(mut self, output_padding: usize) -> Self {
        self.output_padding = [output_padding; D];
        self
    }

    /// The same dilation on every spatial axis.
    pub fn dilation(mut self, dilation: usize) -> Self {
        self.dilation = [dilation; D];
        self
    }

    fn op(self, groups: usize) -> Op {
        Op::ConvTranspose(crate::ir::ConvTranspose {
            stride: self.stride.to_vec(),
            padding: self.padding.to_vec(),
            output_padding: self.output_padding.to_vec(),
            dilation: self.dilation.to_vec(),
            groups,
        })
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

    /// 1-D transposed convolution, channels first: `(N, C, L) * (C, O, K) -> (N, O, L2)`,
    /// the weight in PyTorch's `[in, out, kernel]` layout. The weight must take `C`
    /// channels (rustc); `L2` comes from the result type and is checked when the graph is
    /// built.
    ///
    /// ```
    /// use rlx::typed::{Const, ConvTransposeConfig, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<8>, Const<16>)> = g.input("x");
    ///     let w: Tensor<(Const<8>, Const<4>, Const<4>)> = g.param("up.weight");
    ///     let double = ConvTransposeConfig::default().stride(2).padding(1);
    ///     let y: Tensor<(Batch, Const<4>, Const<32>)> = x.conv_transpose1d(w, None, double);
    ///     g.output("y", y);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn conv_transpose1d<O: Dim, K: Dim, L2: Dim>(
        self,
        weight: Tensor<'g, (C, O, K), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        config: ConvTransposeConfig<1>,
    ) -> Tensor<'g, (N, O, L2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv_transpose1d", config.op(1), weight.id(), bias)
    }

    /// 1-D transposed convolution in `groups` channel groups: the weight `(C, G, K)` makes
    /// `G` outputs per group, so `O = G · groups`, checked when the graph is built.
    #[track_caller]
    pub fn conv_transpose1d_grouped<G: Dim, O: Dim, K: Dim, L2: Dim>(
        self,
        weight: Tensor<'g, (C, G, K), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        groups: usize,
        config: ConvTransposeConfig<1>,
    ) -> Tensor<'g, (N, O, L2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv_transpose1d", config.op(groups), weight.id(), bias)
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

    /// 2-D transposed convolution, channels first:
    /// `(N, C, H, W) * (C, O, KH, KW) -> (N, O, H2, W2)`, the weight in PyTorch's
    /// `[in, out, kh, kw]` layout. The weight must take `C` channels (rustc); `H2` and `W2`
    /// come from the result type and are checked when the graph is built.
    ///
    /// ```
    /// use rlx::typed::{Const, ConvTransposeConfig, Tensor, build};
    /// rlx::dims!(Batch);
    /// type C<const N: usize> = Const<N>;
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, C<16>, C<7>, C<7>)> = g.input("x");
    ///     let w: Tensor<(C<16>, C<8>, C<3>, C<3>)> = g.param("up.weight");
    ///     let b: Tensor<(C<8>,)> = g.param("up.bias");
    ///     let double = ConvTransposeConfig::default().stride(2).padding(1).output_padding(1);
    ///     let y: Tensor<(Batch, C<8>, C<14>, C<14>)> = x.conv_transpose2d(w, Some(b), double);
    ///     g.output("y", y);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn conv_transpose2d<O: Dim, KH: Dim, KW: Dim, H2: Dim, W2: Dim>(
        self,
        weight: Tensor<'g, (C, O, KH, KW), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        config: ConvTransposeConfig<2>,
    ) -> Tensor<'g, (N, O, H2, W2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv_transpose2d", config.op(1), weight.id(), bias)
    }

    /// 2-D transposed convolution in `groups` channel groups: the weight `(C, G, KH, KW)`
    /// makes `G` outputs per group, so `O = G · groups`, checked when the graph is built.
    #[track_caller]
    pub fn conv_transpose2d_grouped<G: Dim, O: Dim, KH: Dim, KW: Dim, H2: Dim, W2: Dim>(
        self,
        weight: Tensor<'g, (C, G, KH, KW), E>,
        bias: Option<Tensor<'g, (O,), E>>,
        groups: usize,
        config: ConvTransposeConfig<2>,
    ) -> Tensor<'g, (N, O, H2, W2), E> {
        let bias = bias.map(|b| b.id());
        self.convolve("conv_transpose2d", config.op(groups), weight.id(), bias)
    }

    /// Resizes the spatial axes to `(H2, W2)`, the result type's sizes (static, config or
    /// runtime dims, not `Dyn`), as PyTorch's `interpolate(size=…)` does in `mode`.
    ///
    /// ```
    /// use rlx::ir::UpsampleMode;
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<3>, Const<8>, Const<8>)> = g.input("x");
    ///     let y: Tensor<(Batch, Const<3>, Const<20>, Const<12>)> =
    ///         x.upsample2d(UpsampleMode::Bilinear);
    ///     g.output("y", y);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn upsample2d<H2: Dim, W2: Dim>(self, mode: UpsampleMode) -> Tensor<'g, (N, C, H2, W2), E> {
        let scope = self.scope();
        let (Some(h), Some(w)) = (scope.dim(H2::KIND), scope.dim(W2::KIND)) else {
            return Tensor::from_id(scope, None);
        };
        self.then(
            Op::Upsample(crate::ir::Upsample {
                mode,
                size: [h, w].into(),
            }),
            &[],
        )
    }

    /// Scales the spatial axes by whole `factor`s (PyTorch's `Upsample(scale_factor=…)`
    /// with integer factors), symbolic sizes included: `(H2, W2)` from the result type are
    /// checked when the graph is built (`Dyn` accepts the product).
    ///
    /// ```
    /// use rlx::ir::UpsampleMode;
    /// use rlx::typed::{Const, Dyn, Tensor, build};
    /// rlx::dims!(Height, Width);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Const<1>, Const<3>, Height, Width)> = g.input("x");
    ///     let y: Tensor<(Const<1>, Const<3>, Dyn, Dyn)> =
    ///         x.upsample2d_by(UpsampleMode::Nearest, [2, 2]);
    ///     g.output("y", y);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn upsample2d_by<H2: Dim, W2: Dim>(
        self,
        mode: UpsampleMode,
        factor: [usize; 2],
    ) -> Tensor<'g, (N, C, H2, W2), E> {
        let scope = self.scope();
        let Some(ty) = self.id().and_then(|id| scope.ty(id)) else {
            return Tensor::from_id(scope, None);
        };
        if factor.contains(&0) {
            let reason = format!("upsampling factors must be at least 1, got {factor:?}");
            return Tensor::from_id(scope, scope.reject("upsample2d_by", self.id(), reason));
        }
        let size: Vec<ir::Dim> = (0..2)
            .map(|i| ty.shape[2 + i].mul(&ir::Dim::Static(factor[i])))
            .collect();
        let op = Op::Upsample(crate::ir::Upsample {
            mode,
            size: size.into(),
        });
        self.declared("upsample2d_by", op, &[])
    }
}

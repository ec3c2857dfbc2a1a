//! Convolutions, pooling and resizing over channels-first spatial axes.

mod grad;
mod infer;
mod reference;
mod sample;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, Op, PoolKind, Shape, TensorType, UpsampleMode};

/// 1-D or 2-D convolution, channels first. Operands: `x` `[N, C, *spatial]`,
/// `w` `[O, C/groups, *kernel]`, then `bias` `[O]` when present.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    /// Stride per spatial axis.
    pub stride: Vec<usize>,
    /// `(before, after)` zero padding per spatial axis.
    pub padding: Vec<(usize, usize)>,
    /// Dilation per spatial axis.
    pub dilation: Vec<usize>,
    /// Channel groups; divides `C` and `O`.
    pub groups: usize,
}

/// 1-D or 2-D transposed convolution (the adjoint of [`Op::Conv`]), channels first.
/// Operands: `x` `[N, C, *spatial]`, `w` `[C, O/groups, *kernel]` (PyTorch's layout),
/// then `bias` `[O]` when present. Input position `i` and tap `k` add into output
/// position `i·stride + k·dilation − padding.0`; each output axis has
/// `(in − 1)·stride + dilation·(kernel − 1) + 1 + output_padding − padding.0 − padding.1`
/// positions.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvTranspose {
    /// Stride per spatial axis.
    pub stride: Vec<usize>,
    /// `(before, after)` positions cropped from the full output per spatial axis.
    pub padding: Vec<(usize, usize)>,
    /// Positions added after the end per spatial axis (less than stride or dilation):
    /// picks one of the input sizes a strided conv maps to the same output size.
    pub output_padding: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilation: Vec<usize>,
    /// Channel groups; divides `C` and `O`.
    pub groups: usize,
}

/// 1-D or 2-D pooling, channels first. Operands: `x` `[N, C, *spatial]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Function.
    pub kind: PoolKind,
    /// Window per spatial axis.
    pub kernel: Vec<usize>,
    /// Stride per spatial axis.
    pub stride: Vec<usize>,
    /// `(before, after)` padding per spatial axis, at most half the window.
    pub padding: Vec<(usize, usize)>,
}

/// 2-D resizing of the last two axes to `size`, channels first. Operands: `x`
/// `[N, C, H, W]` (float).
#[derive(Clone, Debug, PartialEq)]
pub struct Upsample {
    /// How output positions read input positions.
    pub mode: UpsampleMode,
    /// Output `[H, W]`, each at least 1.
    pub size: Shape,
}

/// Stride, padding, dilation (when not all 1) and groups (when not 1), as printed.
fn window_attrs(
    out: &mut Vec<String>,
    stride: &[usize],
    padding: &[(usize, usize)],
    dilation: &[usize],
    groups: usize,
) {
    out.push(format!("stride={stride:?}"));
    out.push(format!("padding={padding:?}"));
    if dilation.iter().any(|d| *d != 1) {
        out.push(format!("dilation={dilation:?}"));
    }
    if groups != 1 {
        out.push(format!("groups={groups}"));
    }
}

/// How a convolution's window slides: per spatial axis its stride, `(before, after)`
/// padding and dilation; and the channel groups (pooling: dilation 1, one group).
pub(crate) struct Window<'a> {
    pub stride: &'a [usize],
    pub padding: &'a [(usize, usize)],
    pub dilation: &'a [usize],
    pub groups: usize,
}

/// The window attributes of a convolution or transposed convolution.
macro_rules! window_of {
    ($($op:ident),+) => {
        $(
            impl $op {
                fn window(&self) -> Window<'_> {
                    Window {
                        stride: &self.stride,
                        padding: &self.padding,
                        dilation: &self.dilation,
                        groups: self.groups,
                    }
                }
            }
        )+
    };
}

window_of!(Conv, ConvTranspose);

impl Primitive for Conv {
    fn name(&self) -> &'static str {
        "conv"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        window_attrs(
            out,
            &self.stride,
            &self.padding,
            &self.dilation,
            self.groups,
        );
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Conv(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::conv(
            &self.stride,
            &self.padding,
            &self.dilation,
            self.groups,
            inputs,
        )
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let win = self.window();
        grad::conv(e, x, &win, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // `C/groups * kernel` products per output.
        let w = x.dims(1);
        conv_bound(x, w.iter().skip(1).product::<usize>().max(1) as f64)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let win = self.window();
        Ok(reference::conv(&win, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::conv(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for ConvTranspose {
    fn name(&self) -> &'static str {
        "conv_transpose"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("stride={:?}", self.stride));
        out.push(format!("padding={:?}", self.padding));
        if self.output_padding.iter().any(|p| *p != 0) {
            out.push(format!("output_padding={:?}", self.output_padding));
        }
        if self.dilation.iter().any(|d| *d != 1) {
            out.push(format!("dilation={:?}", self.dilation));
        }
        if self.groups != 1 {
            out.push(format!("groups={}", self.groups));
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ConvTranspose(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::conv_transpose(
            &self.stride,
            &self.padding,
            &self.output_padding,
            &self.dilation,
            self.groups,
            inputs,
        )
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let win = self.window();
        grad::conv_transpose(e, x, &win, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // At most `C/groups * kernel` products per output, as a conv.
        let w = x.dims(1);
        let (first, rest) = w.split_first().map_or((1, &[][..]), |(f, r)| (*f, r));
        let k = rest.iter().product::<usize>().max(1) as f64 * first.max(1) as f64;
        conv_bound(x, k)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let win = self.window();
        Ok(reference::conv_transpose(&win, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::conv_transpose(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Pool {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("kernel={:?}", self.kernel));
        out.push(format!("stride={:?}", self.stride));
        out.push(format!("padding={:?}", self.padding));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Pool(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::pool(&self.kernel, &self.stride, &self.padding, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let (kernel, stride, padding) = (&self.kernel, &self.stride, &self.padding);
        grad::pool(e, x[0], y, self.kind, kernel, stride, padding, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        match self.kind {
            PoolKind::Max => Bound::Exact,
            PoolKind::Avg => {
                let n = self.kernel.iter().product::<usize>().max(1) as f64;
                Bound::Within {
                    rel: 2.0 * x.u,
                    abs: 2.0 * x.u * n * x.scale + x.tiny,
                    growth: n * x.scale,
                }
            }
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let (kernel, stride, padding) = (&self.kernel, &self.stride, &self.padding);
        Ok(reference::pool(
            self.kind, kernel, stride, padding, &x[0], out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::pool(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Upsample {
    fn name(&self) -> &'static str {
        self.mode.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("size={}", self.size));
    }

    fn bind_dims(&self, out: &[usize]) -> Op {
        Op::Upsample(Upsample {
            mode: self.mode,
            size: Shape::from(&out[out.len().saturating_sub(2)..]),
        })
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::upsample(&self.size, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::upsample(e, x[0], self.mode, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        Bound::Within {
            rel: 4.0 * x.u,
            abs: 4.0 * x.u * x.scale + x.tiny,
            growth: x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::upsample(self.mode, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::upsample(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

/// A convolution's output sums `k` products of operands up to `scale`.
fn conv_bound(x: &Operands<'_>, k: f64) -> Bound {
    let s = x.scale;
    Bound::Within {
        rel: 2.0 * x.u,
        abs: 2.0 * x.u * k * (k * s * s + s) + x.tiny,
        growth: k * s * s,
    }
}

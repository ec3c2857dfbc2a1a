//! Pooling, convolution, transposed convolution and upsampling thunks.

use super::geometry::{conv_geometry, resize, window};
use super::{Lower, LowerInput, Sizes, boxed};
use crate::backend::RunError;
use crate::cpu::kernels::conv::{ConvShape, ConvTransposeShape, conv, conv_transpose};
use crate::cpu::kernels::numeric::accumulator;
use crate::cpu::kernels::spatial::{self, Resize, Window};
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel, float_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, DType, PoolKind};

/// Max or average pooling, channels first.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    pub dtype: DType,
    pub window: Window,
    pub kind: PoolKind,
    pub x: View,
    pub out: View,
}

impl Kernel for Pool {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.x, self.out, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| spatial::pool::<T>(
            &self.window,
            self.kind,
            mem.src(self.x),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

/// Which window product a [`Conv`] thunk runs.
#[derive(Clone, Debug)]
pub(crate) enum ConvDirection {
    /// Convolution: im2col, then GEMM (patches in the storage type).
    Forward(ConvShape),
    /// Transposed convolution: GEMM, then col2im (products in the accumulator type).
    Transpose(ConvTransposeShape),
}

/// A convolution or its transpose, per image and channel group.
#[derive(Clone, Debug)]
pub(crate) struct Conv {
    pub dtype: DType,
    pub direction: ConvDirection,
    pub x: View,
    pub w: View,
    pub bias: Option<View>,
    pub out: View,
    /// One image-group's patches (forward) or GEMM products (transpose).
    pub col: View,
    /// GEMM packing, in the accumulator type.
    pub scratch: View,
    /// For f16/bf16: one group's result in f32 before it is narrowed.
    pub wide_out: Option<View>,
}

impl Kernel for Conv {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let acc = accumulator(self.dtype).size_bytes();
        let col = match self.direction {
            ConvDirection::Forward(_) => s,
            ConvDirection::Transpose(_) => acc,
        };
        let mut writes = vec![(self.out, s), (self.col, col), (self.scratch, acc)];
        writes.extend(self.wide_out.map(|v| (v, acc)));
        let mut reads = vec![(self.x, s), (self.w, s)];
        reads.extend(self.bias.map(|v| (v, s)));
        Accesses { writes, reads }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        match &self.direction {
            ConvDirection::Forward(shape) => float_type!(self.dtype, |T| conv::<T>(
                shape,
                mem.src(self.x),
                mem.src(self.w),
                self.bias.map(|b| mem.src(b)),
                mem.dst(self.out),
                mem.dst(self.col),
                mem.dst(self.scratch),
                self.wide_out.map(|v| mem.dst(v))
            )),
            ConvDirection::Transpose(shape) => float_type!(self.dtype, |T| conv_transpose::<T>(
                shape,
                mem.src(self.x),
                mem.src(self.w),
                self.bias.map(|b| mem.src(b)),
                mem.dst(self.out),
                mem.dst(self.col),
                mem.dst(self.scratch),
                self.wide_out.map(|v| mem.dst(v))
            )),
        }
        Ok(())
    }
}

/// 2-D nearest or bilinear resize of the last two axes.
#[derive(Clone, Debug)]
pub(crate) struct Upsample {
    pub dtype: DType,
    pub resize: Resize,
    pub x: View,
    pub out: View,
}

impl Kernel for Upsample {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.x, self.out, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| spatial::upsample::<T>(
            &self.resize,
            mem.src(self.x),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

impl Lower for ir::Pool {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let ones = vec![1; self.kernel.len()];
        let window = window(
            n.shapes[0],
            n.out_shape,
            &self.kernel,
            &self.stride,
            &self.padding,
            &ones,
        );
        vec![boxed(Pool {
            dtype: n.dtype(),
            window,
            kind: self.kind,
            x: n.views[0],
            out: n.out,
        })]
    }
}

/// How a conv or transposed conv of these sizes runs (`geometry::conv_geometry`), and the
/// scratch it needs (im2col columns, the GEMM's packing).
fn geometry(n: &Sizes<'_>) -> (ConvDirection, Vec<(DType, usize)>) {
    conv_geometry(
        n.op,
        n.dtype,
        n.operands[0],
        n.operands[1],
        n.out,
        n.threads,
    )
    .expect("a conv node has a conv geometry")
}

fn conv_scratch(n: &Sizes<'_>) -> Vec<(DType, usize)> {
    geometry(n).1
}

fn lower_conv(n: &LowerInput<'_>) -> Vec<Thunk> {
    let dtype = n.dtype();
    let (direction, _) = geometry(&n.sizes());
    vec![boxed(Conv {
        dtype,
        direction,
        x: n.views[0],
        w: n.views[1],
        bias: n.views.get(2).copied(),
        out: n.out,
        col: n.scratch[0],
        scratch: n.scratch[1],
        wide_out: n.scratch.get(2).copied(),
    })]
}

impl Lower for ir::Conv {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        conv_scratch(n)
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        lower_conv(n)
    }
}

impl Lower for ir::ConvTranspose {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        conv_scratch(n)
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        lower_conv(n)
    }
}

impl Lower for ir::Upsample {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Upsample {
            dtype: n.dtype(),
            resize: resize(self.mode, n.shapes[0], n.out_shape),
            x: n.views[0],
            out: n.out,
        })]
    }
}

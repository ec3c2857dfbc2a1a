//! Pooling, convolution, transposed convolution and upsampling thunks.

use super::{Accesses, Kernel, Memory, View, float_type};
use crate::backend::RunError;
use crate::cpu::kernels::conv::{ConvShape, ConvTransposeShape, conv, conv_transpose};
use crate::cpu::kernels::numeric::accumulator;
use crate::cpu::kernels::spatial::{self, Resize, Window};
use crate::ir::{DType, PoolKind};

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

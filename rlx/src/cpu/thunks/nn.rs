//! Rope and attention thunks.

use super::{Accesses, Kernel, Memory, View, float_type};
use crate::backend::RunError;
use crate::cpu::kernels::gemm::GemmAcc;
use crate::cpu::kernels::nn::{self, AttentionDims, AttentionTiling, MaskValues, RopeDims};
use crate::cpu::kernels::numeric::{FloatStore, accumulator};
use crate::ir::DType;

/// Rotary position embedding; the position offset is an optional `i32`/`i64` scalar.
#[derive(Clone, Debug)]
pub(crate) struct Rope {
    pub dtype: DType,
    pub dims: RopeDims,
    pub offset: Option<(View, DType)>,
    pub x: View,
    pub out: View,
}

impl Kernel for Rope {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let mut reads = vec![(self.x, s)];
        reads.extend(self.offset.map(|(v, d)| (v, d.size_bytes())));
        Accesses {
            writes: vec![(self.out, s)],
            reads,
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let offset = match self.offset {
            None => 0,
            Some((v, DType::I32)) => i64::from(mem.src::<i32>(v)[0]),
            Some((v, _)) => mem.src::<i64>(v)[0],
        };
        float_type!(self.dtype, |T| nn::rope::<T>(
            &self.dims,
            offset,
            mem.src(self.x),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

/// Scaled dot-product attention, blocked as its tiling says.
#[derive(Clone, Debug)]
pub(crate) struct Attention {
    pub dtype: DType,
    pub dims: AttentionDims,
    pub tiling: AttentionTiling,
    pub q: View,
    pub k: View,
    pub v: View,
    pub mask: Option<(View, DType)>,
    pub out: View,
    /// One slot per worker, in the accumulator type.
    pub scratch: View,
}

impl Attention {
    fn run<T: FloatStore>(&self, mem: &Memory)
    where
        T::Acc: GemmAcc,
    {
        let mask = match self.mask {
            None => MaskValues::None,
            Some((v, DType::Bool)) => MaskValues::Bool(mem.src::<u8>(v)),
            Some((v, _)) => MaskValues::Additive(mem.src::<T>(v)),
        };
        nn::attention::<T>(
            &self.dims,
            &self.tiling,
            mem.src(self.q),
            mem.src(self.k),
            mem.src(self.v),
            mask,
            mem.dst(self.out),
            mem.dst(self.scratch),
        )
    }
}

impl Kernel for Attention {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let mut reads = vec![(self.q, s), (self.k, s), (self.v, s)];
        reads.extend(self.mask.map(|(v, d)| (v, d.size_bytes())));
        Accesses {
            writes: vec![
                (self.out, s),
                (self.scratch, accumulator(self.dtype).size_bytes()),
            ],
            reads,
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| self.run::<T>(mem));
        Ok(())
    }
}

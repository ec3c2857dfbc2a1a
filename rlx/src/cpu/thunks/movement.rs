//! Data movement thunks: strided copies, fills, gathers and scatter-adds.

use super::{Accesses, Kernel, Memory, View, float_type, int_type, word_type};
use crate::backend::{NodeSite, RunError};
use crate::cpu::kernels::copy::{self, Word};
use crate::cpu::kernels::layout::Strided;
use crate::cpu::kernels::numeric::{FloatStore, Int};
use crate::ir::DType;

/// Copies `src` (from element `src_at`) into `dst` (from `dst_at`) through a layout:
/// permute, slice, broadcast and the parts of concat and pad.
#[derive(Clone, Debug)]
pub(crate) struct StridedCopy {
    pub dtype: DType,
    pub layout: Strided<2>,
    pub dst_at: usize,
    pub src_at: usize,
    pub src: View,
    pub dst: View,
}

impl Kernel for StridedCopy {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.src, self.dst, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (src, dst) = (self.src, self.dst);
        word_type!(self.dtype, |W| copy::strided_copy::<W>(
            &self.layout,
            self.dst_at,
            self.src_at,
            mem.src(src),
            mem.dst(dst)
        ));
        Ok(())
    }
}

/// Fills `dst` with one value, given as the low bytes of `pattern`.
#[derive(Clone, Debug)]
pub(crate) struct Fill {
    pub dtype: DType,
    pub pattern: u64,
    pub dst: View,
}

/// The low bytes of `pattern` as a word.
fn word_from_pattern<W: Word>(pattern: u64) -> W {
    let bytes = pattern.to_le_bytes();
    bytemuck::pod_read_unaligned(&bytes[..size_of::<W>()])
}

impl Kernel for Fill {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.dst, self.dtype.size_bytes())],
            reads: vec![],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let dst = self.dst;
        word_type!(self.dtype, |W| copy::fill::<W>(
            word_from_pattern(self.pattern),
            mem.dst(dst)
        ));
        Ok(())
    }
}

/// `numpy.take` along the middle axis of `[outer, axis_len, inner]`.
#[derive(Clone, Debug)]
pub(crate) struct Gather {
    pub dtype: DType,
    pub index: DType,
    pub outer: usize,
    pub axis_len: usize,
    pub inner: usize,
    pub data: View,
    pub indices: View,
    pub out: View,
    pub at: NodeSite,
}

impl Kernel for Gather {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, self.dtype.size_bytes())],
            reads: vec![
                (self.data, self.dtype.size_bytes()),
                (self.indices, self.index.size_bytes()),
            ],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (n, outer, len, inner) = (self.indices.len, self.outer, self.axis_len, self.inner);
        let (data, indices, out) = (self.data, self.indices, self.out);
        let result = word_type!(self.dtype, |W| {
            let (data, out) = (mem.src::<W>(data), mem.dst::<W>(out));
            if self.index == DType::I32 {
                let idx = mem.src::<i32>(indices);
                copy::gather(outer, len, inner, data, |j| i64::from(idx[j]), n, out)
            } else {
                let idx = mem.src::<i64>(indices);
                copy::gather(outer, len, inner, data, |j| idx[j], n, out)
            }
        });
        result.map_err(|index| RunError::IndexOutOfRange {
            at: self.at,
            index,
            size: len,
        })
    }
}

/// Adds `updates` into `out` (already a copy of the data) at `indices` along the middle
/// axis of `[outer, axis_len, inner]`.
#[derive(Clone, Debug)]
pub(crate) struct ScatterAdd {
    pub dtype: DType,
    pub index: DType,
    pub outer: usize,
    pub axis_len: usize,
    pub inner: usize,
    pub indices: View,
    pub updates: View,
    pub out: View,
    pub at: NodeSite,
}

impl Kernel for ScatterAdd {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, s)],
            reads: vec![(self.indices, self.index.size_bytes()), (self.updates, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (n, outer, len, inner) = (self.indices.len, self.outer, self.axis_len, self.inner);
        let (updates, out) = (self.updates, self.out);
        let idx32 = (self.index == DType::I32).then(|| mem.src::<i32>(self.indices));
        let idx64 = (self.index == DType::I64).then(|| mem.src::<i64>(self.indices));
        let at = |j: usize| idx32.map_or_else(|| idx64.map_or(0, |i| i[j]), |i| i64::from(i[j]));
        let result = if self.dtype.is_float() {
            float_type!(self.dtype, |T| copy::scatter_add(
                outer,
                len,
                inner,
                at,
                n,
                mem.src::<T>(updates),
                mem.dst::<T>(out),
                |a: T, b: T| T::store(a.load() + b.load())
            ))
        } else {
            int_type!(self.dtype, |T| copy::scatter_add(
                outer,
                len,
                inner,
                at,
                n,
                mem.src::<T>(updates),
                mem.dst::<T>(out),
                <T as Int>::add
            ))
        };
        result.map_err(|index| RunError::IndexOutOfRange {
            at: self.at,
            index,
            size: len,
        })
    }
}

//! The token-sampling thunk.

use super::{Lower, LowerInput, Sizes, boxed};
use crate::backend::RunError;
use crate::cpu::kernels::numeric::FloatStore;
use crate::cpu::kernels::sample::{RankKey, Settings, sample_row};
use crate::cpu::thunk::{Accesses, Kernel, Thunk, float_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, DType};

/// One draw per row of `logits` (`rows` × `vocab`), settings per row.
#[derive(Clone, Debug)]
pub(crate) struct SampleToken {
    pub dtype: DType,
    pub top_k_dtype: DType,
    pub rows: usize,
    pub vocab: usize,
    /// logits, uniform, temperature, top_k, top_p, min_p.
    pub operands: [View; 6],
    pub out: View,
    /// One row's weights (the logits' accumulator type) and rank keys (the accumulator's
    /// [`RankKey::Key`], 64 or 128 bits).
    pub weight: View,
    pub keys: View,
}

impl SampleToken {
    fn run<T: FloatStore<Acc: bytemuck::Pod + RankKey>>(&self, mem: &Memory) {
        let [logits, uniform, temperature, top_k, top_p, min_p] = self.operands;
        let logits = mem.src::<T>(logits);
        let (uniform, temperature) = (mem.src::<T>(uniform), mem.src::<T>(temperature));
        let (top_p, min_p) = (mem.src::<T>(top_p), mem.src::<T>(min_p));
        let top_k = |r: usize| match self.top_k_dtype {
            DType::I32 => i64::from(mem.src::<i32>(top_k)[r]),
            _ => mem.src::<i64>(top_k)[r],
        };
        let out = mem.dst::<i64>(self.out);
        let weight = mem.dst::<T::Acc>(self.weight);
        let keys = mem.dst::<<T::Acc as RankKey>::Key>(self.keys);
        let vocab = self.vocab;
        for r in 0..self.rows {
            let row = &logits[r * vocab..(r + 1) * vocab];
            let settings = Settings {
                uniform: uniform[r].load(),
                temperature: temperature[r].load(),
                top_k: top_k(r),
                top_p: top_p[r].load(),
                min_p: min_p[r].load(),
            };
            out[r] = sample_row(row, settings, weight, keys);
        }
    }
}

impl Kernel for SampleToken {
    fn accesses(&self) -> Accesses {
        let size = self.dtype.size_bytes();
        let [logits, uniform, temperature, top_k, top_p, min_p] = self.operands;
        Accesses {
            writes: vec![
                (self.out, 8),
                (self.weight, accumulator(self.dtype).size_bytes()),
                (self.keys, 16),
            ],
            reads: vec![
                (logits, size),
                (uniform, size),
                (temperature, size),
                (top_k, self.top_k_dtype.size_bytes()),
                (top_p, size),
                (min_p, size),
            ],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| self.run::<T>(mem));
        Ok(())
    }
}

/// The type the kernel computes in: float64 for float64 logits, float32 otherwise.
fn accumulator(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

impl Lower for ir::SampleToken {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        // Room for float64 weights: the logits' dtype is not known here, and a float32
        // kernel uses half of it.
        let vocab = n.operands[0].last().copied().unwrap_or(0);
        vec![(DType::F64, vocab), (DType::I64, 2 * vocab)]
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let shape = n.shapes[0];
        let vocab = shape.last().copied().unwrap_or(0);
        let rows = n.out_shape.iter().product();
        vec![boxed(SampleToken {
            dtype: n.dtypes[0],
            top_k_dtype: n.dtypes[3],
            rows,
            vocab,
            operands: std::array::from_fn(|i| n.views[i]),
            out: n.out,
            weight: n.scratch[0],
            // Requested as twice as many 64-bit values: room for one 128-bit key a token.
            keys: View {
                len: vocab,
                ..n.scratch[1]
            },
        })]
    }
}

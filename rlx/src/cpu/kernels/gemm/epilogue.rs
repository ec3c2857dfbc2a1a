//! Work applied to finished rows of `C` while they are still in cache: the bias,
//! activation and residual of a fused matmul.

use crate::cpu::kernels::elementwise::{Target, unary_float_on};
use crate::cpu::kernels::numeric::FloatStore;
use crate::cpu::kernels::simd::vectorized;
use crate::ir::UnaryOp;

/// Row-wise work on a product's finished output.
pub(crate) trait RowEpilogue<A>: Sync {
    /// `values` are columns `col0..col0 + values.len()` of row `row` of this product's `C`,
    /// every `k` block already added.
    fn apply(&self, row: usize, col0: usize, values: &mut [A]);
}

/// `activation(c + bias) + residual` of a fused matmul.
#[derive(Clone, Copy)]
pub(crate) struct Epilogue<'a, T> {
    /// `[n]`, added to every row.
    pub bias: Option<&'a [T]>,
    pub activation: Option<UnaryOp>,
    /// Every batch entry's `m x n` residual, in output order, row stride `n`.
    pub residual: Option<&'a [T]>,
    pub n: usize,
    /// Where the batch entry being computed starts in `residual`.
    pub entry_offset: usize,
}

impl<T: FloatStore> RowEpilogue<T::Acc> for Epilogue<'_, T>
where
    T::Acc: FloatStore<Acc = T::Acc>,
{
    fn apply(&self, row: usize, col0: usize, values: &mut [T::Acc]) {
        let cols = col0..col0 + values.len();
        if let Some(bias) = self.bias {
            let bias = &bias[cols.clone()];
            vectorized(|| {
                for (v, b) in values.iter_mut().zip(bias) {
                    *v += b.load();
                }
            });
        }
        if let Some(kind) = self.activation {
            unary_float_on::<T::Acc>(kind, Target::InPlace(values));
        }
        if let Some(residual) = self.residual {
            let residual = &residual[self.entry_offset + row * self.n..][cols];
            vectorized(|| {
                for (v, r) in values.iter_mut().zip(residual) {
                    *v += r.load();
                }
            });
        }
    }
}

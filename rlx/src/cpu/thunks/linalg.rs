//! Matrix product, solve and quantized matrix product thunks.

use super::{Accesses, Kernel, Memory, View, float_type};
use crate::backend::{NodeSite, RunError};
use crate::cpu::kernels::gemm::{Epilogue, GemmAcc, GemmBatch, GemmPlan, gemm_batch};
use crate::cpu::kernels::linalg::{self, QuantDims};
use crate::cpu::kernels::numeric::{FloatStore, accumulator};
use crate::ir::{DType, UnaryOp};

/// A batched matrix product over one GEMM plan.
#[derive(Clone, Debug)]
pub(crate) struct MatMul {
    pub dtype: DType,
    pub plan: GemmPlan,
    /// Element offsets into `a` and `b` of each batch entry, in output order.
    pub batches: Vec<(usize, usize)>,
    pub a: View,
    pub b: View,
    pub out: View,
    /// Packing scratch, in the accumulator type: one slot per batch worker.
    pub scratch: View,
    /// For f16/bf16: the f32 result of one batch entry before it is narrowed, per worker.
    pub wide_out: Option<View>,
    /// Batch entries run in parallel on this many workers, each a single-threaded product
    /// (set when the products are too small to split themselves); 1 otherwise.
    pub batch_workers: usize,
    /// `b` already packed (a weight, packed when it was bound), in the accumulator type.
    pub packed_b: Option<View>,
    /// What a fused matmul applies to its product.
    pub epilogue: Option<EpilogueViews>,
}

/// The epilogue of a fused matmul: `activation(product + bias) + residual`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EpilogueViews {
    pub bias: Option<View>,
    pub activation: Option<UnaryOp>,
    pub residual: Option<View>,
}

impl MatMul {
    fn run<S: FloatStore>(&self, mem: &Memory)
    where
        S::Acc: GemmAcc,
    {
        let job = GemmBatch {
            plan: &self.plan,
            offsets: &self.batches,
            workers: self.batch_workers,
            a: mem.src::<S>(self.a),
            b: mem.src::<S>(self.b),
            packed_b: self.packed_b.map(|v| mem.src::<S::Acc>(v)),
            epilogue: self.epilogue.map(|e| Epilogue {
                bias: e.bias.map(|v| mem.src::<S>(v)),
                activation: e.activation,
                residual: e.residual.map(|v| mem.src::<S>(v)),
                n: self.plan.dims.n,
                entry_offset: 0,
            }),
        };
        gemm_batch(
            &job,
            mem.dst(self.out),
            mem.dst(self.scratch),
            self.wide_out.map(|v| mem.dst(v)),
        );
    }
}

impl Kernel for MatMul {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let acc = accumulator(self.dtype).size_bytes();
        let mut writes = vec![(self.out, s), (self.scratch, acc)];
        writes.extend(self.wide_out.map(|v| (v, acc)));
        let mut reads = vec![(self.a, s), (self.b, s)];
        reads.extend(self.packed_b.map(|v| (v, acc)));
        if let Some(e) = &self.epilogue {
            reads.extend(e.bias.iter().chain(&e.residual).map(|v| (*v, s)));
        }
        Accesses { writes, reads }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| self.run::<T>(mem));
        Ok(())
    }
}

/// `out = a⁻¹ b` per batch entry, by LU with partial pivoting in f64.
#[derive(Clone, Debug)]
pub(crate) struct Solve {
    pub dtype: DType,
    pub batch: usize,
    pub n: usize,
    pub k: usize,
    pub a: View,
    pub b: View,
    pub out: View,
    /// f64 workspace: one `n x n` factorization and one `n x k` right-hand side.
    pub work: View,
    pub at: NodeSite,
}

impl Kernel for Solve {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, s), (self.work, 8)],
            reads: vec![(self.a, s), (self.b, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let result = float_type!(self.dtype, |T| linalg::solve::<T>(
            self.batch,
            self.n,
            self.k,
            mem.src(self.a),
            mem.src(self.b),
            mem.dst(self.out),
            mem.dst(self.work)
        ));
        result.map_err(|()| RunError::Singular { at: self.at })
    }
}

/// `x · dequant(w)ᵀ` with group-wise affine dequantization.
#[derive(Clone, Debug)]
pub(crate) struct QuantizedMatMul {
    pub dtype: DType,
    pub dims: QuantDims,
    pub x: View,
    pub w: View,
    pub scales: View,
    pub biases: View,
    pub out: View,
}

impl Kernel for QuantizedMatMul {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, s)],
            reads: vec![(self.x, s), (self.w, 1), (self.scales, s), (self.biases, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| linalg::quantized_matmul::<T>(
            &self.dims,
            mem.src(self.x),
            mem.src(self.w),
            mem.src(self.scales),
            mem.src(self.biases),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

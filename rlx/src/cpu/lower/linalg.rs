//! Matrix product, solve and quantized matrix product thunks.

use super::geometry::{batch_workers, matmul_layout, numel};
use super::{Lower, LowerInput, Sizes, boxed};
use crate::backend::{NodeSite, RunError};
use crate::cpu::fuse::MatMulEpilogue;
use crate::cpu::fuse::products::MAX_MEMBERS;
use crate::cpu::kernels::block_matmul::{
    BlockDims, Part, block_dequantize, block_matmul, block_matmuls,
};
use crate::cpu::kernels::gemm::kernel_shape;
use crate::cpu::kernels::gemm::{Epilogue, GemmAcc, GemmBatch, GemmPlan, gemm_batch};
use crate::cpu::kernels::linalg::{self, QuantDims};
use crate::cpu::kernels::numeric::{FloatStore, accumulator};
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel, float_type};
use crate::cpu::view::{Memory, View};
use crate::gguf::GgmlType;
use crate::ir::{self, DType, UnaryOp};

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

/// Group-affine packed rows turned into their values.
#[derive(Clone, Debug)]
pub(crate) struct Dequantize {
    pub dtype: DType,
    pub dims: QuantDims,
    pub w: View,
    pub scales: View,
    pub biases: View,
    pub out: View,
}

impl Kernel for Dequantize {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, s)],
            reads: vec![(self.w, 1), (self.scales, s), (self.biases, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| linalg::dequantize::<T>(
            &self.dims,
            mem.src(self.w),
            mem.src(self.scales),
            mem.src(self.biases),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

/// `x · dequant(w)ᵀ` with `w` in a GGUF block format, read in place.
#[derive(Clone, Debug)]
pub(crate) struct BlockMatMul {
    pub dims: BlockDims,
    pub x: View,
    pub w: View,
    pub out: View,
}

impl Kernel for BlockMatMul {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, 4)],
            reads: vec![(self.x, 4), (self.w, 1)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        block_matmul(
            &self.dims,
            mem.src(self.x),
            mem.src(self.w),
            mem.dst(self.out),
        );
        Ok(())
    }
}

/// Several `block_matmul`s of one `x`, each into its own output, in one kernel
/// ([`crate::cpu::fuse::products`]).
#[derive(Clone, Debug)]
pub(crate) struct JoinedBlockMatMul {
    pub x: View,
    /// Each member's sizes, weight and output.
    pub parts: Vec<(BlockDims, View, View)>,
}

impl Kernel for JoinedBlockMatMul {
    fn accesses(&self) -> Accesses {
        let mut reads = vec![(self.x, 4)];
        reads.extend(self.parts.iter().map(|&(_, w, _)| (w, 1)));
        Accesses {
            writes: self.parts.iter().map(|&(_, _, out)| (out, 4)).collect(),
            reads,
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        // A fixed array, so that a run allocates nothing.
        let part = |i: usize| {
            let (dims, w, out) = self.parts[i];
            Part::new(dims, mem.src(w), mem.dst(out))
        };
        let parts: [Part<'_>; MAX_MEMBERS] = std::array::from_fn(|i| {
            if i < self.parts.len() {
                part(i)
            } else {
                Part::unused()
            }
        });
        block_matmuls(mem.src(self.x), &parts[..self.parts.len()]);
        Ok(())
    }
}

/// The kernel of a [`crate::cpu::fuse::Fusion::Products`] node: operands `x` then each
/// member's weight, outputs `n.joined_outs`.
pub(crate) fn joined_block_matmul(n: &LowerInput<'_>) -> Vec<Thunk> {
    let crate::ir::Op::BlockMatMul(op) = &n.node.op else {
        unreachable!("only block products join")
    };
    let x = n.shapes[0];
    let rows = numel(&x[..x.len() - 1]);
    let k = x[x.len() - 1];
    let parts = n.shapes[1..]
        .iter()
        .zip(&n.views[1..])
        .zip(&n.joined_outs)
        .map(|((w, &view), &out)| {
            let dims = BlockDims::new(op.format, op.activations, rows, w[0], k);
            (dims, view, out)
        })
        .collect();
    vec![boxed(JoinedBlockMatMul {
        x: n.views[0],
        parts,
    })]
}

/// Rows of blocks turned into their values.
#[derive(Clone, Debug)]
pub(crate) struct BlockDequantize {
    pub format: GgmlType,
    pub w: View,
    pub out: View,
}

impl Kernel for BlockDequantize {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, 4)],
            reads: vec![(self.w, 1)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        block_dequantize(self.format, mem.src(self.w), mem.dst(self.out));
        Ok(())
    }
}

/// The GEMM plan of a matmul of these sizes, its batch entries (offsets into `a` and `b`)
/// and the workers they are spread over: decided alike for its scratch and its thunk.
fn gemm_layout(
    n: &Sizes<'_>,
    transpose_a: bool,
    transpose_b: bool,
) -> (GemmPlan, Vec<(usize, usize)>, usize) {
    let (dims, batches) = matmul_layout(
        transpose_a,
        transpose_b,
        n.operands[0],
        n.operands[1],
        n.out,
    );
    let workers = batch_workers(dims, batches.len(), n.threads);
    let product_threads = if workers > 1 { 1 } else { n.threads };
    let plan = GemmPlan::new(dims, product_threads, kernel_shape(accumulator(n.dtype)));
    (plan, batches, workers)
}

/// The GEMM of a matmul, its epilogue (`cpu::fuse::matmul`) applied to the product.
pub(super) fn gemm(
    n: &LowerInput<'_>,
    transpose_a: bool,
    transpose_b: bool,
    epilogue: Option<&MatMulEpilogue>,
) -> Vec<Thunk> {
    let (plan, batches, batch_workers) = gemm_layout(&n.sizes(), transpose_a, transpose_b);
    let epilogue = epilogue.map(|epilogue| {
        let mut extra = n.views[2..].iter().copied();
        EpilogueViews {
            bias: epilogue.bias.then(|| extra.next()).flatten(),
            activation: epilogue.activation,
            residual: epilogue.residual.then(|| extra.next()).flatten(),
        }
    });
    vec![boxed(MatMul {
        dtype: n.dtype(),
        batch_workers,
        plan,
        batches,
        a: n.views[0],
        b: n.views[1],
        out: n.out,
        scratch: n.scratch[0],
        wide_out: n.scratch.get(1).copied(),
        packed_b: n.packed_b,
        epilogue,
    })]
}

/// The packing slots of [`gemm`], one per batch worker, and for f16/bf16 the f32 product
/// of each before it is narrowed.
pub(super) fn gemm_scratch(
    n: &Sizes<'_>,
    transpose_a: bool,
    transpose_b: bool,
) -> Vec<(DType, usize)> {
    let (plan, _, workers) = gemm_layout(n, transpose_a, transpose_b);
    let mut requests = vec![(accumulator(n.dtype), workers * plan.scratch_len())];
    if matches!(n.dtype, DType::F16 | DType::BF16) {
        requests.push((DType::F32, workers * plan.dims.m * plan.dims.n));
    }
    requests
}

impl Lower for ir::MatMul {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        gemm_scratch(n, self.transpose_a, self.transpose_b)
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        gemm(n, self.transpose_a, self.transpose_b, None)
    }
}

/// LU with partial pivoting in float64, per batch entry.
impl Lower for crate::ops::Solve {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        let a = n.operands[0];
        let size = a[a.len() - 1];
        let k = n.operands[1][a.len() - 1];
        vec![(DType::F64, size * size + size * k)]
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let a = n.shapes[0];
        let rank = a.len();
        vec![boxed(Solve {
            dtype: n.dtype(),
            batch: numel(&a[..rank - 2]),
            n: a[rank - 1],
            k: n.shapes[1][rank - 1],
            a: n.views[0],
            b: n.views[1],
            out: n.out,
            work: n.scratch[0],
            at: n.site(),
        })]
    }
}

impl Lower for ir::BlockDequantize {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(BlockDequantize {
            format: self.format,
            w: n.views[0],
            out: n.out,
        })]
    }
}

impl Lower for ir::BlockMatMul {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let x = n.shapes[0];
        vec![boxed(BlockMatMul {
            dims: BlockDims::new(
                self.format,
                self.activations,
                numel(&x[..x.len() - 1]),
                n.shapes[1][0],
                x[x.len() - 1],
            ),
            x: n.views[0],
            w: n.views[1],
            out: n.out,
        })]
    }
}

impl Lower for ir::QuantizedMatMul {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let x = n.shapes[0];
        vec![boxed(QuantizedMatMul {
            dtype: n.dtype(),
            dims: QuantDims {
                rows: numel(&x[..x.len() - 1]),
                n: n.shapes[1][0],
                k: x[x.len() - 1],
                bits: self.bits,
                group: self.group_size,
            },
            x: n.views[0],
            w: n.views[1],
            scales: n.views[2],
            biases: n.views[3],
            out: n.out,
        })]
    }
}

impl Lower for ir::Dequantize {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Dequantize {
            dtype: n.dtype(),
            dims: QuantDims {
                rows: 0,
                n: n.shapes[0][0],
                k: n.shapes[0][1] * 8 / usize::from(self.bits),
                bits: self.bits,
                group: self.group_size,
            },
            w: n.views[0],
            scales: n.views[1],
            biases: n.views[2],
            out: n.out,
        })]
    }
}

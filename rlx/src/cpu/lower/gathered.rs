//! Gathered and scattered products (`gather_matmul`, `scatter_matmul`): pairs sorted by
//! matrix, each matrix's rows multiplied as one block.

use super::geometry::numel;
use super::{Lower, LowerInput, Sizes, boxed};
use crate::backend::{NodeSite, RunError};
use crate::cpu::kernels::gathered::{self, PairDims, Sorted, sort_pairs};
use crate::cpu::kernels::gemm::{kernel_shape, serial_scratch_bound, serial_scratch_len};
use crate::cpu::kernels::numeric::accumulator;
use crate::cpu::thunk::{Accesses, Kernel, Thunk, float_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, DType};

/// The pairs of a node: operand 0 holds the rows, operand 2 the indices, `n` columns per
/// product and `groups` matrices.
fn pair_dims(operands: &[&[usize]], groups: usize, n: usize) -> PairDims {
    let (x, indices) = (operands[0], operands[2]);
    let per_token = if x.len() == indices.len() {
        indices[indices.len() - 1]
    } else {
        1
    };
    PairDims {
        pairs: numel(indices),
        per_token: per_token.max(1),
        groups,
        k: x[x.len() - 1],
        n,
    }
}

/// The sort's scratch and the rows and results gathered for it, in the accumulator type.
fn pair_scratch(d: &PairDims, acc: DType) -> Vec<(DType, usize)> {
    vec![
        (DType::I64, d.pairs),
        (DType::I64, d.groups + 1),
        (acc, d.pairs * d.k),
        (acc, d.pairs * d.n),
    ]
}

/// What both products write: the output, the sort's order and starts (`i64`), and the
/// accumulator scratch after them; their reads are each product's own.
fn pair_accesses(dtype: DType, out: View, scratch: &[View]) -> Accesses {
    let acc = accumulator(dtype).size_bytes();
    let mut writes = vec![(out, dtype.size_bytes()), (scratch[0], 8), (scratch[1], 8)];
    writes.extend(scratch[2..].iter().map(|v| (*v, acc)));
    Accesses {
        writes,
        reads: Vec::new(),
    }
}

/// The pairs of `indices` (`i32` or `i64`) sorted by matrix, or the first index out of range.
fn sorted<'m>(
    mem: &'m Memory,
    d: &PairDims,
    index: DType,
    indices: View,
    scratch: &[View],
    at: NodeSite,
) -> Result<Sorted<'m>, RunError> {
    let (order, starts) = (mem.dst::<i64>(scratch[0]), mem.dst::<i64>(scratch[1]));
    let result = if index == DType::I32 {
        let idx = mem.src::<i32>(indices);
        sort_pairs(d.pairs, d.groups, |p| i64::from(idx[p]), order, starts)
    } else {
        let idx = mem.src::<i64>(indices);
        sort_pairs(d.pairs, d.groups, |p| idx[p], order, starts)
    };
    result.map_err(|index| RunError::IndexOutOfRange {
        at,
        index,
        size: d.groups,
    })
}

/// `out[p] = x[row(p)] · w[indices[p]]`.
#[derive(Clone, Debug)]
pub(crate) struct GatherMatMul {
    pub dtype: DType,
    pub index: DType,
    pub dims: PairDims,
    pub transpose_b: bool,
    pub x: View,
    pub w: View,
    pub indices: View,
    pub out: View,
    /// `w` packed at bind time (a weight), in the accumulator type.
    pub packed: Option<View>,
    /// Order, starts, gathered rows, products, packing slots.
    pub scratch: Vec<View>,
    pub slot_len: usize,
    pub at: NodeSite,
}

impl Kernel for GatherMatMul {
    fn accesses(&self) -> Accesses {
        let mut accesses = pair_accesses(self.dtype, self.out, &self.scratch);
        accesses.reads.extend([
            (self.x, self.dtype.size_bytes()),
            (self.w, self.dtype.size_bytes()),
        ]);
        let acc = accumulator(self.dtype).size_bytes();
        accesses.reads.extend(self.packed.map(|v| (v, acc)));
        accesses.reads.push((self.indices, self.index.size_bytes()));
        accesses
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        // An empty result reads nothing (as MLX, which never runs it).
        if self.out.len == 0 {
            return Ok(());
        }
        let sorted = sorted(
            mem,
            &self.dims,
            self.index,
            self.indices,
            &self.scratch,
            self.at,
        )?;
        let v = &self.scratch;
        float_type!(self.dtype, |T| gathered::gather_matmul::<T>(
            self.dims,
            self.transpose_b,
            &sorted,
            mem.src(self.x),
            mem.src(self.w),
            self.packed.map(|p| mem.src(p)),
            mem.dst(v[2]),
            mem.dst(v[3]),
            mem.dst(v[4]),
            self.slot_len,
            mem.dst(self.out)
        ));
        Ok(())
    }
}

/// `out[e] = Σ x[row(p)]ᵀ · g[p]` over the pairs of matrix `e`.
#[derive(Clone, Debug)]
pub(crate) struct ScatterMatMul {
    pub dtype: DType,
    pub index: DType,
    pub dims: PairDims,
    pub transpose: bool,
    pub x: View,
    pub g: View,
    pub indices: View,
    pub out: View,
    /// Order, starts, gathered rows, gathered cotangents, packing slots, and for f16/bf16
    /// a wide block per worker.
    pub scratch: Vec<View>,
    pub slot_len: usize,
    pub at: NodeSite,
}

impl Kernel for ScatterMatMul {
    fn accesses(&self) -> Accesses {
        let mut accesses = pair_accesses(self.dtype, self.out, &self.scratch);
        let s = self.dtype.size_bytes();
        accesses.reads.extend([
            (self.x, s),
            (self.g, s),
            (self.indices, self.index.size_bytes()),
        ]);
        accesses
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        // An empty result reads nothing (as MLX, which never runs it).
        if self.out.len == 0 {
            return Ok(());
        }
        let sorted = sorted(
            mem,
            &self.dims,
            self.index,
            self.indices,
            &self.scratch,
            self.at,
        )?;
        let v = &self.scratch;
        float_type!(self.dtype, |T| gathered::scatter_matmul::<T>(
            self.dims,
            self.transpose,
            &sorted,
            mem.src(self.x),
            mem.src(self.g),
            mem.dst(v[2]),
            mem.dst(v[3]),
            mem.dst(v[4]),
            self.slot_len,
            v.get(5).map(|w| mem.dst(*w)),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

/// The dims and packing slot of a gathered product.
fn gather_layout(n: &Sizes<'_>) -> (PairDims, usize) {
    let (w, out) = (n.operands[1], n.out);
    let d = pair_dims(n.operands, w[0], out[out.len() - 1]);
    let slot = serial_scratch_bound(d.pairs, d.k, d.n, kernel_shape(accumulator(n.dtype)));
    (d, slot)
}

/// The dims and packing slot of a scattered product.
fn scatter_layout(n: &Sizes<'_>, groups: usize, transpose: bool) -> (PairDims, usize) {
    let g = n.operands[1];
    let d = pair_dims(n.operands, groups, g[g.len() - 1]);
    let (m, cols) = if transpose { (d.n, d.k) } else { (d.k, d.n) };
    let slot = serial_scratch_len(m, cols, d.pairs, kernel_shape(accumulator(n.dtype)));
    (d, slot)
}

impl Lower for ir::GatherMatMul {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        let (d, slot) = gather_layout(n);
        let acc = accumulator(n.dtype);
        let mut requests = pair_scratch(&d, acc);
        requests.push((acc, n.threads.max(1) * slot));
        requests
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let (dims, slot_len) = gather_layout(&n.sizes());
        vec![boxed(GatherMatMul {
            dtype: n.dtype(),
            index: n.dtypes[2],
            dims,
            transpose_b: self.transpose_b,
            x: n.views[0],
            w: n.views[1],
            indices: n.views[2],
            out: n.out,
            packed: n.packed_b,
            scratch: n.scratch.clone(),
            slot_len,
            at: n.site(),
        })]
    }
}

impl Lower for ir::ScatterMatMul {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        let (d, slot) = scatter_layout(n, self.groups, self.transpose);
        let acc = accumulator(n.dtype);
        let threads = n.threads.max(1);
        let mut requests = pair_scratch(&d, acc);
        requests.push((acc, threads * slot));
        if matches!(n.dtype, DType::F16 | DType::BF16) {
            requests.push((acc, threads * d.k * d.n));
        }
        requests
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let (dims, slot_len) = scatter_layout(&n.sizes(), self.groups, self.transpose);
        vec![boxed(ScatterMatMul {
            dtype: n.dtype(),
            index: n.dtypes[2],
            dims,
            transpose: self.transpose,
            x: n.views[0],
            g: n.views[1],
            indices: n.views[2],
            out: n.out,
            scratch: n.scratch.clone(),
            slot_len,
            at: n.site(),
        })]
    }
}

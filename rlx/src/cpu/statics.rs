//! The static region: what every run reads and none writes. Weights and constants, each
//! 64-byte aligned, then the weights that matmuls read as `b`, packed for the GEMM once
//! when they are bound. A weight that only packed products read is kept packed alone: its
//! bytes as bound would be a second copy of it that nothing reads (for a float model, as
//! many bytes as the model).

use super::AlignedBytes;
use super::fuse::Fusion;
use super::kernels::gemm::{
    GemmAcc, GemmDims, KernelShape, kernel_shape, pack_b_whole, packed_b_len, unpack_b_whole,
};
use super::kernels::numeric::{FloatStore, accumulator};
use super::memory::ALIGN;
use super::thunk::float_type;
use crate::backend::CompileError;
use crate::ir::{DType, Graph, MatMul, NodeId, Op};

/// A param: where its bytes go in the static region (indexed like the executable's
/// [`ParamTable`](crate::backend::shared::ParamTable), in graph order).
pub(crate) struct ParamSlot {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Where its bytes as bound are kept; `None` when only its packings are (nothing reads
    /// it otherwise).
    pub offset: Option<usize>,
    /// Packed copies of this weight for the matmuls that read it as `b`, made when it is
    /// bound.
    pub packings: Vec<Packing>,
}

/// Where one weight's GEMM packing lives in the static region, and how to read the weight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Packing {
    /// Byte offset in the static region.
    pub offset: usize,
    /// `k`, `n` and the strides of the weight as `b` (`m` unused).
    pub dims: GemmDims,
    /// Matrices the weight stacks (a gathered product's experts), each packed in turn;
    /// 1 for a matmul's 2-D weight.
    pub matrices: usize,
}

impl Packing {
    /// Packs `weight` (the param's bytes, `dtype` values, any alignment) into this packing
    /// in `statics`.
    pub(crate) fn pack(&self, statics: &mut [u8], dtype: DType, weight: &[u8]) {
        fn pack<S: FloatStore>(p: &Packing, statics: &mut [u8], weight: &[u8])
        where
            S::Acc: GemmAcc,
        {
            let shape = S::Acc::micro_kernels().shape;
            let len = packed_b_len(p.dims.k, p.dims.n, shape);
            let out: &mut [S::Acc] = bytemuck::cast_slice_mut(
                &mut statics[p.offset..p.offset + p.matrices * len * size_of::<S::Acc>()],
            );
            // A weight borrowed from a file may sit at any byte: such a one is copied into
            // aligned values first.
            let mut copied: Vec<S> = Vec::new();
            let b: &[S] = match bytemuck::try_cast_slice(weight) {
                Ok(values) => values,
                Err(_) => {
                    copied.resize(weight.len() / size_of::<S>(), S::zeroed());
                    bytemuck::cast_slice_mut(&mut copied).copy_from_slice(weight);
                    &copied
                }
            };
            let size = p.dims.k * p.dims.n;
            for (i, packed) in out
                .chunks_exact_mut(len.max(1))
                .take(p.matrices)
                .enumerate()
            {
                pack_b_whole::<S>(&p.dims, &b[i * size..], shape, packed);
            }
        }
        // Matmuls are float-only: only float weights get a packing.
        float_type!(dtype, |T| pack::<T>(self, statics, weight))
    }

    /// The weight this packing was made from, as `dtype` bytes (exact: a packing holds
    /// every value, widened at most to its accumulator type).
    pub(crate) fn unpack(&self, statics: &[u8], dtype: DType, weight: &mut [u8]) {
        fn unpack<S: FloatStore>(p: &Packing, statics: &[u8], weight: &mut [u8])
        where
            S::Acc: GemmAcc,
        {
            let shape = S::Acc::micro_kernels().shape;
            let len = packed_b_len(p.dims.k, p.dims.n, shape);
            let packed: &[S::Acc] = bytemuck::cast_slice(
                &statics[p.offset..p.offset + p.matrices * len * size_of::<S::Acc>()],
            );
            let size = p.dims.k * p.dims.n;
            let mut values = vec![S::zeroed(); p.matrices * size];
            for (i, b) in values
                .chunks_exact_mut(size.max(1))
                .take(p.matrices)
                .enumerate()
            {
                unpack_b_whole::<S>(&p.dims, &packed[i * len..], shape, b);
            }
            weight.copy_from_slice(bytemuck::cast_slice(&values));
        }
        float_type!(dtype, |T| unpack::<T>(self, statics, weight))
    }
}

/// The static region's layout.
pub(crate) struct StaticLayout {
    pub params: Vec<ParamSlot>,
    /// Byte offset in the static region of each param and constant node (a param kept
    /// packed alone points at its first packing, which nothing reads as the param).
    pub offsets: Vec<Option<usize>>,
    /// Byte offset and element count of the packed `b` of each matmul whose `b` is a 2-D
    /// weight (or a gathered product's stacked ones).
    pub packed_b: Vec<Option<(usize, usize)>>,
    pub len: usize,
}

/// A packing a matmul asks for, before it has a place.
struct Wanted {
    param: usize,
    dims: GemmDims,
    matrices: usize,
    len: usize,
    bytes: usize,
}

/// Lays out graph `g`'s static region as the CPU runs it (its `fusions` final), refusing a
/// region longer than `limit`.
pub(crate) fn lay_out(
    g: &Graph,
    fusions: &[Option<Fusion>],
    limit: Option<usize>,
) -> Result<StaticLayout, CompileError> {
    let refused = |bytes| CompileError::OutOfMemory { bytes, limit };
    let mut params = Vec::new();
    let mut param_of = vec![None; g.len()];
    for (id, node) in g.iter() {
        if matches!(node.op, Op::Param) {
            param_of[id.index()] = Some(params.len());
            params.push(ParamSlot {
                dtype: node.ty.dtype,
                shape: node.ty.shape.static_dims().unwrap_or_default(),
                offset: None,
                packings: Vec::new(),
            });
        }
    }

    // Matmuls whose `b` is a 2-D weight, and gathered products whose matrices are a
    // weight, read it packed once at bind time (one packing per weight and orientation,
    // shared by the products that agree on it).
    let mut wanted: Vec<Wanted> = Vec::new();
    let mut packed_by = vec![None; g.len()];
    // Whether each param has a packing (then it is a float: matmuls take floats only).
    let mut packed = vec![false; params.len()];
    for (id, node) in g.iter() {
        let Some((b, dims, matrices)) = packed_operand(g, fusions, id) else {
            continue;
        };
        let Some(param) = param_of[b.index()] else {
            continue;
        };
        let shape = kernel_shape(accumulator(node.ty.dtype));
        let at = match wanted
            .iter()
            .position(|w| w.param == param && w.dims == dims && w.matrices == matrices)
        {
            Some(at) => at,
            None => {
                let len = packed_len(matrices, dims, shape).ok_or(refused(usize::MAX))?;
                let bytes = len
                    .checked_mul(accumulator(node.ty.dtype).size_bytes())
                    .ok_or(refused(usize::MAX))?;
                wanted.push(Wanted {
                    param,
                    dims,
                    matrices,
                    len,
                    bytes,
                });
                packed[param] = true;
                wanted.len() - 1
            }
        };
        packed_by[id.index()] = Some(at);
    }

    // A param without a packing, or read other than as a packed `b`, keeps its bytes as
    // bound.
    let mut read_raw: Vec<bool> = packed.iter().map(|p| !p).collect();
    let mut mark = |node: NodeId| {
        if let Some(p) = param_of[node.index()] {
            read_raw[p] = true;
        }
    };
    for (id, node) in g.iter() {
        let operands = match &fusions[id.index()] {
            Some(fusion) => fusion.operands(),
            None => &node.inputs,
        };
        for (i, &operand) in operands.iter().enumerate() {
            if i != 1 || packed_by[id.index()].is_none() {
                mark(operand);
            }
        }
    }
    g.outputs().iter().for_each(|o| mark(o.node));
    g.writes().iter().for_each(|w| mark(w.node));

    let mut len = 0usize;
    let mut place = |bytes: Option<usize>| -> Result<usize, CompileError> {
        let offset = len.div_ceil(ALIGN) * ALIGN;
        let end = bytes
            .and_then(|b| offset.checked_add(b))
            .ok_or(refused(usize::MAX))?;
        if limit.is_some_and(|limit| end > limit) {
            return Err(refused(end));
        }
        len = end;
        Ok(offset)
    };
    let mut offsets = vec![None; g.len()];
    for (id, node) in g.iter() {
        let bytes = match (&node.op, param_of[id.index()]) {
            (Op::Param, Some(p)) if !read_raw[p] => continue,
            // A shape whose byte count overflows is refused by `place`.
            (Op::Param, _) => node.ty.static_bytes(),
            (Op::Constant(c), _) => Some(c.bytes().len()),
            _ => continue,
        };
        let offset = place(bytes)?;
        offsets[id.index()] = Some(offset);
        if let Some(p) = param_of[id.index()] {
            params[p].offset = Some(offset);
        }
    }
    let mut placed = Vec::with_capacity(wanted.len());
    for w in &wanted {
        let offset = place(Some(w.bytes))?;
        params[w.param].packings.push(Packing {
            offset,
            dims: w.dims,
            matrices: w.matrices,
        });
        placed.push(offset);
    }
    // A param kept packed alone points at its first packing, at least as long as its bytes.
    for (offset, p) in offsets.iter_mut().zip(&param_of) {
        if let Some(p) = p.filter(|&p| !read_raw[p]) {
            *offset = params[p].packings.first().map(|packing| packing.offset);
        }
    }
    let packed_b = packed_by
        .iter()
        .map(|at| at.map(|at: usize| (placed[at], wanted[at].len)))
        .collect();
    Ok(StaticLayout {
        params,
        offsets,
        packed_b,
        len,
    })
}

/// The static region's bytes: zero but for the constants.
pub(crate) fn allocate(
    g: &Graph,
    layout: &StaticLayout,
    limit: Option<usize>,
) -> Result<AlignedBytes, CompileError> {
    let mut statics = AlignedBytes::default();
    statics
        .try_resize(layout.len)
        .map_err(|_| CompileError::OutOfMemory {
            bytes: layout.len,
            limit,
        })?;
    for (id, node) in g.iter() {
        if let (Op::Constant(c), Some(offset)) = (&node.op, layout.offsets[id.index()]) {
            statics.bytes_mut()[offset..offset + c.bytes().len()].copy_from_slice(c.bytes());
        }
    }
    Ok(statics)
}

/// The weight node that node `id` reads packed as its `b`, the GEMM dims it is read with and
/// the matrices it stacks, if it reads one.
fn packed_operand(
    g: &Graph,
    fusions: &[Option<Fusion>],
    id: NodeId,
) -> Option<(NodeId, GemmDims, usize)> {
    let node = &g[id];
    let (transpose_b, b) = match (&fusions[id.index()], &node.op) {
        (
            Some(Fusion::MatMul {
                transpose_b,
                operands,
                ..
            }),
            _,
        ) => (*transpose_b, operands[1]),
        (None, Op::MatMul(MatMul { transpose_b, .. })) => (*transpose_b, node.inputs[1]),
        // A gathered product's stacked matrices, each packed as a matmul's.
        (None, Op::GatherMatMul(op)) => (op.transpose_b, node.inputs[1]),
        _ => return None,
    };
    let b_node = &g[b];
    let mut shape = b_node.ty.shape.static_dims()?;
    let stacked = matches!(node.op, Op::GatherMatMul(_));
    let matrices = if stacked && shape.len() == 3 {
        shape.remove(0)
    } else {
        1
    };
    if !matches!(b_node.op, Op::Param) || shape.len() != 2 {
        return None;
    }
    let (k, n) = if transpose_b {
        (shape[1], shape[0])
    } else {
        (shape[0], shape[1])
    };
    let dims = GemmDims {
        m: 0,
        n,
        k,
        a_rs: 0,
        a_cs: 0,
        b_rs: if transpose_b { 1 } else { n },
        b_cs: if transpose_b { k } else { 1 },
    };
    Some((b, dims, matrices))
}

/// Elements of `matrices` whole packings of `dims`, if that count fits.
fn packed_len(matrices: usize, dims: GemmDims, shape: KernelShape) -> Option<usize> {
    let per = dims
        .k
        .checked_mul(dims.n.div_ceil(shape.nr).checked_mul(shape.nr)?)?;
    matrices.checked_mul(per)
}

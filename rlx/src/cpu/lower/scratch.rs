//! The scratch memory each node asks the planner for (GEMM packing, attention rows and
//! tiles, im2col columns, sort orders, LU workspace), decided from concrete shapes.

use super::geometry::{batch_workers, conv_geometry, matmul_layout, numel};
use crate::cpu::fuse::Fusion;
use crate::cpu::kernels::gemm::{GemmPlan, kernel_shape};
use crate::cpu::kernels::nn::AttentionTiling;
use crate::cpu::kernels::numeric::accumulator;
use crate::ir::{DType, Node};
use crate::ir::{MatMul, Sort, TopK};
use crate::ops::Lowerable;

/// How an attention of these query, key and output shapes is blocked.
pub(super) fn attention_tiling(
    dtype: DType,
    q: &[usize],
    k: &[usize],
    out: &[usize],
    threads: usize,
) -> AttentionTiling {
    let rank = q.len();
    AttentionTiling::new(
        numel(&q[..rank - 2]),
        q[rank - 2],
        k[rank - 2],
        q[rank - 1],
        out[rank - 1],
        threads,
        kernel_shape(accumulator(dtype)),
    )
}

/// Scratch buffers `(dtype, elements)` the node needs while it runs.
pub(crate) fn scratch_requests(
    node: &Node,
    fusion: Option<&Fusion>,
    operands: &[&[usize]],
    out: &[usize],
    threads: usize,
) -> Vec<(DType, usize)> {
    let dtype = node.ty.dtype;
    // f16/bf16 products land in f32 before they are narrowed.
    let half = matches!(dtype, DType::F16 | DType::BF16);
    if numel(out) == 0 {
        return Vec::new();
    }
    let gemm = |transpose_a: bool, transpose_b: bool| {
        let (dims, batches) =
            matmul_layout(transpose_a, transpose_b, operands[0], operands[1], out);
        let plan = GemmPlan::new(dims, threads, kernel_shape(accumulator(dtype)));
        let workers = batch_workers(&plan, batches.len(), threads);
        let mut requests = vec![(accumulator(dtype), workers * plan.scratch_len())];
        if half {
            requests.push((DType::F32, workers * dims.m * dims.n));
        }
        requests
    };
    match fusion {
        None => {}
        Some(Fusion::MatMul {
            transpose_a,
            transpose_b,
            ..
        }) => return gemm(*transpose_a, *transpose_b),
        Some(Fusion::Absorbed | Fusion::Elementwise { .. }) => return Vec::new(),
    }
    match node.op.lowerable() {
        Lowerable::MatMul(MatMul {
            transpose_a,
            transpose_b,
        }) => gemm(*transpose_a, *transpose_b),
        Lowerable::TopK(TopK { axis, .. }) | Lowerable::Sort(Sort { axis, .. }) => {
            vec![(DType::I32, operands[0][*axis])]
        }
        Lowerable::Attention(_) => {
            let tiling = attention_tiling(dtype, operands[0], operands[1], out, threads);
            vec![(accumulator(dtype), tiling.workers * tiling.slot_len)]
        }
        Lowerable::Conv(_) | Lowerable::ConvTranspose(_) => {
            conv_geometry(&node.op, dtype, operands[0], operands[1], out, threads)
                .map(|(_, scratch)| scratch)
                .unwrap_or_default()
        }
        Lowerable::Solve => {
            let a = operands[0];
            let n = a[a.len() - 1];
            let k = operands[1][a.len() - 1];
            vec![(DType::F64, n * n + n * k)]
        }
        Lowerable::Input
        | Lowerable::Param
        | Lowerable::Constant(_)
        | Lowerable::Unary(_)
        | Lowerable::Binary(_)
        | Lowerable::Compare(_)
        | Lowerable::Where
        | Lowerable::Cast(_)
        | Lowerable::Reduce(_)
        | Lowerable::ArgReduce(_)
        | Lowerable::Cumsum(_)
        | Lowerable::Reshape(_)
        | Lowerable::StopGradient
        | Lowerable::Permute(_)
        | Lowerable::Slice(_)
        | Lowerable::Concat(_)
        | Lowerable::Broadcast(_)
        | Lowerable::Pad(_)
        | Lowerable::Gather(_)
        | Lowerable::ScatterAdd(_)
        | Lowerable::Pool(_)
        | Lowerable::Upsample(_)
        | Lowerable::QuantizedMatMul(_)
        | Lowerable::Custom(_)
        | Lowerable::Composite(_) => Vec::new(),
    }
}

//! Where the bytes of weights and inputs live on a GPU.
//!
//! Two placements matter on MLX's CUDA backend (measured on an H100, MiniLM, ARCHITECTURE.md):
//!
//! - **Weights that are only ever the right operand of a matrix product** are stored
//!   K-major: transposed in memory and handed to MLX as a transposed view, so cuBLAS runs
//!   its "T" layout (the one PyTorch's `[out, in]` weights give). TF32 tensor cores read
//!   that operand directly; the other layout cost MiniLM's GEMMs 1.7x at 256x128.
//! - **Host inputs and weights** (token ids, masks, embedding tables) are copied into
//!   device memory of RLX's own, not MLX's allocator (`rlx_mlx_array_from_bytes`). MLX keeps
//!   arrays made from host bytes in CUDA managed memory and recycles freed buffers into the
//!   cache its GPU kernels take outputs from; a kernel touching a page that lives on the
//!   host faults and migrates it then. That cost MiniLM 0.1-0.4 ms per kernel reading its
//!   ids, and up to 135 us for a 3 us divide whose output landed in such a buffer.

use crate::backend::shared::ParamTable;
use crate::gguf::GgmlType;
use crate::ir::MatMul;
use crate::ir::{Graph, NodeId, Op};

use super::lower::PreparedWeight;
use super::{MlxError, ops::block_prepared_parts};

/// Per param of `params`: whether it is stored K-major, which is when it has rank 2 or more
/// and every use of it is as the right operand of a matrix product that reads it
/// untransposed. A param with any other use keeps MLX's row-major layout, which elementwise
/// and indexing kernels read fastest.
pub(crate) fn k_major_params(graph: &Graph, params: &ParamTable) -> Vec<bool> {
    let users = graph.users();
    params
        .specs
        .iter()
        .map(|spec| {
            let uses = &users[spec.node.index()];
            spec.shape.len() >= 2
                && !uses.is_empty()
                && !graph.outputs().iter().any(|o| o.node == spec.node)
                && uses.iter().all(|&user| {
                    let node = &graph[user];
                    let untransposed_rhs = matches!(
                        node.op,
                        Op::MatMul(MatMul {
                            transpose_b: false,
                            ..
                        })
                    );
                    untransposed_rhs
                        && node.inputs.get(1) == Some(&spec.node)
                        && node.inputs.iter().filter(|&&i| i == spec.node).count() == 1
                })
        })
        .collect()
}

/// Per param of `params`: the GGUF block format it is multiplied in when it is the weight of
/// a block product (`block_matmul`), so that binding it makes its MLX form once
/// (`Array::block_prepare`) rather than every run converting the blocks
/// again: for a decoding step, that conversion was most of the step. The first product's
/// format counts; a product in another format reads the bytes as before.
pub(crate) fn block_weight_params(graph: &Graph, params: &ParamTable) -> Vec<Option<GgmlType>> {
    let mut formats = vec![None; params.specs.len()];
    let index: std::collections::HashMap<NodeId, usize> = params
        .specs
        .iter()
        .enumerate()
        .map(|(i, spec)| (spec.node, i))
        .collect();
    for (_, node) in graph.iter() {
        if let (Op::BlockMatMul(product), Some(weight)) = (&node.op, node.inputs.get(1))
            && let Some(&i) = index.get(weight)
        {
            formats[i].get_or_insert(product.format);
        }
    }
    formats
}

/// Per node of `graph`: where the MLX form of a block weight (a param with a format in
/// `formats`) lies in a call's leaves. The forms follow the `leaf_count` other leaves
/// (params, inputs, states), in param order; how many arrays each has is the shim's
/// answer ([`block_prepared_parts`]), the one place that decides a format's MLX form.
pub(crate) fn prepared_slots(
    graph: &Graph,
    params: &ParamTable,
    formats: &[Option<GgmlType>],
    leaf_count: usize,
) -> Result<Vec<Option<PreparedWeight>>, MlxError> {
    let mut slots = vec![None; graph.len()];
    let mut first = leaf_count;
    for (spec, &format) in params.specs.iter().zip(formats) {
        let Some(format) = format else { continue };
        let count = block_prepared_parts(format.id())?;
        slots[spec.node.index()] = Some(PreparedWeight {
            first,
            count,
            format,
        });
        first += count;
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::GraphBuilder;
    use crate::ir::DType;

    #[test]
    fn only_params_read_solely_as_untransposed_right_operands_go_k_major() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2, 3]).unwrap();
        let rhs = b.param("rhs", DType::F32, [3, 3]).unwrap();
        let also_added = b.param("also_added", DType::F32, [3, 3]).unwrap();
        let lhs = b.param("lhs", DType::F32, [3, 3]).unwrap();
        let stored_t = b.param("stored_t", DType::F32, [3, 3]).unwrap();
        let bias = b.param("bias", DType::F32, [3]).unwrap();
        let y = b.matmul(x, rhs).unwrap();
        let y = b.matmul(y, also_added).unwrap();
        let y = b.add(y, bias).unwrap();
        let z = b.add(also_added, lhs).unwrap();
        let z = b.matmul(lhs, z).unwrap();
        let w = b
            .op(
                Op::MatMul(MatMul {
                    transpose_a: false,
                    transpose_b: true,
                }),
                &[y, stored_t],
            )
            .unwrap();
        b.output("y", w).unwrap();
        b.output("z", z).unwrap();
        let g = b.finish().unwrap();
        let params = ParamTable::of(&g);
        let chosen: Vec<(&str, bool)> = params
            .specs
            .iter()
            .map(|s| s.name.as_str())
            .zip(k_major_params(&g, &params))
            .collect();
        assert_eq!(
            chosen,
            [
                ("rhs", true),
                ("also_added", false),
                ("lhs", false),
                ("stored_t", false),
                ("bias", false),
            ]
        );
    }
}

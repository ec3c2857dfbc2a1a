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
use crate::ir::{Dim, Graph, NodeId, Op};

use super::lower::{PreparedForm, PreparedWeight};
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
    let index = params.by_node();
    for (_, node) in graph.iter() {
        if let (Op::BlockMatMul(product), Some(weight)) = (&node.op, node.inputs.get(1))
            && let Some(&i) = index.get(weight)
        {
            formats[i].get_or_insert(product.format);
        }
    }
    formats
}

/// Products of one left operand by several weights (a decoder's query, key and value
/// projections; its gate and up projections), each weight a rank-2 param read by that
/// product alone. Binding makes one weight of them all (joined along the output features),
/// and one product of it, sliced per member, replaces theirs: a decoding step ran a
/// matrix-vector kernel per projection, and on a GPU each kernel costs its launch.
#[derive(Clone, Debug)]
pub(crate) struct ProductGroup {
    /// Per member, in graph order: its product node, its weight's param and the columns of
    /// the joined product that are its own.
    pub members: Vec<(NodeId, usize, std::ops::Range<usize>)>,
    /// The members' GGUF block format (`block_matmul`); `None` for float weights
    /// (`matmul`).
    pub format: Option<GgmlType>,
    /// Float weights stored `[N, K]` (`transpose_b`), joined along axis 0; else `[K, N]`,
    /// joined along axis 1.
    pub transposed: bool,
    /// For float weights whose left operand is a block of rows ([`row_block_rank`]): its
    /// rank, at which the joined weight is also stored ([`RowOperand`]).
    pub row_rank: Option<usize>,
}

/// The [`ProductGroup`]s of `graph`: products by the same op (attributes included) of the
/// same left operand, by params of one dtype read by that product alone; block products
/// only by weights `block_formats` prepares in their format. A matmul whose bias add is
/// lowered with it (`folded`) stays alone.
pub(crate) fn product_groups(
    graph: &Graph,
    params: &ParamTable,
    block_formats: &[Option<GgmlType>],
    folded: &[bool],
) -> Vec<ProductGroup> {
    let users = graph.users();
    let index = params.by_node();
    let outputs: std::collections::HashSet<NodeId> =
        graph.outputs().iter().map(|o| o.node).collect();
    // (left operand, the product's op, the weights' dtype) and the members so far.
    let mut found: Vec<(NodeId, &Op, crate::ir::DType, ProductGroup)> = Vec::new();
    for (id, node) in graph.iter() {
        let (format, transposed) = match &node.op {
            Op::MatMul(m) if !m.transpose_a => (None, m.transpose_b),
            Op::BlockMatMul(p) => (Some(p.format), false),
            _ => continue,
        };
        let &[lhs, weight] = node.inputs.as_slice() else {
            continue;
        };
        let Some(&i) = index.get(&weight) else {
            continue;
        };
        let spec = &params.specs[i];
        let alone = users[weight.index()].as_slice() == [id] && !outputs.contains(&weight);
        if !alone || folded[id.index()] || spec.shape.len() != 2 || lhs == weight {
            continue;
        }
        if format.is_some() && block_formats[i] != format {
            continue;
        }
        let width = spec.shape[if transposed || format.is_some() { 0 } else { 1 }];
        let member = |start: usize| (id, i, start..start + width);
        match found
            .iter_mut()
            .find(|(l, op, dtype, _)| *l == lhs && **op == node.op && *dtype == spec.dtype)
        {
            Some((_, _, _, group)) => {
                let start = group.members.last().map_or(0, |m| m.2.end);
                group.members.push(member(start));
            }
            None => found.push((
                lhs,
                &node.op,
                spec.dtype,
                ProductGroup {
                    members: vec![member(0)],
                    format,
                    transposed,
                    row_rank: format
                        .is_none()
                        .then(|| row_block_rank(graph, lhs))
                        .flatten(),
                },
            )),
        }
    }
    found
        .into_iter()
        .map(|(_, _, _, group)| group)
        .filter(|group| group.members.len() >= 2)
        .collect()
}

/// Where a member of a [`ProductGroup`] finds the joined weight in a call's leaves
/// (`count` arrays from `first`: the float weight, then its view at the rows' rank if the
/// group has one, or a block format's MLX form), the
/// group's first product (whose result the others slice) and its columns.
#[derive(Clone, Debug)]
pub(crate) struct FusedSlot {
    pub first: usize,
    pub count: usize,
    pub leader: NodeId,
    pub columns: std::ops::Range<usize>,
    pub format: Option<GgmlType>,
}

/// Per node of `graph`: its [`FusedSlot`] if it is a member of one of `groups`, whose
/// joined weights follow the `leaf_count` other leaves, in group order.
pub(crate) fn fused_slots(
    graph: &Graph,
    groups: &[ProductGroup],
    leaf_count: usize,
) -> Result<Vec<Option<FusedSlot>>, MlxError> {
    let mut slots = vec![None; graph.len()];
    let mut first = leaf_count;
    for group in groups {
        let count = match (group.format, group.row_rank) {
            (Some(format), _) => block_prepared_parts(format.id())?,
            // The joined weight, then its view for blocks of rows.
            (None, Some(_)) => 2,
            (None, None) => 1,
        };
        for (node, _, columns) in &group.members {
            slots[node.index()] = Some(FusedSlot {
                first,
                count,
                leader: group.members[0].0,
                columns: columns.clone(),
                format: group.format,
            });
        }
        first += count;
    }
    Ok(slots)
}

/// The rank of `x` when it is a block of rows: rank 3 or more with every leading dim (all
/// but the last two) 1 when the graph is built, as a batch of one sequence is.
pub(crate) fn row_block_rank(graph: &Graph, x: NodeId) -> Option<usize> {
    let dims = graph[x].ty.shape.dims();
    (dims.len() >= 3 && dims[..dims.len() - 2].iter().all(Dim::is_one)).then_some(dims.len())
}

/// A float weight also stored as the right operand of the products that multiply a block of
/// rows by it ([`row_block_rank`]): `[K, N]` (the transposed view of an `[N, K]` weight
/// read with `transpose_b`) with leading dims of 1 up to the rows' `rank`. MLX then
/// multiplies the rows by it as they are, where a matrix of lower rank costs an
/// `expand_dims` node per product and run (121 of a SmolLM2 decoding step's 1,027 nodes).
/// It is a view, evaluated when the weight is bound: no bytes of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowOperand {
    pub rank: usize,
    pub transposed: bool,
}

/// Per param of `params`: its [`RowOperand`] when it is a float matrix that some product
/// multiplies a block of rows by (the first such product decides), unless `grouped` says
/// its product reads its group's joined weight. (Block weights are bytes, never float.)
pub(crate) fn row_operand_params(
    graph: &Graph,
    params: &ParamTable,
    grouped: &[bool],
) -> Vec<Option<RowOperand>> {
    let users = graph.users();
    params
        .specs
        .iter()
        .zip(grouped)
        .map(|(spec, &grouped)| {
            if grouped || spec.shape.len() != 2 || !spec.dtype.is_float() {
                return None;
            }
            users[spec.node.index()].iter().find_map(|&user| {
                let node = &graph[user];
                let Op::MatMul(MatMul {
                    transpose_a: false,
                    transpose_b,
                }) = node.op
                else {
                    return None;
                };
                let &[lhs, rhs] = node.inputs.as_slice() else {
                    return None;
                };
                if rhs != spec.node || lhs == spec.node {
                    return None;
                }
                let rank = row_block_rank(graph, lhs)?;
                Some(RowOperand {
                    rank,
                    transposed: transpose_b,
                })
            })
        })
        .collect()
}

/// Per node of `graph`: where the form a param is bound with beside its value lies in a
/// call's leaves: the MLX form of a block weight (a param with a format in `formats`; how
/// many arrays it has is the shim's answer, [`block_prepared_parts`], the one place that
/// decides a format's MLX form), or a float weight's [`RowOperand`] (one array, from
/// `rows`). The forms follow the `leaf_count` other leaves (params, inputs, states), in
/// param order.
pub(crate) fn prepared_slots(
    graph: &Graph,
    params: &ParamTable,
    formats: &[Option<GgmlType>],
    rows: &[Option<RowOperand>],
    leaf_count: usize,
) -> Result<Vec<Option<PreparedWeight>>, MlxError> {
    let mut slots = vec![None; graph.len()];
    let mut first = leaf_count;
    for ((spec, &format), &row) in params.specs.iter().zip(formats).zip(rows) {
        let (form, count) = match (format, row) {
            (Some(format), _) => (
                PreparedForm::Blocks(format),
                block_prepared_parts(format.id())?,
            ),
            (None, Some(row)) => (PreparedForm::Rows(row), 1),
            (None, None) => continue,
        };
        slots[spec.node.index()] = Some(PreparedWeight { first, count, form });
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

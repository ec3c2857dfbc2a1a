//! A matmul with the elementwise ops that consume it, in the GEMM's row epilogue.

use super::{Fusion, MatMulEpilogue, record};
use crate::ir::{Graph, MatMul, NodeId, Op};
use crate::passes::epilogue::{bias_add, residual_add};

/// Folds into each float matmul the chain of ops that alone consume its result, in this
/// order: an add of a `[N]` bias, an elementwise float function, an add of a residual with
/// the product's type. The chain runs as `activation(a·b + bias) + residual`, applied as
/// the product's rows are finished instead of one pass over memory per op. A value the
/// graph returns or that has other users ends the chain, so every value the graph exposes
/// is still stored.
pub(super) fn fuse(graph: &Graph, fusions: &mut [Option<Fusion>]) {
    let users = graph.users();
    let exposed = graph.returned();
    for (id, node) in graph.iter() {
        let Op::MatMul(MatMul {
            transpose_a,
            transpose_b,
        }) = node.op
        else {
            continue;
        };
        if !node.ty.dtype.is_float() || fusions[id.index()].is_some() {
            continue;
        }
        // The one user of `value`, if it has exactly one, is not an output, and no earlier
        // chain took it (an add of two products joins the chain of the first).
        let sole_user =
            |value: NodeId, fusions: &[Option<Fusion>]| match users[value.index()].as_slice() {
                [user] if !exposed[value.index()] && fusions[user.index()].is_none() => Some(*user),
                _ => None,
            };
        let mut operands = node.inputs.clone();
        let mut epilogue = MatMulEpilogue::default();
        // Every node the chain covers, in order; the last one becomes the fused node.
        let mut members = vec![id];
        let end = |members: &[NodeId]| members[members.len() - 1];
        if let Some(user) = sole_user(end(&members), fusions)
            && let Some(bias) = bias_add(graph, end(&members), user)
        {
            epilogue.bias = true;
            operands.push(bias);
            members.push(user);
        }
        if let Some(user) = sole_user(end(&members), fusions)
            && let Op::Unary(kind) = graph[user].op
            && kind.domain().admits(graph[user].ty.dtype)
        {
            epilogue.activation = Some(kind);
            members.push(user);
        }
        if let Some(user) = sole_user(end(&members), fusions)
            && let Some(residual) = residual_add(graph, end(&members), user)
        {
            epilogue.residual = true;
            operands.push(residual);
            members.push(user);
        }
        if members.len() > 1 {
            let fusion = Fusion::MatMul {
                transpose_a,
                transpose_b,
                epilogue,
                operands,
            };
            record(fusions, &members, fusion);
        }
    }
}

//! What a matrix product's consumers do to it, as the backends' fusions of matmul
//! epilogues look for it (the CPU folds a bias, an activation and a residual into its GEMM;
//! MLX hands a bias to its GEMM).

use crate::ir::{BinaryOp, Graph, MatMul, Node, NodeId, Op};

/// `user` adds a `[N]` bias to `product` without changing its type: the bias operand.
pub(crate) fn bias_add(graph: &Graph, product: NodeId, user: NodeId) -> Option<NodeId> {
    let node = &graph[user];
    let other = other_add_operand(node, product)?;
    let (p, o) = (&graph[product].ty, &graph[other].ty);
    let n = p.shape.dims().last()?;
    let is_bias = o.dtype == p.dtype && o.shape.rank() == 1 && o.shape.dims()[0] == *n;
    (is_bias && node.ty == *p).then_some(other)
}

/// `user` adds a value of `value`'s own type to it: the residual operand.
pub(crate) fn residual_add(graph: &Graph, value: NodeId, user: NodeId) -> Option<NodeId> {
    let node = &graph[user];
    let other = other_add_operand(node, value)?;
    let ty = &graph[value].ty;
    (graph[other].ty == *ty && node.ty == *ty).then_some(other)
}

/// Per node: for an add of a `[N]` bias to a float matmul that nothing else reads (and the
/// graph does not return), that matmul and the bias.
#[cfg_attr(not(feature = "mlx"), allow(dead_code))]
pub(crate) fn matmul_bias_adds(graph: &Graph) -> Vec<Option<(NodeId, NodeId)>> {
    let users = graph.users();
    let returned = graph.returned();
    let mut adds = vec![None; graph.len()];
    for (id, node) in graph.iter() {
        if !matches!(node.op, Op::MatMul(MatMul { .. })) || !node.ty.dtype.is_float() {
            continue;
        }
        if let [user] = users[id.index()].as_slice()
            && !returned[id.index()]
            && let Some(bias) = bias_add(graph, id, *user)
        {
            adds[user.index()] = Some((id, bias));
        }
    }
    adds
}

/// The operand of an `add` that is not `value` (`None` for any other op, or `value + value`).
fn other_add_operand(node: &Node, value: NodeId) -> Option<NodeId> {
    if node.op != Op::Binary(BinaryOp::Add) {
        return None;
    }
    match node.inputs.as_slice() {
        [a, b] if *a == value && *b != value => Some(*b),
        [a, b] if *b == value && *a != value => Some(*a),
        _ => None,
    }
}

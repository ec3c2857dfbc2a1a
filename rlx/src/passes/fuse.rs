//! Fusion of a matmul with the elementwise ops that consume it.

use super::Rewriter;
use crate::ir::{BinaryOp, Graph, MatMulEpilogue, Node, NodeId, Op, VerifyError};

/// One matmul and the consumers folded into it.
struct Chain {
    matmul: NodeId,
    epilogue: MatMulEpilogue,
    /// Bias then residual, as present.
    extra: Vec<NodeId>,
}

/// Folds into each matmul the chain of ops that alone consume its result, in this order:
/// an add of a `[N]` bias, an elementwise float function, an add of a residual with the
/// product's type. The chain becomes one [`Op::FusedMatMul`] computing
/// `activation(a·b + bias) + residual` as the product's rows are finished, instead of one
/// pass over memory per op. A value that is a graph output or has other users ends the
/// chain, so every value the graph exposes is still computed.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("rows"), Dim::from(8)])?;
/// let w = b.param("w", DType::F32, [8, 4])?;
/// let bias = b.param("bias", DType::F32, [4])?;
/// let y = b.matmul(x, w)?;
/// let y = b.binary(BinaryOp::Add, y, bias)?;
/// let y = b.unary(UnaryOp::Gelu, y)?;
/// b.output("y", y)?;
/// let fused = rlx::passes::fuse_matmul_epilogues(&b.finish()?)?;
/// assert!(fused.to_string().contains("fused_matmul[+bias, gelu]"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fuse_matmul_epilogues(graph: &Graph) -> Result<Graph, VerifyError> {
    let nodes = graph.nodes();
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); nodes.len()];
    for (id, node) in graph.iter() {
        for input in &node.inputs {
            users[input.index()].push(id);
        }
    }
    let mut exposed = vec![false; nodes.len()];
    for output in graph.outputs() {
        exposed[output.node.index()] = true;
    }
    let mut absorbed = vec![false; nodes.len()];
    let mut chains: Vec<Option<Chain>> = (0..nodes.len()).map(|_| None).collect();
    for (id, node) in graph.iter() {
        // The one user of `value`, if it has exactly one, is not an output, and no earlier
        // chain took it (an add of two products joins the chain of the first).
        let sole_user = |value: NodeId| match users[value.index()].as_slice() {
            [user]
                if !exposed[value.index()]
                    && !absorbed[user.index()]
                    && chains[user.index()].is_none() =>
            {
                Some(*user)
            }
            _ => None,
        };
        if !matches!(node.op, Op::MatMul { .. }) || !node.ty.dtype.is_float() {
            continue;
        }
        let mut chain = Chain {
            matmul: id,
            epilogue: MatMulEpilogue::default(),
            extra: Vec::new(),
        };
        let mut end = id;
        if let Some((user, bias)) = sole_user(end).and_then(|u| bias_add(graph, end, u)) {
            chain.epilogue.bias = true;
            chain.extra.push(bias);
            end = user;
        }
        if let Some(user) = sole_user(end)
            && let Op::Unary(kind) = graph[user].op
            && kind.domain().admits(graph[user].ty.dtype)
        {
            chain.epilogue.activation = Some(kind);
            end = user;
        }
        if let Some((user, residual)) = sole_user(end).and_then(|u| residual_add(graph, end, u)) {
            chain.epilogue.residual = true;
            chain.extra.push(residual);
            end = user;
        }
        if end != id {
            absorbed[id.index()] = true;
            for user in chain_nodes(graph, id, end, &users) {
                absorbed[user.index()] = true;
            }
            absorbed[end.index()] = false;
            chains[end.index()] = Some(chain);
        }
    }

    let mut rw = Rewriter::new(nodes.len());
    for (id, node) in graph.iter() {
        if absorbed[id.index()] {
            continue;
        }
        let Some(chain) = &chains[id.index()] else {
            rw.keep(id, node);
            continue;
        };
        let matmul = &graph[chain.matmul];
        let Op::MatMul {
            transpose_a,
            transpose_b,
        } = matmul.op
        else {
            unreachable!("chains start at matmuls");
        };
        let inputs = matmul
            .inputs
            .iter()
            .chain(&chain.extra)
            .map(|i| rw.get(*i))
            .collect();
        rw.push(
            id,
            Node {
                op: Op::FusedMatMul {
                    transpose_a,
                    transpose_b,
                    epilogue: chain.epilogue,
                },
                inputs,
                ty: node.ty.clone(),
                name: node.name.clone(),
                origin: node.origin,
            },
        );
    }
    rw.finish(graph.outputs())
}

/// The nodes strictly after `start` up to `end` along sole-user links.
fn chain_nodes(graph: &Graph, start: NodeId, end: NodeId, users: &[Vec<NodeId>]) -> Vec<NodeId> {
    let mut out = Vec::new();
    let mut at = start;
    while at != end {
        at = users[at.index()][0];
        out.push(at);
    }
    debug_assert!(out.iter().all(|n| n.index() < graph.len()));
    out
}

/// `user` adds a `[N]` bias to `product` without changing its type: the bias operand.
fn bias_add(graph: &Graph, product: NodeId, user: NodeId) -> Option<(NodeId, NodeId)> {
    let node = &graph[user];
    let other = other_add_operand(node, product)?;
    let (p, o) = (&graph[product].ty, &graph[other].ty);
    let n = p.shape.dims().last()?;
    let is_bias = o.dtype == p.dtype && o.shape.rank() == 1 && o.shape.dims()[0] == *n;
    (is_bias && node.ty == *p).then_some((user, other))
}

/// `user` adds a value of `value`'s own type to it: the residual operand.
fn residual_add(graph: &Graph, value: NodeId, user: NodeId) -> Option<(NodeId, NodeId)> {
    let node = &graph[user];
    let other = other_add_operand(node, value)?;
    let ty = &graph[value].ty;
    (graph[other].ty == *ty && node.ty == *ty).then_some((user, other))
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

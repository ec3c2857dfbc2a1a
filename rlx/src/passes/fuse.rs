//! Fusion of a matmul with the elementwise ops that consume it.

use super::Rewriter;
use crate::ir::{BinaryOp, Graph, MatMulEpilogue, Node, NodeId, Op, VerifyError};
use crate::ir::{FusedMatMul, MatMul};

/// One matmul and the consumers folded into it.
struct Chain {
    /// The matmul's operands, then the bias and the residual as present.
    inputs: Vec<NodeId>,
    transpose_a: bool,
    transpose_b: bool,
    epilogue: MatMulEpilogue,
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
    let users = graph.users();
    let mut exposed = vec![false; nodes.len()];
    for output in graph.outputs() {
        exposed[output.node.index()] = true;
    }
    let mut absorbed = vec![false; nodes.len()];
    let mut chains: Vec<Option<Chain>> = (0..nodes.len()).map(|_| None).collect();
    for (id, node) in graph.iter() {
        let Op::MatMul(MatMul {
            transpose_a,
            transpose_b,
        }) = node.op
        else {
            continue;
        };
        if !node.ty.dtype.is_float() {
            continue;
        }
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
        let mut chain = Chain {
            inputs: node.inputs.clone(),
            transpose_a,
            transpose_b,
            epilogue: MatMulEpilogue::default(),
        };
        // Every node the chain covers, in order; the last one becomes the fused node.
        let mut members = vec![id];
        let end = |members: &[NodeId]| members[members.len() - 1];
        if let Some((user, bias)) =
            sole_user(end(&members)).and_then(|u| bias_add(graph, end(&members), u))
        {
            chain.epilogue.bias = true;
            chain.inputs.push(bias);
            members.push(user);
        }
        if let Some(user) = sole_user(end(&members))
            && let Op::Unary(kind) = graph[user].op
            && kind.domain().admits(graph[user].ty.dtype)
        {
            chain.epilogue.activation = Some(kind);
            members.push(user);
        }
        if let Some((user, residual)) =
            sole_user(end(&members)).and_then(|u| residual_add(graph, end(&members), u))
        {
            chain.epilogue.residual = true;
            chain.inputs.push(residual);
            members.push(user);
        }
        if let Some((last, covered)) = members.split_last()
            && !covered.is_empty()
        {
            for member in covered {
                absorbed[member.index()] = true;
            }
            chains[last.index()] = Some(chain);
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
        rw.push(
            id,
            Node {
                op: Op::FusedMatMul(FusedMatMul {
                    transpose_a: chain.transpose_a,
                    transpose_b: chain.transpose_b,
                    epilogue: chain.epilogue,
                }),
                inputs: chain.inputs.iter().map(|i| rw.get(*i)).collect(),
                ty: node.ty.clone(),
                name: node.name.clone(),
                origin: node.origin,
            },
        );
    }
    rw.finish(graph.outputs())
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

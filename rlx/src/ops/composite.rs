//! Composite ops: ops defined by a decomposition into other ops
//! ([`Primitive::decompose`](super::Primitive::decompose)). The decomposition is the op's
//! meaning: its float64 reference evaluates it, and [`decompose`](crate::passes::decompose)
//! lowers the op as it for a backend without a kernel of its own (a backend with a faster
//! kernel keeps the node whole). Its gradient rule is its own where that is cheaper than
//! differentiating the decomposition (softmax's and the norms' are: decision 017); the
//! gradient table checks the rule against the decomposition's.

use super::ReferenceError;
use super::array::{Array, Out};
use crate::builder::GraphBuilder;
use crate::ir::{Graph, Node, NodeId, Op, TensorType};

/// The graph computing `op` by its decomposition on operands of `types`: inputs `a0`,
/// `a1`, … and the output `y`; `None` for a primitive.
pub(crate) fn expansion(op: &Op, types: &[TensorType]) -> Option<Result<Graph, String>> {
    let mut b = GraphBuilder::new();
    let mut x = Vec::with_capacity(types.len());
    for (i, t) in types.iter().enumerate() {
        match b.input(&format!("a{i}"), t.dtype, t.shape.clone()) {
            Ok(id) => x.push(id),
            Err(e) => return Some(Err(e.to_string())),
        }
    }
    let y = op.primitive().decompose(&mut b, &x)?;
    Some(
        y.and_then(|y| b.output("y", y).map(|()| b))
            .and_then(GraphBuilder::finish)
            .map_err(|e| e.to_string()),
    )
}

/// A composite's float64 value: its decomposition evaluated by the reference.
pub(crate) fn reference(op: &Op, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
    let types: Vec<TensorType> = x
        .iter()
        .map(|a| TensorType::new(a.dtype, a.shape.as_slice()))
        .collect();
    let graph = match expansion(op, &types) {
        Some(Ok(graph)) => graph,
        Some(Err(e)) => return Err(ReferenceError::Binding(e)),
        None => return Err(ReferenceError::NoReference { op: op.to_string() }),
    };
    let mut values = super::evaluate::evaluate_arrays(&graph, x.to_vec())?;
    let y = values.pop().expect("one output");
    debug_assert_eq!(y.shape, out.shape);
    Ok(y)
}

/// Appends the nodes of `graph` that `wanted` depends on through `emit`, its inputs (in
/// order) standing for `bound`; returns what `wanted` became.
pub(crate) fn inline<E>(
    graph: &Graph,
    bound: &[NodeId],
    wanted: &[NodeId],
    emit: &mut dyn FnMut(Node) -> Result<NodeId, E>,
) -> Result<Vec<NodeId>, E> {
    let mut needed = vec![false; graph.len()];
    for w in wanted {
        needed[w.index()] = true;
    }
    for index in (0..graph.len()).rev() {
        if needed[index] {
            for i in &graph.nodes()[index].inputs {
                needed[i.index()] = true;
            }
        }
    }
    let inputs: Vec<NodeId> = graph.inputs().map(|(id, _)| id).collect();
    let mut map: Vec<Option<NodeId>> = vec![None; graph.len()];
    for (id, new) in inputs.iter().zip(bound) {
        map[id.index()] = Some(*new);
    }
    for (id, node) in graph.iter() {
        if !needed[id.index()] || map[id.index()].is_some() {
            continue;
        }
        let mut node = node.clone();
        for input in &mut node.inputs {
            *input = map[input.index()].expect("operands come first, inputs are bound");
        }
        map[id.index()] = Some(emit(node)?);
    }
    Ok(wanted
        .iter()
        .map(|w| map[w.index()].expect("wanted nodes are emitted"))
        .collect())
}

//! Composite ops replaced by their decompositions.

use super::Rewriter;
use crate::ir::{Graph, InferError, Node, Op, VerifyError};
use crate::ops::composite;

/// `graph` with every composite op that `keep` declines replaced by the ops of its
/// decomposition (softmax, log-softmax, layer and RMS norm; each composite's module in
/// `rlx/src/ops` states its own); primitives and kept composites stay. A backend
/// runs it with the composites it has no kernel for; with `|_| false` it leaves only
/// primitives, which is also how to differentiate a composite through its decomposition.
///
/// ```
/// use rlx::ir::{DType, Op, Softmax};
/// use rlx::passes::decompose;
/// use rlx::prelude::GraphBuilder;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [2, 5]).unwrap();
/// let y = b.op(Op::Softmax(Softmax { axis: 1, log: false }), &[x]).unwrap();
/// b.output("y", y).unwrap();
/// let g = decompose(&b.finish().unwrap(), &|_| false).unwrap();
/// assert!(g.nodes().iter().all(|n| !matches!(n.op, Op::Softmax(_))));
/// assert!(g.nodes().iter().any(|n| n.op.to_string() == "exp"));
/// ```
pub fn decompose(graph: &Graph, keep: &dyn Fn(&Op) -> bool) -> Result<Graph, VerifyError> {
    let mut rw = Rewriter::new(graph.len());
    for (id, node) in graph.iter() {
        if keep(&node.op) {
            rw.keep(id, node);
            continue;
        }
        let types: Vec<_> = node.inputs.iter().map(|i| graph[*i].ty.clone()).collect();
        let expansion = match composite::expansion(&node.op, &types) {
            None => {
                rw.keep(id, node);
                continue;
            }
            Some(Ok(expansion)) => expansion,
            Some(Err(message)) => {
                return Err(VerifyError::Infer {
                    node: id,
                    op: node.op.to_string(),
                    source: Box::new(InferError::Attribute(message)),
                });
            }
        };
        let operands: Vec<_> = node.inputs.iter().map(|i| rw.get(*i)).collect();
        let y = expansion.outputs()[0].node;
        let origin = node.origin;
        let emitted = composite::inline(&expansion, &operands, &[y], &mut |mut part: Node| {
            part.origin = origin;
            Ok::<_, VerifyError>(rw.add(part))
        })?;
        rw.alias(id, emitted[0]);
    }
    rw.finish(graph)
}

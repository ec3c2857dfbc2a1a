//! Removal of identity ops.

use super::Rewriter;
use crate::ir::{Graph, Node, Op, VerifyError};
use crate::ir::{Pad, Permute, Slice};

/// True if `node` returns its only operand unchanged.
fn is_identity(graph: &Graph, node: &Node) -> bool {
    let Some(first) = node.inputs.first() else {
        return false;
    };
    let operand = &graph[*first].ty;
    let same_type = *operand == node.ty;
    match &node.op {
        Op::Reshape(_) | Op::Broadcast(_) | Op::Cast(_) | Op::StopGradient | Op::Checkpoint => {
            same_type
        }
        Op::Permute(Permute { perm }) => perm.iter().enumerate().all(|(i, p)| i == *p),
        Op::Slice(Slice {
            start: 0,
            stop: None,
            step: 1,
            ..
        }) => true,
        Op::Concat(_) => node.inputs.len() == 1,
        Op::Pad(Pad { pads, .. }) => pads.iter().all(|p| *p == (0, 0)),
        _ => false,
    }
}

/// Replaces identity ops by their operand.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [2, 3])?;
/// let same = b.reshape(x, [2, 3])?;
/// let y = b.unary(UnaryOp::Exp, same)?;
/// b.output("y", y)?;
/// let g = rlx::passes::simplify(&b.finish()?)?;
/// assert_eq!(g.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn simplify(graph: &Graph) -> Result<Graph, VerifyError> {
    let mut rw = Rewriter::new(graph.len());
    for (id, node) in graph.iter() {
        if is_identity(graph, node) {
            let operand = rw.get(node.inputs[0]);
            rw.alias(id, operand);
        } else {
            rw.keep(id, node);
        }
    }
    rw.finish(graph)
}

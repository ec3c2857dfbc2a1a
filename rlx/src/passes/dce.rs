//! Dead-code elimination.

use super::Rewriter;
use crate::ir::{Graph, Op, VerifyError};

/// Drops every node that no output or state write depends on, except inputs, params and
/// states.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [2])?;
/// let _unused = b.unary(UnaryOp::Exp, x)?;
/// let y = b.unary(UnaryOp::Neg, x)?;
/// b.output("y", y)?;
/// let g = rlx::passes::dce(&b.finish()?)?;
/// assert_eq!(g.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn dce(graph: &Graph) -> Result<Graph, VerifyError> {
    let mut live = vec![false; graph.len()];
    for out in graph.outputs().iter().chain(graph.writes()) {
        live[out.node.index()] = true;
    }
    for (id, node) in graph.iter().collect::<Vec<_>>().into_iter().rev() {
        if live[id.index()] || matches!(node.op, Op::Input | Op::Param | Op::State) {
            live[id.index()] = true;
            for input in &node.inputs {
                live[input.index()] = true;
            }
        }
    }
    let mut rw = Rewriter::new(graph.len());
    for (id, node) in graph.iter() {
        if live[id.index()] {
            rw.keep(id, node);
        }
    }
    rw.finish(graph)
}

//! Common-subexpression elimination.

use std::collections::HashMap;

use super::Rewriter;
use crate::ir::{Graph, NodeId, Op, VerifyError};

/// Merges nodes with the same op, attributes and operands (and constants with the same
/// type and bytes). Inputs and params are never merged.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [2])?;
/// let a = b.unary(UnaryOp::Exp, x)?;
/// let c = b.unary(UnaryOp::Exp, x)?;
/// let y = b.add(a, c)?;
/// b.output("y", y)?;
/// let g = rlx::passes::cse(&b.finish()?)?;
/// assert_eq!(g.len(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn cse(graph: &Graph) -> Result<Graph, VerifyError> {
    // Ops hold floats, so they are keyed by their full debug form; compile time only.
    let mut seen: HashMap<(String, Vec<u8>, Vec<NodeId>), NodeId> = HashMap::new();
    let mut rw = Rewriter::new(graph.len());
    for (id, node) in graph.iter() {
        if matches!(node.op, Op::Input | Op::Param | Op::State) {
            rw.keep(id, node);
            continue;
        }
        let inputs: Vec<NodeId> = node.inputs.iter().map(|i| rw.get(*i)).collect();
        let bytes = match &node.op {
            Op::Constant(data) => data.bytes().to_vec(),
            _ => Vec::new(),
        };
        let key = (format!("{:?} {}", node.op, node.ty), bytes, inputs);
        match seen.get(&key) {
            Some(&existing) => rw.alias(id, existing),
            None => {
                let new = rw.keep(id, node);
                seen.insert(key, new);
            }
        }
    }
    rw.finish(graph)
}

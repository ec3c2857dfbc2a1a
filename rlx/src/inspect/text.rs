//! The text printer: one line per node, jaxpr style.

use std::fmt;

use super::describe;
use crate::ir::{Graph, Node, NodeId};

/// One line per node, `%id:type = op[attrs] operands`, then the outputs:
///
/// ```text
/// %0:f32[batch,384] = input "x"
/// %1:f32[384,1536] = param "w"
/// %2:f32[batch,1536] = matmul %0, %1
/// return y=%2
/// ```
///
/// Labels of non-leaf nodes follow as `# label`.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("batch"), Dim::from(384)])?;
/// let w = b.param("w", DType::F32, [384, 1536])?;
/// let y = b.matmul(x, w)?;
/// b.output("y", y)?;
/// let text = b.finish()?.to_string();
/// assert!(text.contains("%2:f32[batch,1536] = matmul %0, %1\n"));
/// # Ok::<(), BuildError>(())
/// ```
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_graph(f, self, |_, node| Some((describe(node), &node.inputs)))
    }
}

/// The text of `graph` with each node's op and operands as `line` gives them, leaving out
/// nodes it answers `None` for: a backend's lowered program, printed like a graph.
pub(crate) fn write_graph<'g>(
    f: &mut fmt::Formatter<'_>,
    graph: &'g Graph,
    line: impl Fn(NodeId, &'g Node) -> Option<(String, &'g [NodeId])>,
) -> fmt::Result {
    for (id, node) in graph.iter() {
        let Some((op, operands)) = line(id, node) else {
            continue;
        };
        write!(f, "{id}:{} = {op}", node.ty)?;
        for (i, input) in operands.iter().enumerate() {
            f.write_str(if i == 0 { " " } else { ", " })?;
            write!(f, "{input}")?;
        }
        if let (false, Some(label)) = (node.op.is_leaf(), &node.name) {
            write!(f, "  # {label}")?;
        }
        writeln!(f)?;
    }
    f.write_str("return")?;
    for (i, out) in graph.outputs().iter().enumerate() {
        f.write_str(if i == 0 { " " } else { ", " })?;
        write!(f, "{}={}", out.name, out.node)?;
    }
    writeln!(f)
}

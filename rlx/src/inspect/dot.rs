//! Graphviz DOT export.

use std::fmt::Write;

use super::describe;
use crate::ir::{Graph, Op};

/// Escapes a string for a double-quoted DOT attribute.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl Graph {
    /// The graph in Graphviz DOT: inputs as ellipses, params as boxes with a folded corner,
    /// constants as plain text, outputs as double octagons; edges are labelled with the
    /// operand position when a node has several.
    ///
    /// Render with `dot -Tsvg graph.dot -o graph.svg`.
    ///
    /// ```
    /// use rlx::prelude::*;
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [4])?;
    /// let y = b.unary(UnaryOp::Exp, x)?;
    /// b.output("y", y)?;
    /// let dot = b.finish()?.to_dot();
    /// assert!(dot.starts_with("digraph rlx {"));
    /// assert!(dot.contains("n0 -> n1;"));
    /// # Ok::<(), BuildError>(())
    /// ```
    pub fn to_dot(&self) -> String {
        let mut out = String::from("digraph rlx {\n");
        out.push_str("  node [shape=box, style=rounded, fontname=\"monospace\", fontsize=10];\n");
        out.push_str("  edge [fontname=\"monospace\", fontsize=8];\n");
        for (id, node) in self.iter() {
            let shape = match node.op {
                Op::Input => ", shape=ellipse, style=solid",
                Op::Param => ", shape=note, style=solid",
                Op::Constant(_) => ", shape=plaintext",
                _ => "",
            };
            let mut label = format!("{id} {}\n{}", describe(node), node.ty);
            if let (false, Some(name)) = (node.op.is_leaf(), &node.name) {
                let _ = write!(label, "\n# {name}");
            }
            let _ = writeln!(
                out,
                "  n{} [label=\"{}\"{shape}];",
                id.index(),
                escape(&label)
            );
            for (operand, input) in node.inputs.iter().enumerate() {
                let _ = if node.inputs.len() > 1 {
                    writeln!(
                        out,
                        "  n{} -> n{} [label=\"{operand}\"];",
                        input.index(),
                        id.index()
                    )
                } else {
                    writeln!(out, "  n{} -> n{};", input.index(), id.index())
                };
            }
        }
        for (i, o) in self.outputs().iter().enumerate() {
            let _ = writeln!(
                out,
                "  out{i} [label=\"{}\", shape=doubleoctagon, style=solid];",
                escape(&o.name)
            );
            let _ = writeln!(out, "  n{} -> out{i};", o.node.index());
        }
        out.push_str("}\n");
        out
    }
}

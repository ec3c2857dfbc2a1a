//! Human-readable views of a graph: a text listing and Graphviz DOT.

mod dot;
mod text;

pub(crate) use text::write_graph;

use crate::ir::{ConstantData, Node, Op};

/// The op with its attributes and its leaf payload: `input "x"`, `const 0.5`,
/// `softmax[axis=1]`.
pub(crate) fn describe(node: &Node) -> String {
    match (&node.op, node.name.as_deref()) {
        (Op::Input | Op::Param, Some(name)) => format!("{} {name:?}", node.op),
        (Op::Constant(data), name) => {
            let label = name.map(|n| format!(" {n:?}")).unwrap_or_default();
            format!("const{label} {}", constant_values(data))
        }
        (op, _) => op.to_string(),
    }
}

/// Up to eight values inline; beyond that, a count.
fn constant_values(data: &ConstantData) -> String {
    const SHOWN: usize = 8;
    let fmt = |i| data.get(i).map(|v| v.to_string()).unwrap_or_default();
    match data.len() {
        _ if data.ty().rank() == 0 => fmt(0),
        n if n <= SHOWN => {
            let vals: Vec<String> = (0..n).map(fmt).collect();
            format!("[{}]", vals.join(", "))
        }
        n => format!("<{n} values>"),
    }
}

//! Computing a float32 graph in a narrower float type.

use super::Rewriter;
use crate::ir::Cast;
use crate::ir::{DType, Graph, Node, NodeId, Op, Output, TensorType, VerifyError};

/// Rewrites `graph` so that everything it computes in float32 is computed in `dtype` (a
/// narrower float type) while its interface stays float32: float32 params become `dtype`
/// (a backend casts their values once, when they are bound), float32 inputs, states and
/// constants are cast on entry, float32 casts target `dtype`, and float32 outputs and state
/// writes are cast back.
/// Other dtypes are untouched.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [2, 3])?;
/// let w = b.param("w", DType::F32, [3, 4])?;
/// let y = b.matmul(x, w)?;
/// b.output("y", y)?;
/// let g = rlx::passes::compute_in(&b.finish()?, DType::BF16)?;
/// assert_eq!(g[g.param("w").unwrap()].ty.dtype, DType::BF16);
/// assert_eq!(g[g.input("x").unwrap()].ty.dtype, DType::F32); // cast after entry
/// assert_eq!(g[g.outputs()[0].node].ty.dtype, DType::F32); // cast back
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn compute_in(graph: &Graph, dtype: DType) -> Result<Graph, VerifyError> {
    let mut rw = Rewriter::new(graph.len());
    let narrow = |ty: &TensorType| TensorType::new(dtype, ty.shape.clone());
    for (id, node) in graph.iter() {
        let is_f32 = node.ty.dtype == DType::F32;
        match &node.op {
            Op::Param if is_f32 => {
                let mut param = node.clone();
                param.ty = narrow(&node.ty);
                rw.push(id, param);
            }
            Op::Input | Op::State | Op::Constant(_) if is_f32 => {
                let entry = rw.keep(id, node);
                let cast = cast_node(entry, node, dtype);
                let cast = rw.add(cast);
                rw.alias(id, cast);
            }
            _ => {
                let mut node = node.clone();
                for input in &mut node.inputs {
                    *input = rw.get(*input);
                }
                if let Op::Cast(Cast { to: DType::F32 }) = node.op {
                    node.op = Op::Cast(Cast { to: dtype });
                }
                if is_f32 {
                    node.ty = narrow(&node.ty);
                }
                rw.push(id, node);
            }
        }
    }
    let mut back = |o: &Output| {
        let node = rw.get(o.node);
        let node = if graph[o.node].ty.dtype == DType::F32 {
            rw.add(cast_node(node, &graph[o.node], DType::F32))
        } else {
            node
        };
        Output {
            name: o.name.clone(),
            node,
        }
    };
    let outputs = graph.outputs().iter().map(&mut back).collect();
    let writes = graph.writes().iter().map(&mut back).collect();
    rw.finish_with(outputs, writes)
}

/// A cast of `operand` (with `like`'s shape and origin) to `to`.
fn cast_node(operand: NodeId, like: &Node, to: DType) -> Node {
    Node {
        op: Op::Cast(Cast { to }),
        inputs: vec![operand],
        ty: TensorType::new(to, like.ty.shape.clone()),
        name: None,
        origin: like.origin,
    }
}

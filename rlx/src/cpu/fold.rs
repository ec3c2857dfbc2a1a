//! Constant folding: nodes whose operands are all constants are computed at compile time
//! by the executor itself and replaced by their value.

use super::{CpuBackend, CpuOptions};
use crate::backend::{Backend, CompileError, Executable};
use crate::builder::GraphBuilder;
use crate::ir::{ConstantData, Graph, Node, Op};
use crate::passes::{self, Rewriter};

/// Results larger than this many elements stay computed at run time, so graphs do not
/// balloon with materialized broadcasts.
const MAX_FOLDED_ELEMENTS: usize = 1 << 16;

/// The value of `op` applied to constant operands, or `None` if evaluating it fails (then
/// the node stays, and the failure is reported when the graph runs).
fn evaluate(op: &Op, operands: &[ConstantData]) -> Option<ConstantData> {
    let mut b = GraphBuilder::new();
    let ids: Vec<_> = operands.iter().map(|c| b.constant(c.clone())).collect();
    let y = b.op(op.clone(), &ids).ok()?;
    b.output("y", y).ok()?;
    let graph = b.finish().ok()?;
    let backend = CpuBackend::new(CpuOptions {
        optimize: false,
        threads: 1,
        ..CpuOptions::default()
    });
    let exe = backend.compile(&graph).ok()?;
    let out = exe.run(&[], &[]).ok()?.pop()?;
    ConstantData::from_bytes(out.dtype(), out.shape(), out.data().bytes().to_vec()).ok()
}

pub(crate) fn fold_constants(graph: &Graph, _options: &CpuOptions) -> Result<Graph, CompileError> {
    let mut rw = Rewriter::new(graph.len());
    for (id, node) in graph.iter() {
        let small = node
            .ty
            .shape
            .static_numel()
            .is_some_and(|n| n <= MAX_FOLDED_ELEMENTS);
        let constants: Option<Vec<ConstantData>> = node
            .inputs
            .iter()
            .map(|i| match &rw.nodes()[rw.get(*i).index()].op {
                Op::Constant(c) => Some(c.clone()),
                _ => None,
            })
            .collect();
        let folded = match constants {
            Some(c) if !node.op.is_leaf() && !c.is_empty() && small => evaluate(&node.op, &c),
            _ => None,
        };
        match folded {
            Some(data) => {
                let constant = Node {
                    op: Op::Constant(data),
                    inputs: vec![],
                    ty: node.ty.clone(),
                    name: node.name.clone(),
                    origin: node.origin,
                };
                rw.push(id, constant);
            }
            None => {
                rw.keep(id, node);
            }
        }
    }
    let folded = rw.finish(graph).map_err(|e| CompileError::Pass {
        pass: "fold",
        source: Box::new(e),
    })?;
    passes::dce(&folded).map_err(|e| CompileError::Pass {
        pass: "dce",
        source: Box::new(e),
    })
}

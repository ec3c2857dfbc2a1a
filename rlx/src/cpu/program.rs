//! The compiled program: the optimized graph and everything fixed before any dims are
//! bound (the static region, the input and symbol tables).

use super::CpuOptions;
use super::memory::ALIGN;
use crate::backend::CompileError;
use crate::backend::signature::Signature;
use crate::ir::{DType, Graph, Node, NodeId, Op};
use crate::passes::{self, Rewriter};

/// A param: where its bytes go in the static region.
pub(crate) struct ParamSlot {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub offset: usize,
}

pub(crate) struct Program {
    pub graph: Graph,
    /// The kernel of each custom op node.
    pub custom: Vec<Option<std::sync::Arc<dyn super::custom::CustomKernel>>>,
    pub signature: Signature,
    pub params: Vec<ParamSlot>,
    pub outputs: Vec<NodeId>,
    /// Byte offset in the static region of each param and constant node.
    pub static_offsets: Vec<Option<usize>>,
    pub statics_len: usize,
}

/// Splits reductions over non-adjacent axes into one reduction per run of adjacent axes
/// (last run first, keeping dims), then reshapes away the reduced axes if asked.
fn legalize(graph: &Graph) -> Result<Graph, crate::ir::VerifyError> {
    let mut rw = Rewriter::new(graph.len());
    for (id, node) in graph.iter() {
        let Op::Reduce {
            op,
            axes,
            keep_dims,
        } = &node.op
        else {
            rw.keep(id, node);
            continue;
        };
        let mut blocks: Vec<Vec<usize>> = Vec::new();
        for &a in axes {
            match blocks.last_mut() {
                Some(b) if *b.last().unwrap_or(&usize::MAX) + 1 == a => b.push(a),
                _ => blocks.push(vec![a]),
            }
        }
        if blocks.len() == 1 {
            rw.keep(id, node);
            continue;
        }
        let mut current = rw.get(node.inputs[0]);
        for block in blocks.iter().rev() {
            let step = Op::Reduce {
                op: *op,
                axes: block.clone(),
                keep_dims: true,
            };
            let ty = step
                .infer(&[rw.nodes()[current.index()].ty.clone()])
                .expect("a sub-reduction of a valid reduction is valid");
            current = rw.push(
                id,
                Node {
                    op: step,
                    inputs: vec![current],
                    ty,
                    name: None,
                    origin: node.origin,
                },
            );
        }
        if !keep_dims {
            let reshape = Op::Reshape {
                shape: node.ty.shape.clone(),
            };
            rw.push(
                id,
                Node {
                    op: reshape,
                    inputs: vec![current],
                    ty: node.ty.clone(),
                    name: node.name.clone(),
                    origin: node.origin,
                },
            );
        }
    }
    rw.finish(graph.outputs())
}

impl Program {
    pub(crate) fn new(
        graph: &Graph,
        options: &CpuOptions,
        registry: &std::collections::BTreeMap<
            String,
            std::sync::Arc<dyn super::custom::CustomKernel>,
        >,
    ) -> Result<(Program, Vec<u8>), CompileError> {
        let mut g = graph.clone();
        if options.optimize {
            g = passes::standard(&g)?;
            g = super::fold::fold_constants(&g, options)?;
            // Fusion passes will run here.
        }
        g = passes::pass("legalize", legalize(&g))?;

        // Static region: params and constants, each 64-byte aligned.
        let mut statics: Vec<u8> = Vec::new();
        let mut static_offsets = vec![None; g.len()];
        let mut params = Vec::new();
        for (id, node) in g.iter() {
            let bytes = match &node.op {
                Op::Param => node.ty.static_bytes().unwrap_or(0),
                Op::Constant(c) => c.bytes().len(),
                _ => continue,
            };
            let offset = statics.len().div_ceil(ALIGN) * ALIGN;
            statics.resize(offset, 0);
            match &node.op {
                Op::Constant(c) => statics.extend_from_slice(c.bytes()),
                _ => {
                    statics.resize(offset + bytes, 0);
                    params.push(ParamSlot {
                        name: node.name.clone().unwrap_or_default(),
                        dtype: node.ty.dtype,
                        shape: node.ty.shape.static_dims().unwrap_or_default(),
                        offset,
                    });
                }
            }
            static_offsets[id.index()] = Some(offset);
        }

        let signature = Signature::of(&g);
        let outputs = g.outputs().iter().map(|o| o.node).collect();
        let custom = g
            .nodes()
            .iter()
            .map(|n| match &n.op {
                Op::Custom { name, .. } => registry.get(name).cloned(),
                _ => None,
            })
            .collect();
        let statics_len = statics.len();
        Ok((
            Program {
                graph: g,
                custom,
                signature,
                params,
                outputs,
                static_offsets,
                statics_len,
            },
            statics,
        ))
    }
}

//! The verifier: checks a whole graph end to end.

use std::collections::HashSet;

use super::error::InferError;
use super::graph::Graph;
use super::node::NodeId;
use super::shape::TensorType;
use crate::ops::Op;

/// The first problem the verifier found in a graph.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum VerifyError {
    /// An operand id does not name a node.
    #[error("{node} operand {operand} is {input}, which does not exist ({len} nodes)")]
    UnknownOperand {
        /// The node.
        node: NodeId,
        /// Operand index.
        operand: usize,
        /// The missing id.
        input: NodeId,
        /// Number of nodes.
        len: usize,
    },
    /// An operand does not precede its user.
    #[error("{node} uses {input}, which does not come before it")]
    NotTopological {
        /// The node.
        node: NodeId,
        /// The operand that comes at or after it.
        input: NodeId,
    },
    /// An input or param has operands.
    #[error("{node} is a leaf (`{op}`) but has {count} operands")]
    LeafOperands {
        /// The node.
        node: NodeId,
        /// `input` or `param`.
        op: &'static str,
        /// Operands given.
        count: usize,
    },
    /// Inference rejects a node's operands.
    #[error("{node} `{op}`: {source}")]
    Infer {
        /// The node.
        node: NodeId,
        /// The op with its attributes.
        op: String,
        /// Why.
        source: Box<InferError>,
    },
    /// The stored type differs from the inferred one.
    #[error("{node} `{op}` is stored as {stored} but its operands give {inferred}")]
    TypeMismatch {
        /// The node.
        node: NodeId,
        /// The op with its attributes.
        op: String,
        /// Type stored in the node.
        stored: TensorType,
        /// Type inference computes.
        inferred: TensorType,
    },
    /// An input, param or state has no name.
    #[error("{node} is an unnamed {kind}; inputs, params and states need names")]
    Unnamed {
        /// The node.
        node: NodeId,
        /// `input` or `param`.
        kind: &'static str,
    },
    /// Two inputs, params, states or outputs share a name, or two writes a state.
    #[error("two {kind}s are named {name:?}")]
    DuplicateName {
        /// `input`, `param` or `output`.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// An output names a node that does not exist.
    #[error("output {name:?} is {node}, which does not exist ({len} nodes)")]
    UnknownOutput {
        /// Output name.
        name: String,
        /// The missing id.
        node: NodeId,
        /// Number of nodes.
        len: usize,
    },
    /// The graph returns and writes nothing.
    #[error("the graph has no outputs")]
    NoOutputs,
    /// A write names no state of the graph.
    #[error("a write names {name:?}, which is not a state of the graph")]
    UnknownState {
        /// The name written.
        name: String,
    },
    /// A write's value does not have its state's type.
    #[error("state {name:?} is {state} but is written a {value}")]
    WriteType {
        /// The state.
        name: String,
        /// Its declared type.
        state: TensorType,
        /// The written value's type.
        value: TensorType,
    },
}

impl Graph {
    /// Checks ids, topological order, leaf names, inferred types and outputs.
    ///
    /// Graphs from [`GraphBuilder::finish`](crate::builder::GraphBuilder::finish) and
    /// [`Graph::from_parts`] are already verified; passes that rewrite graphs call this to
    /// check their own work.
    ///
    /// ```
    /// use rlx::ir::{DType, Graph, Node, NodeId, Op, Output, TensorType, UnaryOp, VerifyError};
    /// let f32x2 = TensorType::new(DType::F32, [2]);
    /// let nodes = vec![
    ///     Node::new(Op::Input, vec![], f32x2.clone()).named("x"),
    ///     // Claims i32 but exp of f32 is f32:
    ///     Node::new(Op::Unary(UnaryOp::Exp), vec![NodeId::new(0)], TensorType::new(DType::I32, [2])),
    /// ];
    /// let out = vec![Output { name: "y".into(), node: NodeId::new(1) }];
    /// let err = Graph::from_parts(nodes, out).unwrap_err();
    /// assert!(matches!(err, VerifyError::TypeMismatch { .. }));
    /// ```
    pub fn verify(&self) -> Result<(), VerifyError> {
        let len = self.len();
        let mut names: [(HashSet<&str>, &'static str); 3] = [
            (HashSet::new(), "input"),
            (HashSet::new(), "param"),
            (HashSet::new(), "state"),
        ];
        for (id, node) in self.iter() {
            for (operand, &input) in node.inputs.iter().enumerate() {
                if input.index() >= len {
                    return Err(VerifyError::UnknownOperand {
                        node: id,
                        operand,
                        input,
                        len,
                    });
                }
                if input >= id {
                    return Err(VerifyError::NotTopological { node: id, input });
                }
            }
            let slot = match node.op {
                Op::Input => Some(0),
                Op::Param => Some(1),
                Op::State => Some(2),
                _ => None,
            };
            if let Some(slot) = slot {
                let (seen, kind) = &mut names[slot];
                if !node.inputs.is_empty() {
                    return Err(VerifyError::LeafOperands {
                        node: id,
                        op: kind,
                        count: node.inputs.len(),
                    });
                }
                let name = node
                    .name
                    .as_deref()
                    .ok_or(VerifyError::Unnamed { node: id, kind })?;
                if !seen.insert(name) {
                    return Err(VerifyError::DuplicateName {
                        kind,
                        name: name.to_string(),
                    });
                }
                continue;
            }
            let operand_types: Vec<TensorType> =
                node.inputs.iter().map(|i| self[*i].ty.clone()).collect();
            let inferred = node
                .op
                .infer(&operand_types)
                .map_err(|source| VerifyError::Infer {
                    node: id,
                    op: node.op.to_string(),
                    source: Box::new(source),
                })?;
            if inferred != node.ty {
                return Err(VerifyError::TypeMismatch {
                    node: id,
                    op: node.op.to_string(),
                    stored: node.ty.clone(),
                    inferred,
                });
            }
        }
        if self.outputs().is_empty() && self.writes().is_empty() {
            return Err(VerifyError::NoOutputs);
        }
        let mut output_names = HashSet::new();
        let mut written = HashSet::new();
        for out in self.outputs().iter().chain(self.writes()) {
            if out.node.index() >= len {
                return Err(VerifyError::UnknownOutput {
                    name: out.name.clone(),
                    node: out.node,
                    len,
                });
            }
        }
        for out in self.outputs() {
            if !output_names.insert(out.name.as_str()) {
                return Err(VerifyError::DuplicateName {
                    kind: "output",
                    name: out.name.clone(),
                });
            }
        }
        for write in self.writes() {
            let state = self
                .state(&write.name)
                .ok_or_else(|| VerifyError::UnknownState {
                    name: write.name.clone(),
                })?;
            if !written.insert(write.name.as_str()) {
                return Err(VerifyError::DuplicateName {
                    kind: "write",
                    name: write.name.clone(),
                });
            }
            let (state, value) = (&self[state].ty, &self[write.node].ty);
            if state != value {
                return Err(VerifyError::WriteType {
                    name: write.name.clone(),
                    state: state.clone(),
                    value: value.clone(),
                });
            }
        }
        Ok(())
    }
}

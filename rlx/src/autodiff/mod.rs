//! Reverse-mode automatic differentiation as a graph transform.
//!
//! [`gradients`] takes a graph, the name of a scalar output (the loss) and the leaves to
//! differentiate with respect to, and returns one ordinary [`Graph`] that computes the
//! original outputs and, as extra outputs named `grad/<leaf>`, the gradient of the loss
//! with respect to each leaf. The result is verified like any graph, prints, runs through
//! the passes (dead branches cost nothing after DCE) and compiles on every backend.
//!
//! Each op's gradient rule (its vector-Jacobian product) lives in `autodiff/rules/`, one module per
//! op family, named like the family's inference rules in `ir/infer/`. A rule receives the
//! cotangent of the node's output and emits nodes for the cotangent of each operand;
//! gradients of broadcast operands are summed back to the operand's shape. Symbolic dims
//! stay symbolic, so one gradient graph serves every batch size.
//!
//! Operands that are discrete by design (a `where` condition, gather indices) take no
//! gradient. Any other operand that depends on a differentiated leaf but reaches the loss
//! only through an op without a gradient (a comparison, `argmax`, a cast from an integer)
//! is an error naming that op and the line that built it.
//!
//! ```
//! use rlx::autodiff::{Wrt, gradients};
//! use rlx::prelude::*;
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", DType::F32, [Dim::sym("batch"), Dim::from(3)])?;
//! let w = b.param("w", DType::F32, [3, 2])?;
//! let y = b.matmul(x, w)?;
//! let loss = b.reduce(ReduceOp::Sum, y, &[0, 1], false)?;
//! b.output("loss", loss)?;
//! let graph = b.finish()?;
//! let training = gradients(&graph, "loss", &Wrt::Params)?;
//! assert_eq!(training.outputs()[1].name, "grad/w");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod emit;
mod recompute;
mod rules;

use std::collections::HashSet;

use crate::backend::NodeSite;
use crate::ir::{ConstantData, Graph, NodeId, Output, Scalar};
pub(crate) use emit::Emitter;
pub use recompute::Recompute;
use recompute::Recomputer;
pub(crate) use rules::Grad;

/// Which leaves [`gradients`] differentiates with respect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wrt {
    /// Every float param of the graph (the weights).
    Params,
    /// These params or inputs, by name.
    Named(Vec<String>),
}

/// Why a gradient graph could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GradError {
    /// The graph has no output of that name.
    #[error("no output named {name:?}; the graph's outputs are {known:?}")]
    UnknownOutput {
        /// The name given.
        name: String,
        /// The graph's outputs.
        known: Vec<String>,
    },
    /// The loss is not a float scalar.
    #[error("the loss {name:?} must be a float scalar, but it is {ty}")]
    NotAScalar {
        /// The output's name.
        name: String,
        /// Its type.
        ty: String,
    },
    /// A leaf to differentiate with respect to does not exist or is not a float leaf.
    #[error("cannot differentiate with respect to {name:?}: {reason}")]
    BadLeaf {
        /// The name given.
        name: String,
        /// Why.
        reason: String,
    },
    /// A gradient output's name is already an output of the graph.
    #[error("the graph already has an output named {name:?}")]
    NameTaken {
        /// The name.
        name: String,
    },
    /// The loss depends on a differentiated leaf through an op that has no gradient.
    #[error(
        "{at} has no gradient, but the loss depends on a differentiated leaf through it \
         (cut the path explicitly if that is intended)"
    )]
    NoGradient {
        /// The op without a gradient.
        at: NodeSite,
    },
    /// The op has a gradient mathematically, but RLX has no rule for it yet.
    #[error("{at}: no gradient rule for this op yet")]
    NotYet {
        /// The node.
        at: NodeSite,
    },
    /// A gradient rule built a node the IR rejects (a bug in the rule: please report it).
    #[error("{at}: its gradient rule failed: {message}")]
    Rule {
        /// The node whose rule failed.
        at: NodeSite,
        /// The inference error.
        message: String,
    },
}

/// The graph computing `graph`'s outputs and the gradient of the scalar output `loss` with
/// respect to each leaf in `wrt`, as outputs `grad/<name>` in the order of the leaves.
/// A leaf the loss does not depend on gets a zero gradient.
pub fn gradients(graph: &Graph, loss: &str, wrt: &Wrt) -> Result<Graph, GradError> {
    gradients_with(graph, loss, wrt, Recompute::Nothing)
}

/// [`gradients`], with the values between checkpoints computed again in the backward pass
/// when `recompute` says so (see [`Recompute`]).
pub fn gradients_with(
    graph: &Graph,
    loss: &str,
    wrt: &Wrt,
    recompute: Recompute,
) -> Result<Graph, GradError> {
    let output = graph
        .outputs()
        .iter()
        .find(|o| o.name == loss)
        .ok_or_else(|| GradError::UnknownOutput {
            name: loss.to_string(),
            known: graph.outputs().iter().map(|o| o.name.clone()).collect(),
        })?;
    let loss_ty = &graph[output.node].ty;
    if loss_ty.rank() != 0 || !loss_ty.dtype.is_float() {
        return Err(GradError::NotAScalar {
            name: loss.to_string(),
            ty: loss_ty.to_string(),
        });
    }
    let leaves = leaves(graph, wrt)?;
    let taken: HashSet<&str> = graph.outputs().iter().map(|o| o.name.as_str()).collect();
    for &leaf in &leaves {
        let name = grad_name(graph, leaf);
        if taken.contains(name.as_str()) {
            return Err(GradError::NameTaken { name });
        }
    }

    // Which nodes depend on a leaf, through any operand.
    let mut requires = vec![false; graph.len()];
    for &leaf in &leaves {
        requires[leaf.index()] = true;
    }
    for (id, node) in graph.iter() {
        if node.inputs.iter().any(|i| requires[i.index()]) {
            requires[id.index()] = true;
        }
    }

    let mut e = Emitter::new(graph);
    let mut recomputer = match recompute {
        Recompute::Nothing => None,
        Recompute::BetweenCheckpoints => Some(Recomputer::new(graph)),
    };
    let mut cotangent: Vec<Option<NodeId>> = vec![None; graph.len()];
    cotangent[output.node.index()] =
        Some(e.constant(ConstantData::scalar(Scalar::Float(1.0), loss_ty.dtype)));
    for index in (0..=output.node.index()).rev() {
        let id = NodeId::new(index);
        let Some(g) = cotangent[index] else {
            continue;
        };
        let node = &graph[id];
        if node.op.is_leaf() || !requires[index] {
            continue;
        }
        e.at(id);
        let grads = match &mut recomputer {
            Some(r) => {
                let mut x = Vec::with_capacity(node.inputs.len());
                for &input in &node.inputs {
                    x.push(r.value(&mut e, input, g)?);
                }
                let y = r.value(&mut e, id, g)?;
                rules::vjp(&mut e, id, y, &x, g)?
            }
            None => rules::vjp(&mut e, id, id, &node.inputs, g)?,
        };
        for (operand, (input, grad)) in node.inputs.iter().zip(grads).enumerate() {
            if !requires[input.index()] {
                continue;
            }
            let grad = match grad {
                rules::Grad::Some(grad) => grad,
                rules::Grad::Discrete => continue,
                rules::Grad::None => return Err(no_gradient(graph, id, operand)),
            };
            cotangent[input.index()] = Some(match cotangent[input.index()] {
                Some(sum) => e.add(sum, grad)?,
                None => grad,
            });
        }
    }

    let mut outputs: Vec<Output> = graph.outputs().to_vec();
    for &leaf in &leaves {
        let grad = match cotangent[leaf.index()] {
            Some(g) => g,
            None => {
                e.at(leaf);
                e.zeros_like(leaf)?
            }
        };
        outputs.push(Output {
            name: grad_name(graph, leaf),
            node: grad,
        });
    }
    e.finish(outputs)
}

/// The output name of a leaf's gradient.
fn grad_name(graph: &Graph, leaf: NodeId) -> String {
    format!("grad/{}", graph[leaf].name.as_deref().unwrap_or_default())
}

fn leaves(graph: &Graph, wrt: &Wrt) -> Result<Vec<NodeId>, GradError> {
    match wrt {
        Wrt::Params => Ok(graph
            .params()
            .filter(|(_, n)| n.ty.dtype.is_float())
            .map(|(id, _)| id)
            .collect()),
        Wrt::Named(names) => names
            .iter()
            .map(|name| {
                let id = graph
                    .param(name)
                    .or_else(|| graph.input(name))
                    .ok_or_else(|| GradError::BadLeaf {
                        name: name.clone(),
                        reason: "no param or input has that name".into(),
                    })?;
                if !graph[id].ty.dtype.is_float() {
                    return Err(GradError::BadLeaf {
                        name: name.clone(),
                        reason: format!("its dtype {} is not a float", graph[id].ty.dtype),
                    });
                }
                Ok(id)
            })
            .collect(),
    }
}

/// The error for operand `operand` of `id`, which has no gradient: names the op that cuts
/// the path — the operand itself when it is a discrete op (`argmax`, a comparison), else
/// the node whose rule has no gradient for it.
fn no_gradient(graph: &Graph, id: NodeId, operand: usize) -> GradError {
    let input = graph[id].inputs[operand];
    let culprit = if graph[input].ty.dtype.is_float() || graph[input].op.is_leaf() {
        id
    } else {
        input
    };
    GradError::NoGradient {
        at: NodeSite::of(culprit, &graph[culprit]),
    }
}

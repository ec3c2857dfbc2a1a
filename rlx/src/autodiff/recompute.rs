//! Activation recomputation: the backward pass reads the values between checkpoints from
//! copies it computes again, just before it needs them, instead of the forward pass's.

use std::collections::HashSet;

use super::{Emitter, GradError};
use crate::ir::{Graph, NodeId, Op};

/// Which forward values the backward pass computes again instead of keeping.
///
/// A training step keeps every value a gradient rule reads from the forward pass until the
/// backward pass has used it: for a decoder, every layer's activations at once. With
/// [`Recompute::BetweenCheckpoints`] the forward pass keeps only the values marked
/// [`Op::Checkpoint`] (in typed code [`Tensor::checkpoint`](crate::typed::Tensor::checkpoint);
/// the Llama family marks each layer's output) and what follows the last of them; the
/// values before a checkpoint are computed again from the checkpoints (and params and
/// inputs) they depend on when the backward pass reaches them. Peak memory falls from all
/// layers' activations to one layer's plus the checkpoints, for about one more forward
/// pass of compute. Gradients are the same values either way.
///
/// ```
/// use rlx::autodiff::{Recompute, Wrt, gradients_with};
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let mut h = b.input("x", DType::F32, [4, 3])?;
/// let w = b.param("w", DType::F32, [3, 3])?;
/// for _ in 0..2 {
///     let product = b.matmul(h, w)?;
///     let t = b.unary(UnaryOp::Tanh, product)?; // computed again for its gradient
///     h = b.op(Op::Checkpoint, &[t])?; // kept
/// }
/// let loss = b.reduce(ReduceOp::Sum, h, &[0, 1], false)?;
/// b.output("loss", loss)?;
/// let graph = b.finish()?;
/// let step = gradients_with(&graph, "loss", &Wrt::Params, Recompute::BetweenCheckpoints)?;
/// // The second block's copies read the first checkpoint behind the gradient.
/// assert!(step.iter().any(|(_, n)| n.op == Op::After));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recompute {
    /// Every value a rule reads is kept from the forward pass.
    #[default]
    Nothing,
    /// Values computed before a checkpoint are computed again when the backward pass
    /// needs them.
    BetweenCheckpoints,
}

/// The recomputed copies of one gradient graph's forward values.
pub(super) struct Recomputer {
    /// Whether the backward pass reads a copy of the node rather than the node.
    again: Vec<bool>,
    /// The copy of each node computed again, once made.
    copy: Vec<Option<NodeId>>,
    /// Each kept value as copies read it: behind the gradient that first needed it.
    behind: Vec<Option<NodeId>>,
}

impl Recomputer {
    /// The values of `graph` computed again: those a checkpoint depends on, except leaves,
    /// checkpoints, outputs and written values.
    pub fn new(graph: &Graph) -> Recomputer {
        let mut before_checkpoint = vec![false; graph.len()];
        for index in (0..graph.len()).rev() {
            let node = &graph[NodeId::new(index)];
            if node.op == Op::Checkpoint || before_checkpoint[index] {
                for input in &node.inputs {
                    before_checkpoint[input.index()] = true;
                }
            }
        }
        let mut kept = vec![false; graph.len()];
        for out in graph.outputs().iter().chain(graph.writes()) {
            kept[out.node.index()] = true;
        }
        let again = graph
            .iter()
            .map(|(id, node)| {
                before_checkpoint[id.index()]
                    && !kept[id.index()]
                    && !node.op.is_leaf()
                    && node.op != Op::Checkpoint
            })
            .collect();
        Recomputer {
            again,
            copy: vec![None; graph.len()],
            behind: vec![None; graph.len()],
        }
    }

    /// What a gradient rule reads for forward value `id`: its copy, made now (after
    /// `token`, the cotangent being propagated) if it is computed again, else `id`.
    pub fn value(
        &mut self,
        e: &mut Emitter<'_>,
        id: NodeId,
        token: NodeId,
    ) -> Result<NodeId, GradError> {
        if !self.again[id.index()] {
            return Ok(id);
        }
        if let Some(copy) = self.copy[id.index()] {
            return Ok(copy);
        }
        // The values computed again that `id` needs and that have no copy yet, found
        // without recursion (a segment may be thousands of nodes long), then copied in
        // graph order, which is an order of their dependencies.
        let mut missing = vec![id];
        let mut seen = HashSet::from([id.index()]);
        while let Some(next) = missing.pop() {
            for &input in &e.node(next).inputs {
                if self.again[input.index()]
                    && self.copy[input.index()].is_none()
                    && seen.insert(input.index())
                {
                    missing.push(input);
                }
            }
        }
        let mut order: Vec<usize> = seen.into_iter().collect();
        order.sort_unstable();
        for node in order.into_iter().map(NodeId::new) {
            let inputs = e.node(node).inputs.clone();
            let mut operands = Vec::with_capacity(inputs.len());
            for input in inputs {
                operands.push(self.operand(e, input, token)?);
            }
            self.copy[node.index()] = Some(e.copy(node, &operands)?);
        }
        Ok(self.copy[id.index()].expect("copied above"))
    }

    /// Operand `id` of a copy: its copy, a leaf itself, a kept value behind `token`.
    fn operand(
        &mut self,
        e: &mut Emitter<'_>,
        id: NodeId,
        token: NodeId,
    ) -> Result<NodeId, GradError> {
        if self.again[id.index()] {
            return Ok(self.copy[id.index()].expect("copied in graph order"));
        }
        if e.node(id).op.is_leaf() {
            return Ok(id);
        }
        if let Some(behind) = self.behind[id.index()] {
            return Ok(behind);
        }
        let behind = e.op(Op::After, &[id, token])?;
        self.behind[id.index()] = Some(behind);
        Ok(behind)
    }
}

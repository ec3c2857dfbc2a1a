//! Chains of elementwise float ops in one pass over memory.

use super::{ElementwiseArg, ElementwiseStep, Fusion};
use crate::ir::{DType, Dim, Graph, Node, NodeId, Op, Shape};

/// The ops one fused node will compute, over its operands.
#[derive(Clone, Default)]
struct Group {
    operands: Vec<NodeId>,
    steps: Vec<ElementwiseStep>,
}

impl Group {
    /// The argument that reads `node`: an operand slot, reused when `node` already has one.
    fn operand(&mut self, node: NodeId) -> ElementwiseArg {
        let slot = match self.operands.iter().position(|o| *o == node) {
            Some(i) => i,
            None => {
                self.operands.push(node);
                self.operands.len() - 1
            }
        };
        ElementwiseArg::Operand(slot)
    }

    /// Appends `other`'s steps (its operands becoming this group's) and returns the
    /// argument that reads its result.
    fn absorb(&mut self, other: &Group) -> ElementwiseArg {
        let offset = self.steps.len();
        let slots: Vec<ElementwiseArg> = other.operands.iter().map(|o| self.operand(*o)).collect();
        let remap = |a: ElementwiseArg| match a {
            ElementwiseArg::Operand(i) => slots[i],
            ElementwiseArg::Step(s) => ElementwiseArg::Step(offset + s),
        };
        for step in &other.steps {
            self.steps.push(match *step {
                ElementwiseStep::Unary(kind, x) => ElementwiseStep::Unary(kind, remap(x)),
                ElementwiseStep::Binary(kind, a, b) => {
                    ElementwiseStep::Binary(kind, remap(a), remap(b))
                }
            });
        }
        ElementwiseArg::Step(self.steps.len() - 1)
    }

    fn values(&self) -> usize {
        self.operands.len() + self.steps.len()
    }
}

/// Folds chains of elementwise float ops (unary and binary, `f32` or `f64`) not yet fused
/// into one pass each. An op joins the op that consumes it when it is that op's only user,
/// is no graph output and has the consumer's shape; operands that stay outside must have
/// the chain's shape or broadcast to it as scalars, per-row values or one row. A chain of one op stays as it was. Half precisions are
/// left alone: fused, their intermediates would skip the rounding to half that the ops
/// define.
pub(super) fn fuse(graph: &Graph, fusions: &mut [Option<Fusion>]) {
    let users = graph.users();
    // A returned value is stored, so it ends any chain.
    let exposed = graph.returned();
    let mut groups: Vec<Option<Group>> = vec![None; graph.len()];
    for (id, node) in graph.iter() {
        if fusions[id.index()].is_some() || !fusible(graph, node) {
            continue;
        }
        let mut group = Group::default();
        let mut args = Vec::with_capacity(node.inputs.len());
        for &input in &node.inputs {
            // The producer's chain joins this one when this op alone reads it, it is no
            // output, it has this op's type, and both fit in one node.
            let joining = groups[input.index()].as_ref().filter(|inner| {
                matches!(users[input.index()].as_slice(), [user] if *user == id)
                    && !exposed[input.index()]
                    && graph[input].ty == node.ty
                    && group.values() + inner.values() + 1 < ElementwiseStep::MAX_VALUES
            });
            let arg = match joining {
                Some(inner) => {
                    fusions[input.index()] = Some(Fusion::Absorbed);
                    group.absorb(inner)
                }
                None => group.operand(input),
            };
            args.push(arg);
        }
        group.steps.push(match (&node.op, args.as_slice()) {
            (Op::Unary(kind), [x]) => ElementwiseStep::Unary(*kind, *x),
            (Op::Binary(kind), [a, b]) => ElementwiseStep::Binary(*kind, *a, *b),
            _ => continue,
        });
        groups[id.index()] = Some(group);
    }
    for (id, group) in groups.into_iter().enumerate() {
        match group {
            Some(Group { operands, steps }) if steps.len() > 1 && fusions[id].is_none() => {
                fusions[id] = Some(Fusion::Elementwise { steps, operands });
            }
            _ => {}
        }
    }
}

/// A unary or binary op on `f32` or `f64` whose operands each have its shape or a shape
/// the fused kernel broadcasts (see [`broadcast_operand`]).
fn fusible(graph: &Graph, node: &Node) -> bool {
    let elementwise = match node.op {
        Op::Unary(kind) => kind.domain().admits(node.ty.dtype),
        Op::Binary(kind) => kind.domain().admits(node.ty.dtype),
        _ => false,
    };
    let full_precision = matches!(node.ty.dtype, DType::F32 | DType::F64);
    elementwise
        && full_precision
        && node.inputs.iter().all(|&input| {
            let ty = &graph[input].ty;
            ty == &node.ty
                || ty.dtype == node.ty.dtype && broadcast_operand(&ty.shape, &node.ty.shape)
        })
}

/// Whether an operand of shape `operand` is one the fused kernel broadcasts to `out`: a
/// scalar, one value per row (`out`'s shape with the last dim 1, as a row statistic
/// kept with `keep_dims`) or one row for all rows (the last dim alone, as a bias). The
/// lowering (`cpu::lower::elementwise::fused`) reads each kind by the same rule.
fn broadcast_operand(operand: &Shape, out: &Shape) -> bool {
    let (a, o) = (operand.dims(), out.dims());
    let one = |d: &Dim| d.as_static() == Some(1);
    let scalar = operand.static_numel() == Some(1);
    let per_row = a.len() == o.len()
        && a.split_last()
            .zip(o.split_last())
            .is_some_and(|((last, lead), (_, out_lead))| one(last) && lead == out_lead);
    let one_row = !a.is_empty()
        && a.len() <= o.len()
        && a.last() == o.last()
        && a[..a.len() - 1].iter().all(one);
    scalar || per_row || one_row
}

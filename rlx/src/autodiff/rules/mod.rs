//! What a gradient rule answers per operand, and the entry the driver calls. The rules
//! themselves are each op's [`Primitive::vjp`](crate::ops::Primitive::vjp), beside its
//! shape rule in `ops/`: a new op does not compile until it states its rule (or that it has
//! none).

use super::GradError;
use super::emit::Emitter;
use crate::ir::NodeId;

/// What flows back to one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grad {
    /// Its cotangent.
    Some(NodeId),
    /// Nothing, by design: the operand selects or indexes (a `where` condition, gather
    /// indices) and takes no gradient.
    Discrete,
    /// Nothing, because the op has no derivative with respect to it.
    None,
}

/// The cotangents of node `id`'s operands given `g`, its output's cotangent; the rule
/// reads the node's value as `y` and its operands as `x` (the forward values, or copies
/// computed again).
pub(crate) fn vjp(
    e: &mut Emitter<'_>,
    id: NodeId,
    y: NodeId,
    x: &[NodeId],
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let node = e.node(id);
    if !node.ty.dtype.is_float() {
        // Integer and bool values are piecewise constant: no gradient flows through them.
        return Ok(vec![Grad::None; node.inputs.len()]);
    }
    node.op.primitive().vjp(e, y, x, g)
}

//! Softmax as other ops: its reference and the lowering of a backend without a kernel.

use super::Softmax;
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{BinaryOp, NodeId, Op, ReduceOp, UnaryOp};

/// `e^(x − max) / Σ e^(x − max)` along the axis, or `(x − max) − log Σ e^(x − max)`. The
/// max only shifts (softmax does not change under a shift), so no gradient goes through it.
pub(super) fn softmax(op: &Softmax, b: &mut GraphBuilder, x: NodeId) -> Result<NodeId, BuildError> {
    let max = b.reduce(ReduceOp::Max, x, &[op.axis], true)?;
    let max = b.op(Op::StopGradient, &[max])?;
    let shifted = b.binary(BinaryOp::Sub, x, max)?;
    let exp = b.unary(UnaryOp::Exp, shifted)?;
    let sum = b.reduce(ReduceOp::Sum, exp, &[op.axis], true)?;
    if op.log {
        let log_sum = b.unary(UnaryOp::Log, sum)?;
        b.binary(BinaryOp::Sub, shifted, log_sum)
    } else {
        b.binary(BinaryOp::Div, exp, sum)
    }
}

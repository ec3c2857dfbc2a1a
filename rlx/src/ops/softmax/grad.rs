//! The gradient of softmax and log-softmax.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::ir::{NodeId, ReduceOp, UnaryOp};

/// softmax: `y·(g − Σ g·y)`; log-softmax: `g − exp(y)·Σ g`.
pub(crate) fn softmax(
    e: &mut Emitter<'_>,
    axis: usize,
    log: bool,
    y: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let grad = if log {
        let total = e.reduce(ReduceOp::Sum, g, vec![axis], true)?;
        let p = e.unary(UnaryOp::Exp, y)?;
        let spread = e.mul(p, total)?;
        e.sub(g, spread)?
    } else {
        let gy = e.mul(g, y)?;
        let dot = e.reduce(ReduceOp::Sum, gy, vec![axis], true)?;
        let centered = e.sub(g, dot)?;
        e.mul(y, centered)?
    };
    Ok(vec![Grad::Some(grad)])
}

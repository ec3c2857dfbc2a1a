//! Layer and RMS normalization as other ops: their reference and the lowering of a backend
//! without a kernel.

use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{BinaryOp, NodeId, ReduceOp, Scalar, UnaryOp};

/// Each row of the last axis centred by its mean (`centered`, layer norm) or not (RMS
/// norm), divided by `sqrt(mean of squares + eps)`, then times `weight` and plus `bias`
/// when given.
pub(super) fn normalize(
    b: &mut GraphBuilder,
    centered: bool,
    eps: f64,
    x: NodeId,
    weight: Option<NodeId>,
    bias: Option<NodeId>,
) -> Result<NodeId, BuildError> {
    let ty = b.ty(x).expect("an operand of the graph").clone();
    let last = ty.rank() - 1;
    let centred = if centered {
        let mean = b.reduce(ReduceOp::Mean, x, &[last], true)?;
        b.binary(BinaryOp::Sub, x, mean)?
    } else {
        x
    };
    let square = b.mul(centred, centred)?;
    let variance = b.reduce(ReduceOp::Mean, square, &[last], true)?;
    let eps = b.scalar(Scalar::Float(eps), ty.dtype);
    let shifted = b.add(variance, eps)?;
    let inverse = b.unary(UnaryOp::Rsqrt, shifted)?;
    let mut y = b.mul(centred, inverse)?;
    if let Some(w) = weight {
        y = b.mul(y, w)?;
    }
    if let Some(bias) = bias {
        y = b.add(y, bias)?;
    }
    Ok(y)
}

//! Matrix products and linear solves.

use crate::autodiff::Emitter;
use crate::autodiff::Grad;
use crate::autodiff::GradError;
use crate::ir::{Dim, NodeId, Op, Shape};
use crate::ir::{MatMul, Permute};

fn matmul_op(
    e: &mut Emitter<'_>,
    a: NodeId,
    b: NodeId,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<NodeId, GradError> {
    e.op(
        Op::MatMul(MatMul {
            transpose_a,
            transpose_b,
        }),
        &[a, b],
    )
}

/// `y = A'·B'` with `A' = aᵀ` if `transpose_a` (likewise `b`): `gA' = g·B'ᵀ`,
/// `gB' = A'ᵀ·g`, each expressed with transpose flags so no transposed copy is made, then
/// summed over broadcast batch dims.
pub(crate) fn matmul(
    e: &mut Emitter<'_>,
    a: NodeId,
    b: NodeId,
    transpose_a: bool,
    transpose_b: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let ga = if transpose_a {
        // gA = (g·B'ᵀ)ᵀ = B'·gᵀ
        matmul_op(e, b, g, transpose_b, true)?
    } else {
        matmul_op(e, g, b, false, !transpose_b)?
    };
    let (a_shape, b_shape) = (e.shape(a), e.shape(b));
    let gb = if b_shape.rank() == 2 && a_shape.rank() > 2 && !transpose_a {
        // A weight shared by every batch: one GEMM over all rows, [K, (..)·M]·[(..)·M, N],
        // instead of a product per batch entry summed afterwards.
        let r = a_shape.rank();
        let rows = Dim::product(&a_shape.dims()[..r - 1]);
        let gs = e.shape(g);
        let a2 = e.reshape(a, Shape::new([rows.clone(), a_shape[r - 1].clone()]))?;
        let g2 = e.reshape(g, Shape::new([rows, gs[gs.rank() - 1].clone()]))?;
        if transpose_b {
            matmul_op(e, g2, a2, true, false)?
        } else {
            matmul_op(e, a2, g2, true, false)?
        }
    } else if transpose_b {
        // gB = (A'ᵀ·g)ᵀ = gᵀ·A'
        matmul_op(e, g, a, true, transpose_a)?
    } else {
        matmul_op(e, a, g, !transpose_a, false)?
    };
    let ga = e.unbroadcast(ga, &e.shape(a))?;
    let gb = e.unbroadcast(gb, &e.shape(b))?;
    Ok(vec![Grad::Some(ga), Grad::Some(gb)])
}

/// `x = A⁻¹·B`: `gB = A⁻ᵀ·g`, `gA = −gB·xᵀ`.
pub(crate) fn solve(
    e: &mut Emitter<'_>,
    a: NodeId,
    b: NodeId,
    x: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let rank = e.shape(a).rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(rank - 2, rank - 1);
    let at = e.op(Op::Permute(Permute { perm }), &[a])?;
    let gb = e.op(Op::Solve, &[at, g])?;
    let outer = matmul_op(e, gb, x, false, true)?;
    let ga = e.neg(outer)?;
    let ga = e.unbroadcast(ga, &e.shape(a))?;
    let gb = e.unbroadcast(gb, &e.shape(b))?;
    Ok(vec![Grad::Some(ga), Grad::Some(gb)])
}

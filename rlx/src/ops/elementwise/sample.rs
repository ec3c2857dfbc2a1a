//! Random elementwise nodes.

use crate::ir::{BinaryOp, CompareOp, DType, Op, UnaryOp};
use crate::ops::Cast;
use crate::ops::sample::{Sampled, Sampler, chance, dtype, partner, pick};

pub(super) fn unary(s: &mut dyn Sampler) -> Sampled {
    let kind = pick(s, &UnaryOp::ALL);
    let x = s.operand(&|t| kind.domain().admits(t.dtype))?;
    Some((Op::Unary(kind), vec![x]))
}

/// Either operand order, the partner maybe broadcast or a scalar.
pub(super) fn binary(s: &mut dyn Sampler) -> Sampled {
    let kind = pick(s, &BinaryOp::ALL);
    let a = s.operand(&|t| kind.domain().admits(t.dtype))?;
    let b = partner(s, a)?;
    let operands = if chance(s, 0.5) {
        vec![a, b]
    } else {
        vec![b, a]
    };
    Some((Op::Binary(kind), operands))
}

pub(super) fn compare(s: &mut dyn Sampler) -> Sampled {
    let kind = pick(s, &CompareOp::ALL);
    let a = s.operand(&|t| kind.domain().admits(t.dtype))?;
    let b = partner(s, a)?;
    Some((Op::Compare(kind), vec![a, b]))
}

pub(super) fn select(s: &mut dyn Sampler) -> Sampled {
    let cond = s.operand(&|t| t.dtype == DType::Bool)?;
    let a = s.operand(&|t| t.dtype != DType::Bool)?;
    let b = partner(s, a)?;
    Some((Op::Where, vec![cond, a, b]))
}

/// Any operand to any dtype.
pub(super) fn cast(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let to = dtype(s);
    Some((Op::Cast(Cast { to }), vec![x]))
}

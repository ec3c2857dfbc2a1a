//! Random reductions, arg-reductions and running sums.

use crate::ir::{ArgReduceOp, DType, Op, ReduceOp};
use crate::ops::sample::{Sampled, Sampler, axis_of, chance, pick};
use crate::ops::{ArgReduce, Cumsum, Reduce};

/// A random non-empty set of a numeric operand's axes.
pub(super) fn reduce(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype != DType::Bool && t.rank() > 0)?;
    let rank = s.ty(x).rank();
    let mut axes: Vec<usize> = (0..rank).filter(|_| chance(s, 0.5)).collect();
    if axes.is_empty() {
        axes.push(s.below(rank));
    }
    let op = pick(s, &ReduceOp::ALL);
    let keep_dims = chance(s, 0.5);
    let op = Op::Reduce(Reduce {
        op,
        axes,
        keep_dims,
    });
    Some((op, vec![x]))
}

pub(super) fn arg_reduce(s: &mut dyn Sampler) -> Sampled {
    let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
    let op = pick(s, &ArgReduceOp::ALL);
    let keep_dims = chance(s, 0.5);
    let op = Op::ArgReduce(ArgReduce {
        op,
        axis,
        keep_dims,
    });
    Some((op, vec![x]))
}

pub(super) fn cumsum(s: &mut dyn Sampler) -> Sampled {
    let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
    let (exclusive, reverse) = (chance(s, 0.3), chance(s, 0.3));
    let op = Op::Cumsum(Cumsum {
        axis,
        exclusive,
        reverse,
    });
    Some((op, vec![x]))
}

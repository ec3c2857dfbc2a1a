//! Random movement nodes over any operand (any dtype, rank 0 included where the op allows).

use crate::ir::{ConstantData, DType, Dim, Op, Scalar};
use crate::ops::sample::{Sampled, Sampler, chance, dims, pick};
use crate::ops::{Broadcast, Concat, Gather, Pad, Permute, Reshape, ScatterAdd, Slice};

/// Two adjacent axes merged, or a unit axis added.
pub(super) fn reshape(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let mut to = dims(s, x);
    let rank = to.len();
    if rank >= 2 && chance(s, 0.6) {
        let i = s.below(rank - 1);
        let merged = to[i].mul(&to[i + 1]);
        to.splice(i..i + 2, [merged]);
    } else {
        to.insert(s.below(rank + 1), Dim::from(1));
    }
    Some((Op::Reshape(Reshape { shape: to.into() }), vec![x]))
}

pub(super) fn permute(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let rank = s.ty(x).rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, s.below(i + 1));
    }
    Some((Op::Permute(Permute { perm }), vec![x]))
}

/// In-range bounds for the case's sizes, a negative start now and then, stride 1 or 2.
pub(super) fn slice(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.rank() > 0)?;
    let axis = s.below(s.ty(x).rank());
    let size = s.sizes(x)[axis] as i64;
    let start = s.below(size as usize + 1) as i64;
    let stop = if chance(s, 0.5) {
        None
    } else {
        Some(start + s.below((size - start) as usize + 1) as i64)
    };
    let start = if chance(s, 0.3) && size > 0 {
        start - size
    } else {
        start
    };
    let step = 1 + s.below(2);
    let op = Op::Slice(Slice {
        axis,
        start,
        stop,
        step,
    });
    Some((op, vec![x]))
}

/// An operand with itself, or with another of its type between two copies of it.
pub(super) fn concat(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.rank() > 0)?;
    let ty = s.ty(x);
    let axis = s.below(ty.rank());
    let other = s.operand(&|t| *t == ty);
    let parts = match other {
        Some(y) if chance(s, 0.5) => vec![x, y, x],
        _ => vec![x, x],
    };
    Some((Op::Concat(Concat { axis }), parts))
}

/// Unit axes stretched to random dims, and maybe a new leading axis.
pub(super) fn broadcast(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let mut to = dims(s, x);
    for d in to.iter_mut() {
        if *d == Dim::from(1) && chance(s, 0.5) {
            *d = s.dim();
        }
    }
    if chance(s, 0.5) {
        to.insert(0, s.dim());
    }
    Some((Op::Broadcast(Broadcast { shape: to.into() }), vec![x]))
}

pub(super) fn pad(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let ty = s.ty(x);
    let pads = (0..ty.rank()).map(|_| (s.below(3), s.below(3))).collect();
    let value = match ty.dtype {
        d if d.is_float() => Scalar::Float(s.uniform(-1.0, 1.0)),
        DType::Bool => Scalar::Bool(chance(s, 0.5)),
        _ => Scalar::Int(s.below(5) as i64 - 2),
    };
    Some((Op::Pad(Pad { pads, value }), vec![x]))
}

/// Up to four valid indices for the case's sizes (`i32` or `i64` constants).
pub(super) fn gather(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.rank() > 0)?;
    let axis = s.below(s.ty(x).rank());
    let size = s.sizes(x)[axis];
    let count = if size == 0 { 0 } else { s.below(5) };
    let indices: Vec<i64> = (0..count).map(|_| s.below(size) as i64).collect();
    let data = if pick(s, &[DType::I32, DType::I64]) == DType::I32 {
        let narrow: Vec<i32> = indices.iter().map(|&i| i as i32).collect();
        ConstantData::from_slice(&narrow, [count])
    } else {
        ConstantData::from_slice(&indices, [count])
    };
    let idx = s.constant(data.ok()?)?;
    Some((Op::Gather(Gather { axis }), vec![x, idx]))
}

/// Valid, sometimes repeated, indices and new updates of the fitting dims.
pub(super) fn scatter_add(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype != DType::Bool && t.rank() > 0)?;
    let ty = s.ty(x);
    let axis = s.below(ty.rank());
    let size = s.sizes(x)[axis];
    let count = if size == 0 { 0 } else { 1 + s.below(4) };
    let indices: Vec<i64> = (0..count).map(|_| s.below(size) as i64).collect();
    let idx = s.constant(ConstantData::from_slice(&indices, [count]).ok()?)?;
    let mut updates = ty.shape.dims().to_vec();
    updates[axis] = Dim::from(count);
    let updates = s.input(ty.dtype, updates)?;
    Some((Op::ScatterAdd(ScatterAdd { axis }), vec![x, idx, updates]))
}

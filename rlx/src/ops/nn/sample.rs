//! Random attention and rotary embedding nodes.

use crate::ir::{AttentionMask, ConstantData, DType, Dim, Op};
use crate::ops::sample::{Sampled, Sampler, chance, dims, pick};
use crate::ops::{Attention, Rope};

/// A float operand as the queries over new keys and values (one key head serving every
/// query head now and then), with each kind of mask.
pub(super) fn attention(s: &mut dyn Sampler) -> Sampled {
    let q = s.operand(&|t| t.dtype.is_float() && (2..=4).contains(&t.rank()))?;
    let (dtype, q_dims) = (s.ty(q).dtype, dims(s, q));
    let rank = q_dims.len();
    let mut k = q_dims.clone();
    k[rank - 2] = s.dim();
    if rank >= 3 && q_dims[rank - 3].as_static().is_some() && chance(s, 0.3) {
        k[rank - 3] = Dim::from(1);
    }
    let mut v = k.clone();
    v[rank - 1] = s.dim();
    let (seq_q, seq_k) = (q_dims[rank - 2].clone(), k[rank - 2].clone());
    let key = s.input(dtype, k)?;
    let value = s.input(dtype, v)?;
    let mut operands = vec![q, key, value];
    let mask = match s.below(4) {
        0 => AttentionMask::None,
        1 => AttentionMask::Causal,
        2 => AttentionMask::SlidingWindow(1 + s.below(3)),
        _ => {
            let mask_dtype = if chance(s, 0.6) { DType::Bool } else { dtype };
            operands.push(s.input(mask_dtype, vec![seq_q, seq_k])?);
            AttentionMask::Tensor
        }
    };
    let scale = s.uniform(0.1, 1.0);
    Some((Op::Attention(Attention { scale, mask }), operands))
}

/// Some even number of a float operand's features, a constant offset now and then.
pub(super) fn rope(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| {
        let last = t.shape.dims().last().and_then(Dim::as_static);
        t.dtype.is_float() && t.rank() >= 2 && last.is_some_and(|n| n >= 2)
    })?;
    let features = dims(s, x).last().and_then(Dim::as_static)?;
    let rotated = 2 * (1 + s.below(features / 2));
    let mut operands = vec![x];
    if chance(s, 0.4) {
        let offset = s.below(4) as i64;
        operands.push(s.constant(ConstantData::from_slice(&[offset], [0usize; 0]).ok()?)?);
    }
    let op = Op::Rope(Rope {
        dims: rotated,
        base: 10000.0,
        scale: pick(s, &[1.0, 0.5]),
        traditional: chance(s, 0.5),
    });
    Some((op, operands))
}

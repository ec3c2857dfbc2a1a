//! Attention and rotary embeddings.

use crate::autodiff::Emitter;
use crate::autodiff::Grad;
use crate::autodiff::GradError;
use crate::ir::{AttentionMask, BinaryOp, CompareOp, DType, Dim, NodeId, Op, ReduceOp, Shape};
use crate::ir::{MatMul, Rope, Softmax};

/// Which keys each query may see under a causal or sliding-window mask, as `bool [Sq, Sk]`:
/// queries align to the end of the keys, as the forward kernels do.
fn causal_allowed(
    e: &mut Emitter<'_>,
    seq_q: Dim,
    seq_k: Dim,
    window: Option<usize>,
) -> Result<NodeId, GradError> {
    let qi = e.iota(seq_q.clone())?;
    let ki = e.iota(seq_k.clone())?;
    // Query i sits at key position i + Sk − Sq (negative before the first key: it sees
    // none), the offset counted at run time so symbolic lengths work.
    let nq = e.count(&Shape::new([seq_q.clone()]), &[0], DType::I64)?;
    let nk = e.count(&Shape::new([seq_k.clone()]), &[0], DType::I64)?;
    let offset = e.binary(BinaryOp::Sub, nk, nq)?;
    let pos = e.add(qi, offset)?;
    let pos = e.reshape(pos, Shape::new([seq_q, Dim::Static(1)]))?;
    let key = e.reshape(ki, Shape::new([Dim::Static(1), seq_k]))?;
    let before = e.op(Op::Compare(CompareOp::Le), &[key, pos])?;
    let Some(w) = window else {
        return Ok(before);
    };
    // key > pos − w  ⇔  key + w > pos
    let wc = e.int(w as i64);
    let reach = e.add(key, wc)?;
    let inside = e.op(Op::Compare(CompareOp::Gt), &[reach, pos])?;
    // before && inside
    e.op(Op::Where, &[before, inside, before])
}

/// `k` (or `v`) repeated over the query heads that share it: `[.., Hk, S, D]` to
/// `[.., Hk·g, S, D]`, head `h` of the result being head `h / g` of the input.
fn repeat_heads(e: &mut Emitter<'_>, x: NodeId, group: usize) -> Result<NodeId, GradError> {
    if group == 1 {
        return Ok(x);
    }
    let shape = e.shape(x);
    let r = shape.rank();
    let mut split = shape.dims().to_vec();
    split.insert(r - 2, Dim::Static(1));
    let one = e.reshape(x, Shape::new(split.clone()))?;
    split[r - 2] = Dim::Static(group);
    let spread = e.broadcast(one, Shape::new(split))?;
    let mut merged = shape.dims().to_vec();
    merged[r - 3] = merged[r - 3].mul(&Dim::Static(group));
    e.reshape(spread, Shape::new(merged))
}

/// The adjoint of [`repeat_heads`]: sums each group of heads.
fn sum_heads(
    e: &mut Emitter<'_>,
    g: NodeId,
    like: &Shape,
    group: usize,
) -> Result<NodeId, GradError> {
    if group == 1 {
        return Ok(g);
    }
    let r = like.rank();
    let mut split = like.dims().to_vec();
    split.insert(r - 2, Dim::Static(group));
    let grouped = e.reshape(g, Shape::new(split))?;
    let summed = e.reduce(ReduceOp::Sum, grouped, vec![r - 2], false)?;
    e.reshape(summed, like.clone())
}

/// Recomputes the attention probabilities `P` (zero rows where every key is masked), then
/// `dV = Pᵀ·g`, `dS = P ⊙ (g·Vᵀ − rowsum(…⊙P))`, `dQ = scale·dS·K`, `dK = scale·dSᵀ·Q`;
/// grouped heads sum back onto their key/value head. An additive mask gets `dS`.
pub(crate) fn attention(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    scale: f64,
    mask: AttentionMask,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let (q, k, v) = (x[0], x[1], x[2]);
    let (qs, ks, vs) = (e.shape(q), e.shape(k), e.shape(v));
    let r = qs.rank();
    let group = if r >= 3 {
        match (qs[r - 3].as_static(), ks[r - 3].as_static()) {
            (Some(hq), Some(hk)) if hk > 0 && hq != hk => hq / hk,
            _ => 1,
        }
    } else {
        1
    };
    let ke = repeat_heads(e, k, group)?;
    let ve = repeat_heads(e, v, group)?;
    let dtype = e.dtype(q);
    let matmul = |e: &mut Emitter<'_>, a, b, ta, tb| {
        e.op(
            Op::MatMul(MatMul {
                transpose_a: ta,
                transpose_b: tb,
            }),
            &[a, b],
        )
    };
    let raw = matmul(e, q, ke, false, true)?;
    let mut scores = e.scale(raw, scale)?;
    let allowed = match mask {
        AttentionMask::None => None,
        AttentionMask::Causal => Some(causal_allowed(
            e,
            qs[r - 2].clone(),
            ks[r - 2].clone(),
            None,
        )?),
        AttentionMask::SlidingWindow(w) => Some(causal_allowed(
            e,
            qs[r - 2].clone(),
            ks[r - 2].clone(),
            Some(w),
        )?),
        AttentionMask::Tensor if e.dtype(x[3]) == DType::Bool => Some(x[3]),
        AttentionMask::Tensor => {
            scores = e.add(scores, x[3])?;
            None
        }
    };
    if let Some(allowed) = allowed {
        let blocked = e.scalar(f64::NEG_INFINITY, dtype);
        scores = e.op(Op::Where, &[allowed, scores, blocked])?;
    }
    let p = e.op(
        Op::Softmax(Softmax {
            axis: r - 1,
            log: false,
        }),
        &[scores],
    )?;
    // A fully masked row is NaN here (−∞ − −∞); the forward pass gives it zeros.
    let nan = e.op(Op::Compare(CompareOp::Ne), &[p, p])?;
    let zero = e.scalar(0.0, dtype);
    let p = e.op(Op::Where, &[nan, zero, p])?;

    let dv = matmul(e, p, g, true, false)?;
    let dp = matmul(e, g, ve, false, true)?;
    let dpp = e.mul(dp, p)?;
    let rows = e.reduce(ReduceOp::Sum, dpp, vec![r - 1], true)?;
    let centered = e.sub(dp, rows)?;
    let ds = e.mul(p, centered)?;
    let dq = matmul(e, ds, ke, false, false)?;
    let dq = e.scale(dq, scale)?;
    let dk = matmul(e, ds, q, true, false)?;
    let dk = e.scale(dk, scale)?;
    let dk = sum_heads(e, dk, &ks, group)?;
    let dv = sum_heads(e, dv, &vs, group)?;
    let mut grads = vec![
        Grad::Some(e.unbroadcast(dq, &qs)?),
        Grad::Some(e.unbroadcast(dk, &ks)?),
        Grad::Some(e.unbroadcast(dv, &vs)?),
    ];
    if mask == AttentionMask::Tensor {
        grads.push(if e.dtype(x[3]) == DType::Bool {
            Grad::Discrete
        } else {
            Grad::Some(e.unbroadcast(ds, &e.shape(x[3]))?)
        });
    }
    Ok(grads)
}

/// A rotation's adjoint is the opposite rotation: the same op with the angles negated.
pub(crate) fn rope(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    dims: usize,
    base: f64,
    scale: f64,
    traditional: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let back = Op::Rope(Rope {
        dims,
        base,
        scale: -scale,
        traditional,
    });
    let mut operands = vec![g];
    operands.extend(x.get(1).copied());
    let grad = e.op(back, &operands)?;
    let mut grads = vec![Grad::Some(grad)];
    if x.len() > 1 {
        grads.push(Grad::Discrete);
    }
    Ok(grads)
}

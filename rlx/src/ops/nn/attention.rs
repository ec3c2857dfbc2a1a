//! Scaled dot-product attention with its masks and grouped heads.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    AttentionMask, BinaryOp, CompareOp, ConstantData, DType, Dim, InferError, MatMul, NodeId, Op,
    ReduceOp, Shape, Softmax, TensorType, attr_err,
};
use crate::ops::array::{Array, Out};
use crate::ops::check::{
    arity, broadcast_shapes, exact_rank, min_rank, require_float, require_index, same_dim,
    same_dtype,
};
use crate::ops::sample::{Sampled, Sampler, chance, dims};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Scaled dot-product attention `softmax(q kᵀ · scale + mask) v`. Operands: `q`
/// `[.., Sq, D]`, `k` `[.., Sk, D]`, `v` `[.., Sk, Dv]`, then the mask for
/// [`AttentionMask::Tensor`]. With rank ≥ 3 the axis before the sequence is heads: `q`
/// may have a multiple of `k`'s heads (grouped-query attention). A query row whose keys are
/// all masked yields zeros.
///
/// With [`key_length`](Attention::key_length), a last operand `n` (an `i32`/`i64` scalar)
/// says how many leading keys and values to attend: the op is then the attention over
/// `k[.., :n, :]` and `v[.., :n, :]` (masks and the causal alignment apply to those `n`), read
/// in place, so a decode step attends the filled part of a cache of fixed capacity. For
/// operands of rank 3 or more, `n` may be a vector with one length per row of axis 0 (a
/// batch of sequences, each as long as its own). An `n` outside `[0, Sk]` is
/// [`RunError::WindowOutOfRange`](crate::backend::RunError).
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    /// Multiplies the scores, typically `1/sqrt(D)`.
    pub scale: f64,
    /// Masking.
    pub mask: AttentionMask,
    /// A last operand gives the number of keys attended (see above).
    pub key_length: bool,
}

impl Primitive for Attention {
    fn name(&self) -> &'static str {
        "attention"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("scale={}", self.scale));
        match self.mask {
            AttentionMask::None => {}
            AttentionMask::Causal => out.push("causal".into()),
            AttentionMask::SlidingWindow(w) => out.push(format!("window={w}")),
            AttentionMask::Tensor => out.push("mask".into()),
        }
        crate::ops::flag(out, self.key_length, "key_length");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Attention(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        let rest = usize::from(self.mask == AttentionMask::Tensor);
        if self.key_length {
            let at = 3 + rest;
            if inputs.len() != at + 1 {
                return Err(InferError::Arity {
                    expected: if rest == 1 {
                        "5 (q, k, v, mask, key_length)"
                    } else {
                        "4 (q, k, v, key_length)"
                    },
                    got: inputs.len(),
                });
            }
            require_index(inputs, at)?;
            let (n, q) = (&inputs[at].shape, &inputs[0].shape);
            let per_row = n.rank() == 1 && q.rank() >= 3 && n[0] == q[0];
            if n.rank() != 0 && !per_row {
                return Err(attr_err!(
                    "the key length must be a scalar, or a vector of one length per row of \
                     axis 0 ({}) for operands of rank 3 or more, got {n}",
                    q[0]
                ));
            }
            return attention_type(self.scale, self.mask, &inputs[..at]);
        }
        attention_type(self.scale, self.mask, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let length = self.key_length.then(|| x[x.len() - 1]);
        let mut grads = attention_vjp(e, x, y, self.scale, self.mask, length, g)?;
        if self.key_length {
            grads.push(Grad::Discrete);
        }
        Ok(grads)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // Scores of up to `d * scale^2 * |factor|`, probabilities over `t` keys, then a
        // weighted sum of values.
        let (q, k) = (x.dims(0), x.dims(1));
        let d = q.last().copied().unwrap_or(1).max(1) as f64;
        let t = k.get(k.len().wrapping_sub(2)).copied().unwrap_or(1).max(1) as f64;
        let scores = self.scale.abs() * d * x.scale * x.scale;
        Bound::Within {
            rel: 4.0 * x.u,
            abs: 64.0 * x.u * t * (1.0 + scores) * x.scale + x.tiny,
            growth: scores.max(t * x.scale),
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let (x, length) = match self.key_length {
            true => (&x[..x.len() - 1], Some(&x[x.len() - 1])),
            false => (x, None),
        };
        let seq_k = x[1].shape[x[1].shape.len() - 2];
        let keys = match length {
            None => vec![seq_k],
            Some(n) if n.data.is_empty() => vec![seq_k],
            Some(n) => n
                .data
                .iter()
                .map(|&n| {
                    let n = n as i64;
                    usize::try_from(n).ok().filter(|n| *n <= seq_k).ok_or(
                        ReferenceError::WindowOutOfRange {
                            offset: n.min(0),
                            window: n.max(0) as usize,
                            size: seq_k,
                        },
                    )
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(attention_value(self.scale, self.mask, x, &keys, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_attention(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn attention_type(
    scale: f64,
    mask: AttentionMask,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    if mask == AttentionMask::Tensor {
        arity(inputs, 4, "4 (q, k, v, mask)")?;
    } else {
        arity(inputs, 3, "3 (q, k, v)")?;
    }
    if !scale.is_finite() {
        return Err(attr_err!("scale must be finite, got {scale}"));
    }
    if mask == AttentionMask::SlidingWindow(0) {
        return Err(attr_err!("a sliding window must hold at least 1 position"));
    }
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    same_dtype(inputs, 0, 2)?;
    min_rank(inputs, 0, 2)?;
    let rank = inputs[0].rank();
    exact_rank(inputs, 1, rank)?;
    exact_rank(inputs, 2, rank)?;
    let (q, k, v) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
    let (seq_q, head_dim) = (&q[rank - 2], &q[rank - 1]);
    let (seq_k, value_dim) = (&k[rank - 2], &v[rank - 1]);
    same_dim("head dims of q and k", head_dim, &k[rank - 1])?;
    same_dim("sequence lengths of k and v", seq_k, &v[rank - 2])?;
    for axis in 0..rank - 2 {
        same_dim(
            &format!("dims of axis {axis} of k and v"),
            &k[axis],
            &v[axis],
        )?;
        let grouped = axis == rank - 3
            && matches!(
                (q[axis].as_static(), k[axis].as_static()),
                (Some(hq), Some(hk)) if hk > 0 && hq % hk == 0
            );
        if !grouped {
            same_dim(
                &format!("dims of axis {axis} of q and k"),
                &q[axis],
                &k[axis],
            )?;
        }
    }
    let mut scores = q.dims()[..rank - 2].to_vec();
    scores.extend([seq_q.clone(), seq_k.clone()]);
    let scores = Shape::new(scores);
    if mask == AttentionMask::Tensor {
        let m = &inputs[3];
        if m.dtype != crate::ir::DType::Bool {
            same_dtype(inputs, 0, 3)?;
        }
        let fits =
            m.rank() <= rank && broadcast_shapes(&m.shape, &scores).is_ok_and(|s| s == scores);
        if !fits {
            return Err(attr_err!(
                "mask {} does not broadcast to the scores {scores}",
                m.shape
            ));
        }
    }
    let mut out = q.dims()[..rank - 1].to_vec();
    out.push(value_dim.clone());
    Ok(TensorType::new(inputs[0].dtype, out))
}

/// Recomputes the attention probabilities `P` (zero rows where every key is masked), then
/// `dV = Pᵀ·g`, `dS = P ⊙ (g·Vᵀ − rowsum(…⊙P))`, `dQ = scale·dS·K`, `dK = scale·dSᵀ·Q`;
/// grouped heads sum back onto their key/value head. An additive mask gets `dS`.
/// The gradients of attention from the scores recomputed, in the usual order of a fused
/// backward: `dS = P ⊙ (dP − D)` with `D = rowsum(dO ⊙ O)` (equal to `rowsum(dP ⊙ P)`
/// since `O = P V`, over the value width instead of the keys), and the scale applied to `q`
/// once, which `dK = dSᵀ (q·scale)` then needs no pass of its own.
fn attention_vjp(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    y: NodeId,
    scale: f64,
    mask: AttentionMask,
    length: Option<NodeId>,
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
    let q_scaled = e.scale(q, scale)?;
    let mut scores = matmul(e, q_scaled, ke, false, true)?;
    let seq_k = ks[r - 2].clone();
    let mut allowed = match mask {
        AttentionMask::None => None,
        AttentionMask::Causal => Some(causal_allowed(e, &qs, seq_k, length, None)?),
        AttentionMask::SlidingWindow(w) => Some(causal_allowed(e, &qs, seq_k, length, Some(w))?),
        AttentionMask::Tensor if e.dtype(x[3]) == DType::Bool => Some(x[3]),
        AttentionMask::Tensor => {
            scores = e.add(scores, x[3])?;
            None
        }
    };
    if let Some(n) = length {
        // Keys from `n` on are not attended.
        let keys = e.iota(ks[r - 2].clone())?;
        let n = e.op(Op::Cast(crate::ir::Cast { to: DType::I64 }), &[n])?;
        let n = per_row_lengths(e, n, &qs)?;
        let within = e.op(Op::Compare(CompareOp::Lt), &[keys, n])?;
        allowed = Some(match allowed {
            Some(a) => e.op(Op::Where, &[within, a, within])?,
            None => within,
        });
    }
    if let Some(allowed) = allowed {
        let blocked = e.scalar(f64::NEG_INFINITY, dtype);
        scores = e.op(Op::Where, &[allowed, scores, blocked])?;
    }
    let mut p = e.op(
        Op::Softmax(Softmax {
            axis: r - 1,
            log: false,
        }),
        &[scores],
    )?;
    if mask != AttentionMask::None || length.is_some() {
        // A fully masked row is NaN here (−∞ − −∞); the forward pass gives it zeros.
        // Without a mask no row is masked, and the guard would cost two passes over the
        // scores.
        let nan = e.op(Op::Compare(CompareOp::Ne), &[p, p])?;
        let zero = e.scalar(0.0, dtype);
        p = e.op(Op::Where, &[nan, zero, p])?;
    }

    let dv = matmul(e, p, g, true, false)?;
    let dp = matmul(e, g, ve, false, true)?;
    let go = e.mul(g, y)?;
    let rows = e.reduce(ReduceOp::Sum, go, vec![r - 1], true)?;
    let centered = e.sub(dp, rows)?;
    let ds = e.mul(p, centered)?;
    let dq = matmul(e, ds, ke, false, false)?;
    let dq = e.scale(dq, scale)?;
    let dk = matmul(e, ds, q_scaled, true, false)?;
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

/// `softmax(q kᵀ · scale + mask) v`, query heads sharing key/value heads in groups; a row
/// with no visible key is 0.
/// Only the first `keys` keys are attended: one count, or one per row of axis 0.
fn attention_value(
    scale: f64,
    mask: AttentionMask,
    x: &[Array],
    keys: &[usize],
    out: &Out,
) -> Array {
    let (q, k, v) = (&x[0], &x[1], &x[2]);
    let r = q.shape.len();
    let (sq, d) = (q.shape[r - 2], q.shape[r - 1]);
    let group = if r >= 3 {
        q.shape[r - 3] / k.shape[r - 3].max(1)
    } else {
        1
    };
    let tensor_mask = x.get(3);
    let mut score_at = Vec::with_capacity(r);
    out.fill(|o| {
        let lead = &o[..r - 2];
        let mut kv_lead = lead.to_vec();
        if r >= 3 {
            kv_lead[r - 3] /= group.max(1);
        }
        let i = o[r - 2];
        let sk = keys[o[0].min(keys.len() - 1)];
        // Queries and keys are aligned at their ends.
        let pos = i as i64 + sk as i64 - sq as i64;
        let row = |t: &Array, lead: &[usize], row: usize| -> usize {
            let mut flat = 0;
            for (a, dim) in t.shape[..r - 2].iter().enumerate() {
                flat = flat * dim + lead[a];
            }
            (flat * t.shape[r - 2] + row) * t.shape[r - 1]
        };
        let qi = row(q, lead, i);
        let scores: Vec<f64> = (0..sk)
            .map(|j| {
                let visible = match mask {
                    AttentionMask::Causal => (j as i64) <= pos,
                    AttentionMask::SlidingWindow(w) => {
                        (j as i64) <= pos && j as i64 + w as i64 > pos
                    }
                    AttentionMask::None | AttentionMask::Tensor => true,
                };
                if !visible {
                    return f64::NEG_INFINITY;
                }
                let kj = row(k, &kv_lead, j);
                let dot: f64 = (0..d).map(|c| q.data[qi + c] * k.data[kj + c]).sum();
                let mut s = dot * scale;
                if let Some(m) = tensor_mask {
                    score_at.clear();
                    score_at.extend_from_slice(lead);
                    score_at.extend([i, j]);
                    let mv = m.at_broadcast(&score_at);
                    if m.dtype == DType::Bool {
                        if mv == 0.0 {
                            return f64::NEG_INFINITY;
                        }
                    } else {
                        s += mv;
                    }
                }
                s
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            return 0.0;
        }
        let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = weights.iter().sum();
        let c = o[r - 1];
        (0..sk)
            .map(|j| weights[j] / sum * v.data[row(v, &kv_lead, j) + c])
            .sum()
    })
}

/// A float operand as the queries over new keys and values (one key head serving every
/// query head now and then), with each kind of mask.
fn random_attention(s: &mut dyn Sampler) -> Sampled {
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
    // Now and then over the first `n` keys only.
    let key_length = chance(s, 0.25);
    if key_length {
        let sizes = s.sizes(key);
        let seq_k = sizes[rank - 2];
        // One length per row of axis 0 now and then.
        let rows = (rank >= 3 && chance(s, 0.4)).then(|| s.sizes(q)[0]);
        let lengths: Vec<i64> = (0..rows.unwrap_or(1))
            .map(|_| s.below(seq_k + 1) as i64)
            .collect();
        let dims = Shape::from(rows.into_iter().collect::<Vec<usize>>().as_slice());
        let n = if chance(s, 0.5) {
            let narrow: Vec<i32> = lengths.iter().map(|&n| n as i32).collect();
            ConstantData::from_slice(&narrow, dims)
        } else {
            ConstantData::from_slice(&lengths, dims)
        };
        operands.push(s.constant(n.ok()?)?);
    }
    let scale = s.uniform(0.1, 1.0);
    let op = Attention {
        scale,
        mask,
        key_length,
    };
    Some((Op::Attention(op), operands))
}

/// Which keys each query may see under a causal or sliding-window mask, as `bool [Sq, Sk]`:
/// queries align to the end of the keys, as the forward kernels do.
fn causal_allowed(
    e: &mut Emitter<'_>,
    q_shape: &Shape,
    seq_k: Dim,
    length: Option<NodeId>,
    window: Option<usize>,
) -> Result<NodeId, GradError> {
    let seq_q = q_shape[q_shape.rank() - 2].clone();
    let qi = e.iota(seq_q.clone())?;
    let ki = e.iota(seq_k.clone())?;
    // Query i sits at key position i + Sk − Sq (negative before the first key: it sees
    // none), the offset counted at run time so symbolic lengths work; with a key length
    // `n`, at i + n − Sq.
    let nq = e.count(&Shape::new([seq_q.clone()]), &[0], DType::I64)?;
    let nk = match length {
        Some(n) => e.op(Op::Cast(crate::ir::Cast { to: DType::I64 }), &[n])?,
        None => e.count(&Shape::new([seq_k.clone()]), &[0], DType::I64)?,
    };
    let offset = e.binary(BinaryOp::Sub, nk, nq)?;
    // Lengths per row of axis 0 give positions of shape [R, 1, .., Sq, 1].
    let offset = per_row_lengths(e, offset, q_shape)?;
    let qi = e.reshape(qi, Shape::new([seq_q, Dim::Static(1)]))?;
    let pos = e.add(qi, offset)?;
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

/// A key length (or a value derived from one) as it broadcasts against scores of rank
/// `q`'s: a scalar as it is, one per row of axis 0 as `[R, 1, .., 1]`.
fn per_row_lengths(e: &mut Emitter<'_>, n: NodeId, q: &Shape) -> Result<NodeId, GradError> {
    if e.shape(n).rank() == 0 {
        return Ok(n);
    }
    let mut dims = vec![q[0].clone()];
    dims.resize(q.rank(), Dim::Static(1));
    e.reshape(n, Shape::new(dims))
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

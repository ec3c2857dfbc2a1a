//! Drawing the next token from logits: greedy, temperature, top-k, top-p and min-p in one
//! composite, with per-row settings given as tensors so one compiled graph serves every
//! request.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    ArgReduce, ArgReduceOp, BinaryOp, CompareOp, ConstantData, Cumsum, DType, Dim, InferError,
    NodeId, Op, ReduceOp, Shape, Sort, SortOutput, TensorType, UnaryOp,
};
use crate::ops::array::{Array, Out};
use crate::ops::check::{
    arity, exact_rank, min_rank, require_float, require_index, same_dim, same_dtype,
};
use crate::ops::sample::{Sampled, Sampler, chance};
use crate::ops::tolerance::{Bound, Operands, unit};
use crate::ops::{Primitive, ReferenceError, composite};

/// One token per row of `logits` `[.., V]`, drawn from the distribution the row's settings
/// leave. Operands, each shaped like the rows `[..]` except `logits`:
/// `logits` (float), `uniform` (a draw in `[0, 1)`, same dtype), `temperature` (same dtype),
/// `top_k` (`i32`/`i64`), `top_p` and `min_p` (same dtype as `logits`). Output `i64` `[..]`.
///
/// Per row, in this order:
/// - `temperature <= 0`: the most likely token (the first of equal maxima), nothing drawn;
/// - otherwise weights `p_i = exp((l_i − max l) / temperature)` (the top token's is 1);
///   tokens ranked by logit, largest first, equal logits by index;
/// - top-k keeps the first `top_k` ranks (all when `top_k <= 0` or past `V`);
/// - top-p keeps the shortest prefix of those whose weight reaches `top_p` of theirs
///   (weights before a rank summing to less than `top_p · mass`, the top token always);
/// - min-p keeps the ranks whose weight is at least `min_p` (the top token always);
/// - the kept tokens, walked in index order, split `[0, Σ kept)` in proportion to their
///   weights, and the token whose share holds `uniform · Σ kept` is the draw (`uniform` is
///   clamped at 0; at 1 or past, the most likely token).
///
/// So a draw depends only on the logits, the settings and `uniform`: the caller's seeded
/// random numbers make runs reproducible. Its float64 reference is its decomposition; a
/// backend's draw is exact but for a `uniform` or a threshold within rounding of a
/// boundary, where it is unjudged.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleToken;

/// The operands in order.
pub(crate) const LOGITS: usize = 0;
pub(crate) const UNIFORM: usize = 1;
pub(crate) const TEMPERATURE: usize = 2;
pub(crate) const TOP_K: usize = 3;
pub(crate) const TOP_P: usize = 4;
pub(crate) const MIN_P: usize = 5;

impl Primitive for SampleToken {
    fn name(&self) -> &'static str {
        "sample_token"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::SampleToken(SampleToken)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(
            inputs,
            6,
            "6 (logits, uniform, temperature, top_k, top_p, min_p)",
        )?;
        require_float(inputs, LOGITS)?;
        min_rank(inputs, LOGITS, 1)?;
        require_index(inputs, TOP_K)?;
        let logits = &inputs[LOGITS];
        let rows = &logits.shape.dims()[..logits.rank() - 1];
        for i in [UNIFORM, TEMPERATURE, TOP_P, MIN_P] {
            same_dtype(inputs, LOGITS, i)?;
        }
        for i in [UNIFORM, TEMPERATURE, TOP_K, TOP_P, MIN_P] {
            exact_rank(inputs, i, rows.len())?;
            for (a, b) in inputs[i].shape.dims().iter().zip(rows) {
                same_dim("row", a, b)?;
            }
        }
        Ok(TensorType::new(DType::I64, rows.to_vec()))
    }

    /// Its result is `i64`: the driver gives its operands nothing before asking.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::None; x.len()])
    }

    /// Exact, or unjudged where rounding could move the draw: a threshold or `uniform`'s
    /// point within `4 (V + 8) u` (relative) of a boundary.
    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        if draw_is_ambiguous(x) {
            Bound::Unjudged
        } else {
            Bound::Exact
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        composite::reference(&Op::SampleToken(SampleToken), x, out)
    }

    /// Logits with static dims, and settings from each filter's interesting range.
    fn sample(s: &mut dyn Sampler) -> Sampled {
        let logits = s.operand(&|t| {
            t.dtype.is_float()
                && t.rank() >= 1
                && t.shape
                    .static_dims()
                    .is_some_and(|d| d.last().is_some_and(|v| *v > 0))
        })?;
        let ty = s.ty(logits);
        let dims = s.sizes(logits);
        let (rows, vocab) = (&dims[..dims.len() - 1], dims[dims.len() - 1]);
        let n: usize = rows.iter().product();
        let draw = |s: &mut dyn Sampler, f: &dyn Fn(&mut dyn Sampler) -> f64| {
            (0..n).map(|_| f(s)).collect::<Vec<f64>>()
        };
        let uniform = draw(s, &|s| s.uniform(0.0, 1.0));
        let temperature = draw(s, &|s| {
            if chance(s, 0.2) {
                0.0
            } else {
                s.uniform(0.2, 3.0)
            }
        });
        let top_k: Vec<i64> = (0..n).map(|_| s.below(vocab + 2) as i64 - 1).collect();
        let top_p = draw(s, &|s| {
            if chance(s, 0.3) {
                1.0
            } else {
                s.uniform(0.0, 1.0)
            }
        });
        let min_p = draw(s, &|s| {
            if chance(s, 0.4) {
                0.0
            } else {
                s.uniform(0.0, 1.0)
            }
        });
        let mut operands = vec![logits];
        for values in [uniform, temperature] {
            operands.push(s.param(ty.dtype, rows, Some(&values))?);
        }
        operands.push(s.constant(ConstantData::from_slice(&top_k, rows).ok()?)?);
        for values in [top_p, min_p] {
            operands.push(s.param(ty.dtype, rows, Some(&values))?);
        }
        Some((Op::SampleToken(SampleToken), operands))
    }

    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        Some(sample_decomposition(b, x))
    }
}

/// The meaning of [`SampleToken`], written with sorts, running sums and counts.
fn sample_decomposition(b: &mut GraphBuilder, x: &[NodeId]) -> Result<NodeId, BuildError> {
    let ty = b
        .ty(x[LOGITS])
        .cloned()
        .expect("operands are nodes of the builder");
    let (float, last) = (ty.dtype, ty.rank() - 1);
    let rows = ty.shape.dims()[..last].to_vec();
    let vocab = ty.shape[last].clone();
    // A row setting as a column `[.., 1]`, to meet the `[.., V]` values.
    let column = |b: &mut GraphBuilder, t: NodeId| {
        let mut dims = rows.clone();
        dims.push(Dim::Static(1));
        b.reshape(t, dims)
    };
    let and = |b: &mut GraphBuilder, p: NodeId, q: NodeId| {
        let no = b.constant(ConstantData::scalar(false, DType::Bool));
        b.select(p, q, no)
    };
    let count = |b: &mut GraphBuilder, t: NodeId| {
        let t = b.cast(t, DType::I64)?;
        b.reduce(ReduceOp::Sum, t, &[last], false)
    };
    let zero_f = b.scalar(0.0, float);
    let one_f = b.scalar(1.0, float);
    let (zero_i, one_i) = (b.scalar(0i64, DType::I64), b.scalar(1i64, DType::I64));

    // Weights: e^((l − max) / T), the top token's exactly 1.
    let logits = x[LOGITS];
    let greedy = b.compare(CompareOp::Le, x[TEMPERATURE], zero_f)?;
    let temperature = b.select(greedy, one_f, x[TEMPERATURE])?;
    let temperature = column(b, temperature)?;
    let max = b.reduce(ReduceOp::Max, logits, &[last], true)?;
    let shifted = b.binary(BinaryOp::Sub, logits, max)?;
    let scaled = b.binary(BinaryOp::Div, shifted, temperature)?;
    let weight = b.unary(UnaryOp::Exp, scaled)?;

    // Ranks: the position of each token in the order by logit (largest first, stable).
    let sort = |axis, descending, output| {
        Op::Sort(Sort {
            axis,
            descending,
            output,
        })
    };
    let order = b.op(sort(last, true, SortOutput::Indices), &[logits])?;
    let rank = b.op(sort(last, false, SortOutput::Indices), &[order])?;
    let ranked = b.op(sort(last, true, SortOutput::Values), &[weight])?;

    // Positions 0, 1, … along the vocabulary, and its size as a value.
    let ones = b.op(
        Op::Broadcast(crate::ir::Broadcast {
            shape: Shape::from(vec![vocab]),
        }),
        &[one_i],
    )?;
    let position = b.op(
        Op::Cumsum(Cumsum {
            axis: 0,
            exclusive: true,
            reverse: false,
        }),
        &[ones],
    )?;
    let size = b.reduce(ReduceOp::Sum, ones, &[0], false)?;

    // top-k: k when 0 < k <= V, else V.
    let k = b.cast(x[TOP_K], DType::I64)?;
    let positive = b.compare(CompareOp::Gt, k, zero_i)?;
    let within = b.compare(CompareOp::Le, k, size)?;
    let valid = and(b, positive, within)?;
    let kept_k = b.select(valid, k, size)?;
    let kept_k_col = column(b, kept_k)?;
    let in_k = b.compare(CompareOp::Lt, position, kept_k_col)?;

    // top-p over the top-k mass.
    let in_k_weight = b.select(in_k, ranked, zero_f)?;
    let mass = b.reduce(ReduceOp::Sum, in_k_weight, &[last], true)?;
    let before = b.op(
        Op::Cumsum(Cumsum {
            axis: last,
            exclusive: true,
            reverse: false,
        }),
        &[ranked],
    )?;
    let top_p = column(b, x[TOP_P])?;
    let needed = b.binary(BinaryOp::Mul, top_p, mass)?;
    let short = b.compare(CompareOp::Lt, before, needed)?;
    let in_p = and(b, in_k, short)?;
    let kept_p = count(b, in_p)?;
    let kept_p = b.binary(BinaryOp::Max, kept_p, one_i)?;

    // min-p: weights are relative to the top token's 1.
    let min_p = column(b, x[MIN_P])?;
    let heavy = b.compare(CompareOp::Ge, ranked, min_p)?;
    let kept_m = count(b, heavy)?;
    let kept_m = b.binary(BinaryOp::Max, kept_m, one_i)?;

    let kept = b.binary(BinaryOp::Min, kept_k, kept_p)?;
    let kept = b.binary(BinaryOp::Min, kept, kept_m)?;
    let kept = column(b, kept)?;
    let keep = b.compare(CompareOp::Lt, rank, kept)?;

    // The draw: the first token whose running sum of kept weights passes u · Σ.
    let kept_weight = b.select(keep, weight, zero_f)?;
    let running = b.op(
        Op::Cumsum(Cumsum {
            axis: last,
            exclusive: false,
            reverse: false,
        }),
        &[kept_weight],
    )?;
    let total = b.reduce(ReduceOp::Max, running, &[last], true)?;
    let uniform = b.binary(BinaryOp::Max, x[UNIFORM], zero_f)?;
    let uniform = column(b, uniform)?;
    let point = b.binary(BinaryOp::Mul, uniform, total)?;
    let passed = b.compare(CompareOp::Le, running, point)?;
    let drawn = count(b, passed)?;

    let best = b.op(
        Op::ArgReduce(ArgReduce {
            op: ArgReduceOp::ArgMax,
            axis: last,
            keep_dims: false,
        }),
        &[logits],
    )?;
    let overflow = b.compare(CompareOp::Ge, drawn, size)?;
    let drawn = b.select(overflow, best, drawn)?;
    b.select(greedy, best, drawn)
}

/// Whether rounding in a backend could move some row's draw (or an operand is not
/// finite): its float64 thresholds (top-p's
/// `top_p · mass` against the weights before each rank, min-p's `min_p` against each
/// weight) or the point `u · Σ` lie within `4 (V + 8) u` of a boundary, relative to the
/// mass.
fn draw_is_ambiguous(x: &Operands<'_>) -> bool {
    let dims = x.dims(LOGITS);
    let Some(&vocab) = dims.last() else {
        return false;
    };
    if vocab == 0 || x.values.len() != 6 {
        return false;
    }
    let margin = 4.0 * (vocab as f64 + 8.0) * unit(x.values[LOGITS].dtype());
    let values: Vec<Vec<f64>> = x.values.iter().map(|t| t.to_f64_vec()).collect();
    // Infinities and NaNs take different paths through a kernel and the decomposition.
    if values.iter().flatten().any(|v| !v.is_finite()) {
        return true;
    }
    let rows = values[UNIFORM].len();
    (0..rows).any(|r| {
        let logits = &values[LOGITS][r * vocab..(r + 1) * vocab];
        let setting = |i: usize| values[i][r];
        row_is_ambiguous(
            logits,
            setting(UNIFORM),
            setting(TEMPERATURE),
            setting(TOP_K),
            setting(TOP_P),
            setting(MIN_P),
            margin,
        )
    })
}

fn row_is_ambiguous(
    logits: &[f64],
    uniform: f64,
    temperature: f64,
    top_k: f64,
    top_p: f64,
    min_p: f64,
    margin: f64,
) -> bool {
    if temperature <= 0.0 {
        return false;
    }
    let vocab = logits.len();
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weight = |i: usize| ((logits[i] - max) / temperature).exp();
    let mut order: Vec<usize> = (0..vocab).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let ranked: Vec<f64> = order.iter().map(|&i| weight(i)).collect();
    let kept_k = if top_k > 0.0 && top_k <= vocab as f64 {
        top_k as usize
    } else {
        vocab
    };
    let mass: f64 = ranked[..kept_k].iter().sum();
    // The top token's weight is 1, so the mass is at least 1.
    let near = |a: f64, b: f64| (a - b).abs() <= margin * mass;
    // A threshold matters where the token it may keep or drop weighs more than rounding.
    let needed = top_p * mass;
    let mut before = 0.0;
    let mut kept_p = None;
    for (i, &w) in ranked[..kept_k].iter().enumerate() {
        let matters = w > margin * mass;
        if matters && (near(before, needed) || (min_p > 0.0 && near(w, min_p))) {
            return true;
        }
        if kept_p.is_none() && before >= needed {
            kept_p = Some(i);
        }
        before += w;
    }
    let kept_p = kept_p.unwrap_or(kept_k).max(1);
    let kept_m = ranked.iter().filter(|w| **w >= min_p).count().max(1);
    let kept = kept_k.min(kept_p).min(kept_m);
    let mut rank = vec![0; vocab];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    let mut running = 0.0;
    let mut sums = Vec::with_capacity(kept);
    for (i, r) in rank.iter().enumerate() {
        if *r < kept {
            running += weight(i);
            sums.push(running);
        }
    }
    let point = uniform.max(0.0) * running;
    sums.iter().any(|s| near(*s, point))
}

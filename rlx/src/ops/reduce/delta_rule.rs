//! The gated delta rule: the matrix-valued recurrence of Gated DeltaNet (Qwen3-Next's
//! linear attention), and its backward pass.
//!
//! Per line (a batch row and a head) the state `S` is a `K x V` matrix that decays by
//! `α_t = exp(g_t)` and then moves its prediction for key `k_t` towards `v_t` by the step
//! `β_t`, and each step reads its output through `q_t`:
//!
//! ```text
//! S_t = α_t S_{t-1} + k_t δ_tᵀ,   δ_t = β_t (v_t − α_t S_{t-1}ᵀ k_t),   o_t = S_tᵀ q_t
//! ```
//!
//! A node has one result, so the op returns the outputs and the final state together:
//! `[.., T + K, V]`, rows `0..T` the outputs and the last `K` rows the state after the last
//! step (what a decoder carries to its next step). Its gradient is a second primitive,
//! [`DeltaRuleGrad`], that runs the recurrence backwards once for every operand's
//! cotangent, packed the same way.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, Dim, InferError, NodeId, Op, Shape, Slice, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity_range, require_float, same_dim, same_dtype};
use crate::ops::sample::{FLOATS, Sampled, Sampler, chance, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// The gated delta rule. Operands: `q` and `k` `[.., T, K]`, `v` `[.., T, V]`, the log
/// decays `g` and the steps `beta` `[.., T]`, optionally the state before the first step
/// `s0` `[.., K, V]` (else zero); floats of one type, the same leading dims. See
/// [`Op::DeltaRule`].
pub(crate) struct DeltaRule;

/// The gradient of [`DeltaRule`]. Operands: the rule's operands, then the cotangent of its
/// result `[.., T + K, V]`. See [`Op::DeltaRuleGrad`].
pub(crate) struct DeltaRuleGrad;

impl Primitive for DeltaRule {
    fn name(&self) -> &'static str {
        "delta_rule"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::DeltaRule
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity_range(inputs, 5..=6, "5 or 6 (q, k, v, g, beta, s0)")?;
        let d = rule_dims(inputs)?;
        let mut dims = d.lead;
        dims.extend([sum(&d.t, &d.k)?, d.v]);
        Ok(TensorType::new(inputs[0].dtype, dims))
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        delta_rule_vjp(e, x, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        delta_rule_bound(x, false)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(delta_rule_value(x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_delta_rule(s, false)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for DeltaRuleGrad {
    fn name(&self) -> &'static str {
        "delta_rule_grad"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::DeltaRuleGrad
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity_range(inputs, 6..=7, "6 or 7 (q, k, v, g, beta, s0, cotangent)")?;
        let (operands, cotangent) = inputs.split_at(inputs.len() - 1);
        let d = rule_dims(operands)?;
        same_dtype(inputs, 0, inputs.len() - 1)?;
        let mut result = d.lead.clone();
        result.extend([sum(&d.t, &d.k)?, d.v.clone()]);
        let cotangent = cotangent[0].shape.dims();
        if cotangent.len() != result.len() {
            return Err(InferError::Rank {
                operand: inputs.len() - 1,
                expected: result.len().to_string(),
                got: cotangent.len(),
            });
        }
        for (want, have) in result.iter().zip(cotangent) {
            same_dim("dims of the result and its cotangent", want, have)?;
        }
        let width = sum(&sum(&d.k.mul(&Dim::from(2)), &d.v)?, &Dim::from(2))?;
        let last = result.len() - 1;
        result[last] = width;
        Ok(TensorType::new(inputs[0].dtype, result))
    }

    /// Second derivatives of the rule are not written yet.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Err(GradError::NotYet { at: e.site() })
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        delta_rule_bound(x, true)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(delta_rule_grad_value(x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_delta_rule(s, true)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

/// The dims the rule's operands agree on.
struct RuleDims {
    lead: Vec<Dim>,
    t: Dim,
    k: Dim,
    v: Dim,
}

fn sum(a: &Dim, b: &Dim) -> Result<Dim, InferError> {
    a.checked_add(b)
        .ok_or_else(|| crate::ir::attr_err!("the dims {a} and {b} overflow when added"))
}

/// Checks `q, k, v, g, beta[, s0]` against each other.
fn rule_dims(inputs: &[TensorType]) -> Result<RuleDims, InferError> {
    require_float(inputs, 0)?;
    for operand in 1..inputs.len() {
        same_dtype(inputs, 0, operand)?;
    }
    let q = inputs[0].shape.dims();
    if q.len() < 2 {
        return Err(InferError::Rank {
            operand: 0,
            expected: "at least 2".into(),
            got: q.len(),
        });
    }
    let rank = q.len();
    let lead = q[..rank - 2].to_vec();
    let (t, k) = (q[rank - 2].clone(), q[rank - 1].clone());
    let v = inputs[2]
        .shape
        .dims()
        .last()
        .cloned()
        .unwrap_or_else(|| Dim::from(0));
    // Each operand's expected dims: the leading dims, then its own.
    let mut per_step = lead.clone();
    per_step.push(t.clone());
    let expected: Vec<(&str, Vec<Dim>)> = vec![
        ("q and k", [per_step.clone(), vec![k.clone()]].concat()),
        ("q and v", [per_step.clone(), vec![v.clone()]].concat()),
        ("q and g", per_step.clone()),
        ("q and beta", per_step),
        (
            "q and s0",
            [lead.clone(), vec![k.clone(), v.clone()]].concat(),
        ),
    ];
    for (operand, (what, want)) in expected.iter().enumerate().take(inputs.len() - 1) {
        let operand = operand + 1;
        let have = inputs[operand].shape.dims();
        if have.len() != want.len() {
            return Err(InferError::Rank {
                operand,
                expected: want.len().to_string(),
                got: have.len(),
            });
        }
        for (w, h) in want.iter().zip(have) {
            same_dim(&format!("dims of {what}"), w, h)?;
        }
    }
    Ok(RuleDims { lead, t, k, v })
}

/// One line's operands (a batch row and head), each a row-major slice.
#[derive(Clone, Copy)]
struct Line<'a> {
    q: &'a [f64],
    k: &'a [f64],
    v: &'a [f64],
    g: &'a [f64],
    beta: &'a [f64],
    s0: Option<&'a [f64]>,
}

/// The sizes of a rule: steps, key and value widths, and lines.
#[derive(Clone, Copy)]
struct Sizes {
    t: usize,
    k: usize,
    v: usize,
    lines: usize,
}

fn sizes_of(x: &[Array]) -> Sizes {
    let q = &x[0].shape;
    let (t, k) = (q[q.len() - 2], q[q.len() - 1]);
    let v = *x[2].shape.last().unwrap_or(&0);
    let lines = q[..q.len() - 2].iter().product();
    Sizes { t, k, v, lines }
}

fn line<'a>(x: &'a [Array], n: Sizes, l: usize) -> Line<'a> {
    let (t, k, v) = (n.t, n.k, n.v);
    Line {
        q: &x[0].data[l * t * k..][..t * k],
        k: &x[1].data[l * t * k..][..t * k],
        v: &x[2].data[l * t * v..][..t * v],
        g: &x[3].data[l * t..][..t],
        beta: &x[4].data[l * t..][..t],
        s0: (x.len() > 5 && x[5].shape.len() == x[0].shape.len())
            .then(|| &x[5].data[l * k * v..][..k * v]),
    }
}

/// The states `S_0 ..= S_T` of one line (`K x V` each, row-major), in float64.
fn states(x: Line<'_>, n: Sizes) -> Vec<f64> {
    let (k, v) = (n.k, n.v);
    let mut all = vec![0.0; (n.t + 1) * k * v];
    if let Some(s0) = x.s0 {
        all[..k * v].copy_from_slice(s0);
    }
    let mut kv = vec![0.0; v];
    for t in 0..n.t {
        let (done, rest) = all.split_at_mut((t + 1) * k * v);
        let (before, after) = (&done[t * k * v..], &mut rest[..k * v]);
        let alpha = x.g[t].exp();
        let key = &x.k[t * k..][..k];
        kv.fill(0.0);
        for (i, ki) in key.iter().enumerate() {
            for (acc, s) in kv.iter_mut().zip(&before[i * v..][..v]) {
                *acc += s * ki;
            }
        }
        for (i, ki) in key.iter().enumerate() {
            for j in 0..v {
                let delta = x.beta[t] * (x.v[t * v + j] - alpha * kv[j]);
                after[i * v + j] = alpha * before[i * v + j] + ki * delta;
            }
        }
    }
    all
}

/// Outputs then the final state, line by line.
fn delta_rule_value(x: &[Array], out: &Out) -> Array {
    let n = sizes_of(x);
    let (k, v) = (n.k, n.v);
    let mut data = Vec::with_capacity(n.lines * (n.t + k) * v);
    for l in 0..n.lines {
        let ops = line(x, n, l);
        let all = states(ops, n);
        for t in 0..n.t {
            let s = &all[(t + 1) * k * v..][..k * v];
            for j in 0..v {
                data.push((0..k).map(|i| s[i * v + j] * ops.q[t * k + i]).sum());
            }
        }
        data.extend_from_slice(&all[n.t * k * v..]);
    }
    out.holding(data)
}

/// Every operand's cotangent, line by line, packed as [`DeltaRuleGrad`] returns them:
/// row `t` of a line holds `dq_t`, `dk_t`, `dv_t`, `dg_t` and `dβ_t`; the last `K` rows hold
/// `ds0` in their first `V` columns.
fn delta_rule_grad_value(x: &[Array], out: &Out) -> Array {
    let (operands, cotangent) = x.split_at(x.len() - 1);
    let n = sizes_of(operands);
    let (t_len, k, v) = (n.t, n.k, n.v);
    let width = 2 * k + v + 2;
    let mut data = vec![0.0; n.lines * (t_len + k) * width];
    let mut d_state = vec![0.0; k * v];
    let (mut kv, mut d_delta, mut d_kv) = (vec![0.0; v], vec![0.0; v], vec![0.0; v]);
    for l in 0..n.lines {
        let x = line(operands, n, l);
        let cot = &cotangent[0].data[l * (t_len + k) * v..][..(t_len + k) * v];
        let all = states(x, n);
        let grads = &mut data[l * (t_len + k) * width..][..(t_len + k) * width];
        d_state.copy_from_slice(&cot[t_len * v..]);
        for t in (0..t_len).rev() {
            let (before, after) = (&all[t * k * v..][..k * v], &all[(t + 1) * k * v..][..k * v]);
            let (q, key) = (&x.q[t * k..][..k], &x.k[t * k..][..k]);
            let (value, d_out) = (&x.v[t * v..][..v], &cot[t * v..][..v]);
            let (alpha, beta) = (x.g[t].exp(), x.beta[t]);
            let row = &mut grads[t * width..][..width];
            for i in 0..k {
                for j in 0..v {
                    d_state[i * v + j] += q[i] * d_out[j];
                }
                row[i] = (0..v).map(|j| after[i * v + j] * d_out[j]).sum();
            }
            for j in 0..v {
                kv[j] = (0..k).map(|i| before[i * v + j] * key[i]).sum();
                d_delta[j] = (0..k).map(|i| d_state[i * v + j] * key[i]).sum();
            }
            let mut d_beta = 0.0;
            for j in 0..v {
                let error = value[j] - alpha * kv[j];
                d_beta += error * d_delta[j];
                row[2 * k + j] = beta * d_delta[j];
                d_kv[j] = -beta * d_delta[j];
            }
            let mut d_alpha = 0.0;
            for i in 0..k {
                let mut dk = 0.0;
                for j in 0..v {
                    let delta = beta * (value[j] - alpha * kv[j]);
                    dk += d_state[i * v + j] * delta + alpha * before[i * v + j] * d_kv[j];
                    let du = d_state[i * v + j] + key[i] * d_kv[j];
                    d_alpha += before[i * v + j] * du;
                    d_state[i * v + j] = alpha * du;
                }
                row[k + i] = dk;
            }
            row[2 * k + v] = alpha * d_alpha;
            row[2 * k + v + 1] = d_beta;
        }
        for i in 0..k {
            let at = (t_len + i) * width;
            grads[at..at + v].copy_from_slice(&d_state[i * v..][..v]);
        }
    }
    out.holding(data)
}

/// `x` cut to `start..stop` along `axis`.
fn cut(
    e: &mut Emitter<'_>,
    x: NodeId,
    axis: usize,
    start: i64,
    stop: Option<i64>,
) -> Result<NodeId, GradError> {
    e.op(
        Op::Slice(Slice {
            axis,
            start,
            stop,
            step: 1,
        }),
        &[x],
    )
}

/// One backward pass for every operand: the packed cotangents cut apart.
fn delta_rule_vjp(e: &mut Emitter<'_>, x: &[NodeId], g: NodeId) -> Result<Vec<Grad>, GradError> {
    let mut operands = x.to_vec();
    operands.push(g);
    let packed = e.op(Op::DeltaRuleGrad, &operands)?;
    let rank = e.ty(x[0]).rank();
    let (row_axis, col_axis) = (rank - 2, rank - 1);
    let static_width = |e: &Emitter<'_>, id: NodeId| {
        e.ty(id).shape.dims()[rank - 1]
            .as_static()
            .ok_or(GradError::NotYet { at: e.site() })
    };
    let (k, v) = (static_width(e, x[0])? as i64, static_width(e, x[2])? as i64);
    let steps = cut(e, packed, row_axis, 0, Some(-k))?;
    let mut grads = Vec::with_capacity(x.len());
    for (start, len) in [(0, k), (k, k), (2 * k, v)] {
        grads.push(Grad::Some(cut(
            e,
            steps,
            col_axis,
            start,
            Some(start + len),
        )?));
    }
    for (operand, column) in [(3, 2 * k + v), (4, 2 * k + v + 1)] {
        let one = cut(e, steps, col_axis, column, Some(column + 1))?;
        let shape: Shape = e.shape(x[operand]);
        grads.push(Grad::Some(e.reshape(one, shape)?));
    }
    if x.len() > 5 {
        let state = cut(e, packed, row_axis, -k, None)?;
        grads.push(Grad::Some(cut(e, state, col_axis, 0, Some(v))?));
    }
    Ok(grads)
}

/// Rounding errors enter at every step (sums of `K` and `V` terms) and are carried forward
/// by the step's linear map `S ↦ α (I − β k kᵀ) S`, whose spectral norm is
/// `α max(1, |1 − β |k|²|)`: 1 for unit keys and steps in `[0, 1]`, as Gated DeltaNet makes
/// them. `amplification` is the product of those norms over the line; the state's
/// Frobenius norm is bounded by it times `|s0| + Σ |β| |k| |v|`. The backward pass runs the
/// transposed maps, so its cotangents grow by the same factor.
fn delta_rule_bound(x: &Operands<'_>, backward: bool) -> Bound {
    let q_dims = x.dims(0);
    if q_dims.len() < 2 || x.values.len() < 5 {
        return Bound::Unjudged;
    }
    let (t, k) = (q_dims[q_dims.len() - 2], q_dims[q_dims.len() - 1]);
    let v_dims = x.dims(2);
    let v = *v_dims.last().unwrap_or(&0);
    let lines: usize = q_dims[..q_dims.len() - 2].iter().product();
    let values: Vec<Vec<f64>> = x.values.iter().map(|t| t.to_f64_vec()).collect();
    let norm = |s: &[f64]| s.iter().map(|a| a * a).sum::<f64>().sqrt();
    let has_start = x.values.len() == if backward { 7 } else { 6 };
    let (mut amplification, mut state, mut rows) = (1.0f64, 0.0f64, 0.0f64);
    for l in 0..lines {
        let (mut amp, mut sum) = (1.0f64, 0.0f64);
        if has_start {
            sum += norm(&values[5][l * k * v..][..k * v]);
        }
        for step in 0..t {
            let at = l * t + step;
            let key = norm(&values[1][at * k..][..k]);
            let beta = values[4][at];
            let alpha = values[3][at].exp();
            amp *= (alpha * (1.0 - beta * key * key).abs().max(1.0)).max(1.0);
            sum += beta.abs() * key * norm(&values[2][at * v..][..v]);
            rows = rows
                .max(norm(&values[0][at * k..][..k]))
                .max(key)
                .max(beta.abs());
        }
        amplification = amplification.max(amp);
        state = state.max(amp * sum);
    }
    let (n, width) = ((t.max(1)) as f64, (k + v).max(1) as f64);
    let rows = rows.max(1.0);
    let mut growth = (1.0 + state) * amplification * rows * rows;
    if backward {
        let cot = x.largest(x.values.len() - 1).max(x.tiny);
        growth *= cot * (1.0 + state) * n * width * rows;
    }
    Bound::Within {
        rel: 8.0 * n * x.u,
        abs: 8.0 * x.u * n * width * growth + x.tiny,
        growth,
    }
}

/// A rule on 1 to 5 steps as Gated DeltaNet feeds it: queries an input (or an operand of
/// its shape), unit keys, log decays in `[-2, 0]` and steps in `[0, 1]` as params; values
/// an input; a starting state at times; for the gradient, a cotangent input.
fn random_delta_rule(s: &mut dyn Sampler, backward: bool) -> Sampled {
    let dtype = if chance(s, 0.15) {
        DType::F64
    } else {
        pick(s, &FLOATS)
    };
    let lead: Vec<usize> = (0..s.below(3)).map(|_| 1 + s.below(3)).collect();
    let (t, k, v) = (1 + s.below(5), 1 + s.below(5), 1 + s.below(5));
    let lines: usize = lead.iter().product();
    let with = |extra: &[usize]| -> Vec<usize> { [lead.as_slice(), extra].concat() };
    let as_dims = |sizes: Vec<usize>| -> Vec<Dim> { sizes.into_iter().map(Dim::from).collect() };
    let q_dims = with(&[t, k]);
    let q = match s
        .operand(&|ty| ty.dtype == dtype && ty.shape.static_dims() == Some(q_dims.clone()))
    {
        Some(q) if chance(s, 0.5) => q,
        _ => s.input(dtype, as_dims(q_dims.clone()))?,
    };
    let mut keys = Vec::with_capacity(lines * t * k);
    for _ in 0..lines * t {
        let row: Vec<f64> = (0..k).map(|_| s.uniform(-1.0, 1.0)).collect();
        let length = row.iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-3);
        keys.extend(row.iter().map(|a| a / length));
    }
    let key = s.param(dtype, &q_dims, Some(&keys))?;
    let value = s.input(dtype, as_dims(with(&[t, v])))?;
    let decays: Vec<f64> = (0..lines * t).map(|_| s.uniform(-2.0, 0.0)).collect();
    let steps: Vec<f64> = (0..lines * t).map(|_| s.uniform(0.0, 1.0)).collect();
    let g = s.param(dtype, &with(&[t]), Some(&decays))?;
    let beta = s.param(dtype, &with(&[t]), Some(&steps))?;
    let mut operands = vec![q, key, value, g, beta];
    if chance(s, 0.4) {
        operands.push(s.input(dtype, as_dims(with(&[k, v])))?);
    }
    if !backward {
        return Some((Op::DeltaRule, operands));
    }
    operands.push(s.input(dtype, as_dims(with(&[t + k, v])))?);
    Some((Op::DeltaRuleGrad, operands))
}

//! The gated delta rule (Gated DeltaNet's recurrence) and its backward pass, line by line
//! in the accumulator type.
//!
//! A line's state is `K x V`, stored row-major (row `i` the values of key dimension `i`),
//! so every step is a handful of passes over rows of `V` contiguous values: the state's
//! reading of the key (`Σ_i S[i] k_i`), the update (`S[i] = α S[i] + k_i δ`) and the
//! output (`Σ_i S[i] q_i`), each vectorized along `V`.

use super::layout::{SharedMut, parallel};
use super::numeric::{FloatStore, Real};
use super::simd::{VectorKernel, vectorized};
use crate::cpu::workers::{Chunks, for_each, threads};

/// The sizes of a rule: lines (batch rows times heads), steps, key and value widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RuleDims {
    pub lines: usize,
    pub t: usize,
    pub k: usize,
    pub v: usize,
}

/// The operands of a rule, as stored.
#[derive(Clone, Copy)]
pub(crate) struct RuleOperands<'a, T> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub g: &'a [T],
    pub beta: &'a [T],
    pub s0: Option<&'a [T]>,
}

/// Value columns a forward task carries: a batch of one with few heads still splits its
/// state between threads.
const COLUMNS: usize = 64;

/// Accumulator scratch per worker of the forward pass.
pub(crate) fn forward_slot(d: RuleDims) -> usize {
    let w = COLUMNS.min(d.v).max(1);
    d.k * w + 3 * w + 2 * d.k
}

/// Accumulator scratch per worker of the backward pass: the state at the start of every
/// chunk of `chunk` steps, the states inside one chunk, the state's cotangent and the
/// step's vectors.
pub(crate) fn backward_slot(d: RuleDims, acc_bytes: usize) -> usize {
    let chunk = chunk_len(d.t, d.k * d.v * acc_bytes);
    let checkpoints = d.t.div_ceil(chunk).max(1);
    (checkpoints + chunk + 1) * d.k * d.v + 6 * d.v + 4 * d.k
}

/// Steps between stored states in the backward pass: about `√T`, so the stored states and
/// the states recomputed per chunk cost `2√T` states, not `T`; but no more than fit in
/// [`CHUNK_BYTES`], since the backward steps read the chunk's states in reverse and
/// states that spill out of the core's L2 cache make them several times slower.
fn chunk_len(t: usize, state_bytes: usize) -> usize {
    let root = (t as f64).sqrt().ceil() as usize;
    root.min(CHUNK_BYTES / state_bytes.max(1)).max(1)
}

/// The recomputed states of a chunk stay within this (a share of a core's L2).
const CHUNK_BYTES: usize = 512 * 1024;

/// `Σ a_i b_i` in 16 lanes (so it vectorizes), summed pairwise.
#[inline(always)]
fn dot<R: Real>(a: &[R], b: &[R]) -> R {
    let mut lanes = [R::ZERO; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((l, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *l += *x * *y;
        }
    }
    let mut width = 16;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            let upper = lanes[i + width];
            lanes[i] += upper;
        }
    }
    let mut sum = lanes[0];
    for (x, y) in ra.iter().zip(rb) {
        sum += *x * *y;
    }
    sum
}

/// `acc += a · x`.
#[inline(always)]
fn axpy<R: Real>(acc: &mut [R], a: R, x: &[R]) {
    for (acc, x) in acc.iter_mut().zip(x) {
        *acc += a * *x;
    }
}

/// The step's correction of every column: `kv` receives `δ = β (v − α Σ_i S[i] k_i)` from
/// the state before the step (`K` rows of `width`).
#[inline(always)]
fn corrections<R: Real>(
    before: &[R],
    width: usize,
    key: &[R],
    (alpha, beta): (R, R),
    value: &[R],
    kv: &mut [R],
) {
    kv.fill(R::ZERO);
    for (row, &ki) in before.chunks_exact(width).zip(key) {
        axpy(kv, ki, row);
    }
    for (d, &v) in kv.iter_mut().zip(value) {
        *d = beta * (v - alpha * *d);
    }
}

/// One step on `state` in place (`kv` left holding the step's `δ`).
#[inline(always)]
fn advance<R: Real>(
    state: &mut [R],
    width: usize,
    key: &[R],
    rates: (R, R),
    value: &[R],
    kv: &mut [R],
) {
    corrections(state, width, key, rates, value, kv);
    for (row, &ki) in state.chunks_exact_mut(width).zip(key) {
        for (s, d) in row.iter_mut().zip(kv.iter()) {
            *s = rates.0 * *s + ki * *d;
        }
    }
}

/// [`advance`] from `before` into `after`.
#[inline(always)]
fn advance_into<R: Real>(
    before: &[R],
    after: &mut [R],
    width: usize,
    key: &[R],
    rates: (R, R),
    value: &[R],
    kv: &mut [R],
) {
    corrections(before, width, key, rates, value, kv);
    for ((out, row), &ki) in after
        .chunks_exact_mut(width)
        .zip(before.chunks_exact(width))
        .zip(key)
    {
        for ((o, &s), &d) in out.iter_mut().zip(row).zip(kv.iter()) {
            *o = rates.0 * s + ki * d;
        }
    }
}

/// One row `i` of a backward step, over the row of the state's cotangent `ds` and of the
/// state before the step `s` (a row stays in L1 across these passes): returns
/// `Σ s·dout`, `Σ ds·δ`, `Σ s·dkv` and, after `ds += k_i dkv`, `Σ s·ds`; then scales `ds`
/// by `α`.
#[inline(always)]
fn back_row<R: Real>(
    ds: &mut [R],
    s: &[R],
    ki: R,
    alpha: R,
    (d_out, delta, d_kv): (&[R], &[R], &[R]),
) -> [R; 4] {
    let read = dot(s, d_out);
    let step = dot(ds, delta);
    let correction = dot(s, d_kv);
    axpy(ds, ki, d_kv);
    let decay = dot(s, ds);
    for x in ds.iter_mut() {
        *x = alpha * *x;
    }
    [read, step, correction, decay]
}

#[inline(always)]
fn widen<T: FloatStore>(src: &[T], dst: &mut [T::Acc]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.load();
    }
}

/// The rule over every line: `out` (`[lines, T + K, V]`) receives each step's output and,
/// in its last `K` rows, the final state. Tasks are a line's block of up to [`COLUMNS`]
/// value columns (columns never mix: each carries its own part of the state); `slots`
/// holds [`forward_slot`] accumulators per worker.
pub(crate) fn delta_rule<T: FloatStore>(
    d: RuleDims,
    x: RuleOperands<'_, T>,
    out: &mut [T],
    slots: &mut [T::Acc],
) {
    let (t_len, k, v) = (d.t, d.k, d.v);
    let width = COLUMNS.min(v).max(1);
    let blocks = v.div_ceil(width);
    let tasks = d.lines * blocks;
    let slot_len = forward_slot(d);
    if tasks == 0 || slot_len == 0 {
        return;
    }
    let workers = if parallel(tasks * t_len * k * width) {
        threads().min(tasks).min(slots.len() / slot_len).max(1)
    } else {
        1
    };
    let shared = SharedMut::new(out);
    let slots = Chunks::new(&mut slots[..workers * slot_len], slot_len);
    let run = |worker: usize| {
        // SAFETY: each worker index is run once, so each slot is taken once.
        let slot = unsafe { slots.take(worker) };
        for task in (worker..tasks).step_by(workers) {
            let (line, first) = (task / blocks, task % blocks * width);
            let cols = width.min(v - first);
            vectorized(ForwardTask {
                d,
                x,
                line,
                columns: (first, cols),
                out: &shared,
                slot: &mut *slot,
            });
        }
    };
    if workers > 1 {
        for_each(workers, run);
    } else {
        run(0);
    }
}

/// Columns `first..first + cols` of one line through every step: the state's part for
/// those columns lives in `slot`, with the step's vectors.
struct ForwardTask<'a, T: FloatStore> {
    d: RuleDims,
    x: RuleOperands<'a, T>,
    line: usize,
    columns: (usize, usize),
    out: &'a SharedMut<T>,
    slot: &'a mut [T::Acc],
}

impl<T: FloatStore> VectorKernel for ForwardTask<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let ForwardTask {
            d,
            x,
            line,
            columns: (first, cols),
            out,
            slot,
        } = self;
        let (t_len, k, v) = (d.t, d.k, d.v);
        let (state, rest) = slot.split_at_mut(k * cols);
        let (kv, rest) = rest.split_at_mut(cols);
        let (output, rest) = rest.split_at_mut(cols);
        let (value, rest) = rest.split_at_mut(cols);
        let (query, rest) = rest.split_at_mut(k);
        let key = &mut rest[..k];
        match x.s0 {
            Some(s0) => {
                for (i, row) in state.chunks_exact_mut(cols).enumerate() {
                    widen(&s0[(line * k + i) * v + first..][..cols], row);
                }
            }
            None => state.fill(<T::Acc as Real>::ZERO),
        }
        let base = line * (t_len + k) * v + first;
        for t in 0..t_len {
            let at = line * t_len + t;
            widen(&x.q[at * k..][..k], query);
            widen(&x.k[at * k..][..k], key);
            widen(&x.v[at * v + first..][..cols], value);
            let rates = (x.g[at].load().exp(), x.beta[at].load());
            advance(state, cols, key, rates, value, kv);
            output.fill(<T::Acc as Real>::ZERO);
            for (row, &qi) in state.chunks_exact(cols).zip(query.iter()) {
                axpy(output, qi, row);
            }
            // SAFETY: the task of `(line, first)` alone writes columns `first..first + cols`
            // of its line's rows (each task runs once), all inside `out`, which stays
            // borrowed until the workers return.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.ptr().add(base + t * v), cols) };
            for (d, o) in dst.iter_mut().zip(output.iter()) {
                *d = T::store(*o);
            }
        }
        for (i, row) in state.chunks_exact(cols).enumerate() {
            // SAFETY: as above, for the final state's rows.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(out.ptr().add(base + (t_len + i) * v), cols)
            };
            for (d, s) in dst.iter_mut().zip(row) {
                *d = T::store(*s);
            }
        }
    }
}

/// Every operand's cotangent from the cotangent `cot` of the rule's result, packed as
/// `[lines, T + K, 2K + V + 2]` (see [`Op::DeltaRuleGrad`](crate::ir::Op::DeltaRuleGrad)).
/// A line at a time per worker: its states are stored every `√T` steps on a forward pass
/// and recomputed a chunk at a time going back. `slots` holds [`backward_slot`]
/// accumulators per worker.
pub(crate) fn delta_rule_grad<T: FloatStore>(
    d: RuleDims,
    x: RuleOperands<'_, T>,
    cot: &[T],
    out: &mut [T],
    slots: &mut [T::Acc],
) {
    let (t_len, k, v) = (d.t, d.k, d.v);
    let width = 2 * k + v + 2;
    let per_line = (t_len + k) * width;
    let slot_len = backward_slot(d, std::mem::size_of::<T::Acc>());
    if d.lines == 0 || per_line == 0 {
        return;
    }
    if v == 0 {
        // No values: nothing reaches the outputs, and every cotangent is 0.
        out.fill(T::store(<T::Acc as Real>::ZERO));
        return;
    }
    let workers = if parallel(d.lines * t_len * k * v) {
        threads()
            .min(d.lines)
            .min(slots.len() / slot_len.max(1))
            .max(1)
    } else {
        1
    };
    let lines = Chunks::new(out, per_line);
    let slots = Chunks::new(&mut slots[..workers * slot_len], slot_len.max(1));
    let run = |worker: usize| {
        // SAFETY: each worker index is run once, so each slot is taken once.
        let slot = unsafe { slots.take(worker) };
        for line in (worker..d.lines).step_by(workers) {
            // SAFETY: each line is taken by the one worker whose turn it is, once.
            let grads = unsafe { lines.take(line) };
            let cot = &cot[line * (t_len + k) * v..][..(t_len + k) * v];
            vectorized(BackwardLine {
                d,
                x,
                line,
                cot,
                grads,
                slot: &mut *slot,
            });
        }
    };
    if workers > 1 {
        for_each(workers, run);
    } else {
        run(0);
    }
}

/// Step `at` (a line's first step is `line · T`) widened: its query, key and whole value
/// row, and its decay and step.
#[inline(always)]
fn load_step<T: FloatStore>(
    d: RuleDims,
    x: RuleOperands<'_, T>,
    at: usize,
    query: &mut [T::Acc],
    key: &mut [T::Acc],
    value: &mut [T::Acc],
) -> (T::Acc, T::Acc) {
    let (k, v) = (d.k, d.v);
    widen(&x.q[at * k..][..k], query);
    widen(&x.k[at * k..][..k], key);
    widen(&x.v[at * v..][..v], value);
    (x.g[at].load().exp(), x.beta[at].load())
}

/// One line of [`delta_rule_grad`].
struct BackwardLine<'a, T: FloatStore> {
    d: RuleDims,
    x: RuleOperands<'a, T>,
    line: usize,
    cot: &'a [T],
    grads: &'a mut [T],
    slot: &'a mut [T::Acc],
}

impl<T: FloatStore> VectorKernel for BackwardLine<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let BackwardLine {
            d,
            x,
            line,
            cot,
            grads,
            slot,
        } = self;
        backward_line(d, x, line, cot, grads, slot);
    }
}

#[inline(always)]
fn backward_line<T: FloatStore>(
    d: RuleDims,
    x: RuleOperands<'_, T>,
    line: usize,
    cot: &[T],
    grads: &mut [T],
    slot: &mut [T::Acc],
) {
    let (t_len, k, v) = (d.t, d.k, d.v);
    let kv_len = k * v;
    let width = 2 * k + v + 2;
    let chunk = chunk_len(t_len, k * v * std::mem::size_of::<T::Acc>());
    let checkpoints = t_len.div_ceil(chunk);
    let zero = <T::Acc as Real>::ZERO;
    let (stored, rest) = slot.split_at_mut(checkpoints.max(1) * kv_len);
    let (inside, rest) = rest.split_at_mut(chunk * kv_len);
    let (d_state, rest) = rest.split_at_mut(kv_len);
    let (kv, rest) = rest.split_at_mut(v);
    let (d_delta, rest) = rest.split_at_mut(v);
    let (d_kv, rest) = rest.split_at_mut(v);
    let (value, rest) = rest.split_at_mut(v);
    let (d_out, rest) = rest.split_at_mut(v);
    let (delta, rest) = rest.split_at_mut(v);
    let (query, rest) = rest.split_at_mut(k);
    let (key, rest) = rest.split_at_mut(k);
    let (d_query, d_key) = rest.split_at_mut(k);
    let d_key = &mut d_key[..k];
    let load_step = |t: usize, query: &mut [T::Acc], key: &mut [T::Acc], value: &mut [T::Acc]| {
        load_step(d, x, line * t_len + t, query, key, value)
    };

    // The states at the start of every chunk.
    let (first, _) = stored.split_at_mut(kv_len);
    match x.s0 {
        Some(s0) => widen(&s0[line * kv_len..][..kv_len], first),
        None => first.fill(zero),
    }
    for c in 1..checkpoints {
        let (done, next) = stored.split_at_mut(c * kv_len);
        let state = &mut next[..kv_len];
        state.copy_from_slice(&done[(c - 1) * kv_len..]);
        for t in (c - 1) * chunk..c * chunk {
            let rates = load_step(t, query, key, value);
            advance(state, v, key, rates, value, kv);
        }
    }

    widen(&cot[t_len * v..][..kv_len], d_state);
    for c in (0..checkpoints).rev() {
        let (start, end) = (c * chunk, ((c + 1) * chunk).min(t_len));
        // `inside[m]`: the state before step `start + m`.
        inside[..kv_len].copy_from_slice(&stored[c * kv_len..][..kv_len]);
        for t in start..end.saturating_sub(1) {
            let m = t - start;
            let (done, next) = inside.split_at_mut((m + 1) * kv_len);
            let rates = load_step(t, query, key, value);
            advance_into(
                &done[m * kv_len..],
                &mut next[..kv_len],
                v,
                key,
                rates,
                value,
                kv,
            );
        }
        for t in (start..end).rev() {
            let before = &inside[(t - start) * kv_len..][..kv_len];
            let (alpha, beta) = load_step(t, query, key, value);
            widen(&cot[t * v..][..v], d_out);
            // The output's cotangent reaches the state; the state's readings of the key,
            // before the step (kv) and of its cotangent (dδ).
            kv.fill(zero);
            d_delta.fill(zero);
            for ((ds, row), (&qi, &ki)) in d_state
                .chunks_exact_mut(v)
                .zip(before.chunks_exact(v))
                .zip(query.iter().zip(key.iter()))
            {
                for (((s, &b), (kv, dd)), &o) in ds
                    .iter_mut()
                    .zip(row)
                    .zip(kv.iter_mut().zip(d_delta.iter_mut()))
                    .zip(d_out.iter())
                {
                    *s += qi * o;
                    *kv += ki * b;
                    *dd += ki * *s;
                }
            }
            let mut d_beta = zero;
            for j in 0..v {
                let error = value[j] - alpha * kv[j];
                d_beta += error * d_delta[j];
                delta[j] = beta * error;
                d_kv[j] = -(beta * d_delta[j]);
            }
            let delta_out = dot(delta, d_out);
            // Per row: the query's and key's cotangents, then the state's carried back
            // through the step (`α (dS + k dkvᵀ)`), and the decay's.
            let mut d_alpha = zero;
            for ((ds, row), ((&ki, dk), dq)) in d_state
                .chunks_exact_mut(v)
                .zip(before.chunks_exact(v))
                .zip(key.iter().zip(d_key.iter_mut()).zip(d_query.iter_mut()))
            {
                let sums = back_row(ds, row, ki, alpha, (d_out, delta, d_kv));
                *dq = alpha * sums[0] + ki * delta_out;
                *dk = sums[1] + alpha * sums[2];
                d_alpha += sums[3];
            }
            let out = &mut grads[t * width..][..width];
            for (o, g) in out[..k].iter_mut().zip(d_query.iter()) {
                *o = T::store(*g);
            }
            for (o, g) in out[k..2 * k].iter_mut().zip(d_key.iter()) {
                *o = T::store(*g);
            }
            for (o, g) in out[2 * k..2 * k + v].iter_mut().zip(d_delta.iter()) {
                *o = T::store(beta * *g);
            }
            out[2 * k + v] = T::store(alpha * d_alpha);
            out[2 * k + v + 1] = T::store(d_beta);
        }
    }
    for (i, row) in d_state.chunks_exact(v.max(1)).enumerate().take(k) {
        let out = &mut grads[(t_len + i) * width..][..width];
        for (o, s) in out[..v].iter_mut().zip(row) {
            *o = T::store(*s);
        }
        for o in &mut out[v..] {
            *o = T::store(zero);
        }
    }
}

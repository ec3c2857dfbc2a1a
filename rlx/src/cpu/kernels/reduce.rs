//! Reductions, arg-reductions, cumulative sums, softmax and normalization, over an input
//! viewed as `[outer, len, inner]` (the reduced axis in the middle).

use super::layout::{SharedMut, parallel};
use super::numeric::{FloatStore, Int, Real, lane_sum};
use super::simd::{VectorKernel, vectorized};
use crate::ir::ReduceOp;

/// `[outer, len, inner]`: the shape every kernel here sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Axis3 {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

/// Runs `f(o, out_block)` for each outer index, where `out_block` is that index's slice of
/// `out` (`per_outer` elements), in parallel when the work is large.
fn per_outer<O: Send>(
    out: &mut [O],
    per_outer: usize,
    work: usize,
    f: impl Fn(usize, &mut [O]) + Sync + Send,
) {
    if per_outer == 0 {
        return;
    }
    if !parallel(work) {
        out.chunks_mut(per_outer)
            .enumerate()
            .for_each(|(o, b)| f(o, b));
    } else {
        crate::cpu::workers::chunks_mut(out, per_outer, f);
    }
}

/// Reduction of floats along the middle axis; accumulates in `T::Acc`.
pub(crate) fn reduce_float<T: FloatStore>(op: ReduceOp, s: Axis3, x: &[T], out: &mut [T]) {
    type A<T> = <T as FloatStore>::Acc;
    let scale = if op == ReduceOp::Mean {
        A::<T>::ONE / A::<T>::from_f64(s.len as f64)
    } else {
        A::<T>::ONE
    };
    // Each fold its own closure type, so the loops below inline it and vectorize.
    match op {
        ReduceOp::Sum | ReduceOp::Mean => fold_middle(s, x, out, A::<T>::ZERO, scale, |a, b| a + b),
        ReduceOp::Prod => fold_middle(s, x, out, A::<T>::ONE, scale, |a, b| a * b),
        ReduceOp::Max => fold_middle(s, x, out, A::<T>::NEG_INFINITY, scale, Real::maximum),
        ReduceOp::Min => fold_middle(s, x, out, A::<T>::INFINITY, scale, Real::minimum),
    }
}

/// Columns of the inner axis one accumulator block holds (on the stack).
const COLUMNS: usize = 64;

/// `out = scale · fold(init, combine)` along the middle axis of `x`. Rows (`inner` = 1)
/// fold in eight interleaved lanes; otherwise blocks of [`COLUMNS`] inner columns
/// accumulate on the stack, and the blocks of one outer index run in parallel too, so a
/// sum over leading axes (a bias gradient) uses every thread.
fn fold_middle<T: FloatStore, C>(
    s: Axis3,
    x: &[T],
    out: &mut [T],
    init: T::Acc,
    scale: T::Acc,
    combine: C,
) where
    C: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync,
{
    if s.inner == 1 {
        per_outer(out, 1, s.outer * s.len, |o, row| {
            let xs = &x[o * s.len..(o + 1) * s.len];
            row[0] = vectorized(move || {
                let mut lanes = [init; 8];
                let mut chunks = xs.chunks_exact(8);
                for c in &mut chunks {
                    for (l, v) in lanes.iter_mut().zip(c) {
                        *l = combine(*l, v.load());
                    }
                }
                let mut acc = lanes.into_iter().fold(init, combine);
                for v in chunks.remainder() {
                    acc = combine(acc, v.load());
                }
                T::store(acc * scale)
            });
        });
        return;
    }
    let block = |o: usize, start: usize, dst: &mut [T]| {
        let base = o * s.len * s.inner + start;
        let width = dst.len();
        vectorized(move || {
            let mut acc = [init; COLUMNS];
            for k in 0..s.len {
                let from = base + k * s.inner;
                for (a, v) in acc[..width].iter_mut().zip(&x[from..from + width]) {
                    *a = combine(*a, v.load());
                }
            }
            for (r, a) in dst.iter_mut().zip(acc) {
                *r = T::store(a * scale);
            }
        })
    };
    let blocks = |o: usize, row: &mut [T]| {
        if parallel(s.len * s.inner) && s.inner > COLUMNS {
            crate::cpu::workers::chunks_mut(row, COLUMNS, |b, dst| block(o, b * COLUMNS, dst));
        } else {
            for (b, dst) in row.chunks_mut(COLUMNS).enumerate() {
                block(o, b * COLUMNS, dst);
            }
        }
    };
    per_outer(out, s.inner, s.outer * s.len * s.inner, blocks);
}

/// Reduction of integers along the middle axis (wrapping sum and product).
pub(crate) fn reduce_int<T: Int>(op: ReduceOp, s: Axis3, x: &[T], out: &mut [T]) {
    per_outer(out, s.inner, s.outer * s.len * s.inner, |o, row| {
        let base = o * s.len * s.inner;
        for (i, r) in row.iter_mut().enumerate() {
            let vals = (0..s.len).map(|k| x[base + k * s.inner + i]);
            *r = match op {
                ReduceOp::Sum | ReduceOp::Mean => vals.fold(T::ZERO, T::add),
                // Over an empty axis: the product's identity, 1, and 0 for max and min
                // (an integer type has no identity for them).
                ReduceOp::Prod => vals.fold(T::ONE, T::mul),
                ReduceOp::Max => vals.max().unwrap_or(T::ZERO),
                ReduceOp::Min => vals.min().unwrap_or(T::ZERO),
            };
        }
    });
}

/// Index of the first element along the middle axis that no later one is `better` than.
pub(crate) fn arg_reduce<T: Copy + Sync>(
    s: Axis3,
    x: &[T],
    out: &mut [i64],
    better: impl Fn(T, T) -> bool + Sync,
) {
    per_outer(out, s.inner, s.outer * s.len * s.inner, |o, row| {
        let base = o * s.len * s.inner;
        for (i, r) in row.iter_mut().enumerate() {
            let mut best = 0usize;
            for k in 1..s.len {
                let cand = x[base + k * s.inner + i];
                let cur = x[base + best * s.inner + i];
                if better(cand, cur) {
                    best = k;
                }
            }
            *r = best as i64;
        }
    });
}

/// [`arg_reduce`] of floats along a last axis (`inner` 1), a row at a time at the vector
/// width: an argmax over a vocabulary of logits is what greedy decoding runs per token.
pub(crate) fn arg_reduce_last<S: FloatStore>(s: Axis3, x: &[S], out: &mut [i64], largest: bool) {
    debug_assert_eq!(s.inner, 1);
    // Every row gets an index, 0 for an empty axis.
    for (o, r) in out.iter_mut().enumerate().take(s.outer) {
        let row = &x[o * s.len..(o + 1) * s.len];
        let index = if largest {
            first_extreme::<S, true>(row)
        } else {
            first_extreme::<S, false>(row)
        };
        *r = index as i64;
    }
}

/// The index of the first largest (`LARGEST`) or smallest value of `values`, or of the
/// first NaN if there is one (as [`arg_reduce`]'s float comparisons take it); 0 for none.
pub(crate) fn first_extreme<S: FloatStore, const LARGEST: bool>(values: &[S]) -> usize {
    const LANES: usize = 16;
    let beats = |v: S::Acc, m: S::Acc| if LARGEST { v > m } else { v < m };
    let start = if LARGEST {
        S::Acc::NEG_INFINITY
    } else {
        S::Acc::INFINITY
    };
    let (extreme, nan) = vectorized(|| {
        let (mut lanes, mut nan) = ([start; LANES], [false; LANES]);
        let mut chunks = values.chunks_exact(LANES);
        for chunk in &mut chunks {
            for ((m, n), v) in lanes.iter_mut().zip(&mut nan).zip(chunk) {
                let v = v.load();
                *m = if beats(v, *m) { v } else { *m };
                *n |= v.is_nan();
            }
        }
        for v in chunks.remainder() {
            let v = v.load();
            lanes[0] = if beats(v, lanes[0]) { v } else { lanes[0] };
            nan[0] |= v.is_nan();
        }
        let extreme = lanes
            .into_iter()
            .fold(start, |m, v| if beats(v, m) { v } else { m });
        (extreme, nan.contains(&true))
    });
    let found = if nan {
        values.iter().position(|v| v.load().is_nan())
    } else {
        values.iter().position(|v| v.load() == extreme)
    };
    found.unwrap_or(0)
}

/// An element type a running sum accumulates, in its compute type.
pub(crate) trait ScanElem: Copy + Send + Sync {
    type Acc: Copy;
    const ZERO: Self::Acc;
    fn load(self) -> Self::Acc;
    fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc;
    fn store(a: Self::Acc) -> Self;
}

macro_rules! scan_float {
    ($($t:ty),*) => {$(
        impl ScanElem for $t {
            type Acc = <$t as FloatStore>::Acc;
            const ZERO: Self::Acc = <Self::Acc as Real>::ZERO;
            fn load(self) -> Self::Acc { FloatStore::load(self) }
            fn add(a: Self::Acc, b: Self::Acc) -> Self::Acc { a + b }
            fn store(a: Self::Acc) -> Self { <$t as FloatStore>::store(a) }
        }
    )*};
}
scan_float!(f32, f64, half::f16, half::bf16);

macro_rules! scan_int {
    ($($t:ty),*) => {$(
        impl ScanElem for $t {
            type Acc = $t;
            const ZERO: $t = 0;
            fn load(self) -> $t { self }
            fn add(a: $t, b: $t) -> $t { Int::add(a, b) }
            fn store(a: $t) -> $t { a }
        }
    )*};
}
scan_int!(i32, i64, i8, u8);

/// Running sum along the middle axis; `exclusive` skips the current element, `reverse`
/// sums from the end.
pub(crate) fn cumsum<T: ScanElem>(
    s: Axis3,
    exclusive: bool,
    reverse: bool,
    x: &[T],
    out: &mut [T],
) {
    per_outer(
        out,
        s.len * s.inner,
        s.outer * s.len * s.inner,
        |o, block| {
            let base = o * s.len * s.inner;
            for i in 0..s.inner {
                let mut acc = T::ZERO;
                for step in 0..s.len {
                    let k = if reverse { s.len - 1 - step } else { step };
                    let at = k * s.inner + i;
                    let v = x[base + at].load();
                    if exclusive {
                        block[at] = T::store(acc);
                        acc = T::add(acc, v);
                    } else {
                        acc = T::add(acc, v);
                        block[at] = T::store(acc);
                    }
                }
            }
        },
    );
}

/// `h_k = a_k · h_{k-1} + b_k` along the middle axis (from its end when `reverse`), in
/// the accumulator type, from `start` (`[outer, inner]`: one state per line) or 0. Lines
/// are independent: contiguous lines (`inner` = 1) are split between the threads by outer
/// index; otherwise blocks of [`COLUMNS`] inner columns each carry their states on the
/// stack through the axis, and all blocks of all outer indices are tasks, so a batch of
/// one still uses every thread.
pub(crate) fn linear_scan<T: FloatStore>(
    s: Axis3,
    reverse: bool,
    a: &[T],
    b: &[T],
    start: Option<&[T]>,
    out: &mut [T],
) {
    let order = move |step: usize| if reverse { s.len - 1 - step } else { step };
    let zero = <T::Acc as Real>::ZERO;
    if s.inner == 1 {
        per_outer(out, s.len, s.outer * s.len, |o, line| {
            let base = o * s.len;
            vectorized(|| {
                let mut h = start.map_or(zero, |h0| h0[o].load());
                for step in 0..s.len {
                    let k = order(step);
                    h = a[base + k].load() * h + b[base + k].load();
                    line[k] = T::store(h);
                }
            })
        });
        return;
    }
    let blocks = s.inner.div_ceil(COLUMNS);
    let shared = SharedMut::new(out);
    let task = |task: usize| {
        let (o, first) = (task / blocks, task % blocks * COLUMNS);
        let width = COLUMNS.min(s.inner - first);
        let base = o * s.len * s.inner + first;
        vectorized(|| {
            let mut h = [zero; COLUMNS];
            if let Some(h0) = start {
                let from = o * s.inner + first;
                for (h, v) in h.iter_mut().zip(&h0[from..from + width]) {
                    *h = v.load();
                }
            }
            for step in 0..s.len {
                let at = base + order(step) * s.inner;
                // SAFETY: task `(o, block)` alone writes columns `first..first + width` of
                // outer index `o` (every task index is run once), all inside `out`, which
                // stays borrowed until `for_each` returns.
                let dst = unsafe { std::slice::from_raw_parts_mut(shared.ptr().add(at), width) };
                let (a, b) = (&a[at..at + width], &b[at..at + width]);
                for (((h, d), a), b) in h.iter_mut().zip(dst).zip(a).zip(b) {
                    *h = a.load() * *h + b.load();
                    *d = T::store(*h);
                }
            }
        })
    };
    if parallel(s.outer * s.len * s.inner) {
        crate::cpu::workers::for_each(s.outer * blocks, task);
    } else {
        (0..s.outer * blocks).for_each(task);
    }
}

/// Softmax or log-softmax along the middle axis.
pub(crate) fn softmax<T: FloatStore>(log: bool, s: Axis3, x: &[T], out: &mut [T]) {
    if s.inner == 1 {
        // Contiguous rows (the usual last-axis softmax): each row vectorized.
        per_outer(out, s.len, s.outer * s.len, |o, row| {
            let x = &x[o * s.len..(o + 1) * s.len];
            vectorized(SoftmaxRow { log, x, out: row })
        });
        return;
    }
    per_outer(
        out,
        s.len * s.inner,
        s.outer * s.len * s.inner,
        |o, block| {
            let xs = &x[o * s.len * s.inner..(o + 1) * s.len * s.inner];
            for i in 0..s.inner {
                let at = |k: usize| k * s.inner + i;
                let mut max = <T::Acc as Real>::NEG_INFINITY;
                for k in 0..s.len {
                    max = max.maximum(xs[at(k)].load());
                }
                let mut sum = <T::Acc as Real>::ZERO;
                for k in 0..s.len {
                    sum += (xs[at(k)].load() - max).exp();
                }
                if log {
                    let log_sum = sum.ln();
                    for k in 0..s.len {
                        block[at(k)] = T::store(xs[at(k)].load() - max - log_sum);
                    }
                } else {
                    let inv = <T::Acc as Real>::ONE / sum;
                    for k in 0..s.len {
                        block[at(k)] = T::store((xs[at(k)].load() - max).exp() * inv);
                    }
                }
            }
        },
    );
}

/// One contiguous row of [`softmax`], compiled per instruction set: a maximum in eight
/// lanes, then `e^(x - max)` by the polynomial the attention kernel uses (the argument is
/// never positive) summed in lanes, then each element again, scaled (or, for log-softmax,
/// shifted by the log of the sum).
struct SoftmaxRow<'a, T: FloatStore> {
    log: bool,
    x: &'a [T],
    out: &'a mut [T],
}

impl<T: FloatStore> VectorKernel for SoftmaxRow<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let SoftmaxRow { log, x, out } = self;
        let lowest = <T::Acc as Real>::NEG_INFINITY;
        let mut lanes = [lowest; 8];
        let mut chunks = x.chunks_exact(8);
        for c in &mut chunks {
            for (l, v) in lanes.iter_mut().zip(c) {
                *l = l.maximum(v.load());
            }
        }
        let mut max = lanes.into_iter().fold(lowest, Real::maximum);
        for v in chunks.remainder() {
            max = max.maximum(v.load());
        }
        let sum = lane_sum(x, |v| (v - max).exp_nonpositive_fused());
        if log {
            let shift = max + sum.ln();
            for (o, v) in out.iter_mut().zip(x) {
                *o = T::store(v.load() - shift);
            }
        } else {
            let inv = <T::Acc as Real>::ONE / sum;
            for (o, v) in out.iter_mut().zip(x) {
                *o = T::store((v.load() - max).exp_nonpositive_fused() * inv);
            }
        }
    }
}

/// Which normalization a norm kernel applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NormKind {
    /// Subtract the mean, divide by the standard deviation.
    Layer,
    /// Divide by the root mean square.
    Rms,
}

/// Layer or RMS norm over rows of `features` elements.
pub(crate) fn norm<T: FloatStore>(
    kind: NormKind,
    eps: f64,
    features: usize,
    x: &[T],
    weight: Option<&[T]>,
    bias: Option<&[T]>,
    out: &mut [T],
) {
    let eps = <T::Acc as Real>::from_f64(eps);
    per_outer(out, features, x.len(), |r, row| {
        vectorized(NormRow {
            kind,
            eps,
            x: &x[r * features..(r + 1) * features],
            weight,
            bias,
            out: row,
        })
    });
}

/// One row of [`norm`], compiled per instruction set.
struct NormRow<'a, T: FloatStore> {
    kind: NormKind,
    eps: T::Acc,
    x: &'a [T],
    weight: Option<&'a [T]>,
    bias: Option<&'a [T]>,
    out: &'a mut [T],
}

impl<T: FloatStore> VectorKernel for NormRow<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let NormRow {
            kind,
            eps,
            x,
            weight,
            bias,
            out,
        } = self;
        let n = <T::Acc as Real>::from_f64(x.len() as f64);
        let mean = if kind == NormKind::Rms {
            <T::Acc as Real>::ZERO
        } else {
            lane_sum(x, |v| v) / n
        };
        let sq = lane_sum(x, |v| (v - mean) * (v - mean));
        let inv = <T::Acc as Real>::ONE / (sq / n + eps).sqrt();
        let normed = |v: T| (v.load() - mean) * inv;
        // One loop per combination of affine terms, each a straight line.
        match (weight, bias) {
            (Some(w), Some(b)) => {
                for ((o, v), (w, b)) in out.iter_mut().zip(x).zip(w.iter().zip(b)) {
                    *o = T::store(normed(*v) * w.load() + b.load());
                }
            }
            (Some(w), None) => {
                for ((o, v), w) in out.iter_mut().zip(x).zip(w) {
                    *o = T::store(normed(*v) * w.load());
                }
            }
            (None, Some(b)) => {
                for ((o, v), b) in out.iter_mut().zip(x).zip(b) {
                    *o = T::store(normed(*v) + b.load());
                }
            }
            (None, None) => {
                for (o, v) in out.iter_mut().zip(x) {
                    *o = T::store(normed(*v));
                }
            }
        }
    }
}

//! Products with a matrix chosen per pair (`gather_matmul`) and their transpose
//! (`scatter_matmul`): the pairs are sorted by matrix with a counting sort, the rows of each
//! matrix gathered into one block, and each block multiplied with one GEMM, so a matrix is
//! read once per run however many pairs chose it.

use super::gemm::{GemmAcc, GemmDims, GemmPlan, gemm, in_accumulator, packed_b_len};
use super::layout::{SharedMut, parallel};
use super::numeric::FloatStore;
use crate::cpu::workers::{Chunks, for_each, threads};

/// The sizes of a run: `pairs` pairs, `per_token` of them sharing a row of `x` (1 when rows
/// are per pair), matrices of `k x n` (as the product reads them), `groups` of them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PairDims {
    pub pairs: usize,
    pub per_token: usize,
    pub groups: usize,
    pub k: usize,
    pub n: usize,
}

/// Pairs sorted by matrix: `order` lists the pairs of matrix 0, then of 1, ..., and the
/// pairs of matrix `e` are `order[starts[e]..starts[e + 1]]`.
pub(crate) struct Sorted<'a> {
    pub order: &'a [i64],
    pub starts: &'a [i64],
}

impl Sorted<'_> {
    fn range(&self, e: usize) -> std::ops::Range<usize> {
        self.starts[e] as usize..self.starts[e + 1] as usize
    }
}

/// Counting-sorts the pairs by `index(p)` into `order` (`pairs` long) and `starts`
/// (`groups + 1` long), stable; the first index outside `0..groups` is the error.
pub(crate) fn sort_pairs<'a>(
    pairs: usize,
    groups: usize,
    index: impl Fn(usize) -> i64,
    order: &'a mut [i64],
    starts: &'a mut [i64],
) -> Result<Sorted<'a>, i64> {
    let starts = &mut starts[..groups + 1];
    starts.fill(0);
    for p in 0..pairs {
        let e = index(p);
        if e < 0 || e >= groups as i64 {
            return Err(e);
        }
        starts[e as usize + 1] += 1;
    }
    for e in 0..groups {
        starts[e + 1] += starts[e];
    }
    // `starts[e]` walks through matrix e's slots while placing, then is restored.
    for p in 0..pairs {
        let e = index(p) as usize;
        order[starts[e] as usize] = p as i64;
        starts[e] += 1;
    }
    for e in (0..groups).rev() {
        starts[e + 1] = starts[e];
    }
    starts[0] = 0;
    Ok(Sorted {
        order: &order[..pairs],
        starts,
    })
}

/// Rows of `src` (each `len` long) in the order of `order` (row `order[q] / per_token` for
/// slot `q`), widened into `dst`.
fn gather_rows<S: FloatStore>(
    src: &[S],
    len: usize,
    order: &[i64],
    per_token: usize,
    dst: &mut [S::Acc],
) {
    if len == 0 {
        return;
    }
    for (q, row) in dst.chunks_exact_mut(len).take(order.len()).enumerate() {
        let from = order[q] as usize / per_token * len;
        for (d, v) in row.iter_mut().zip(&src[from..from + len]) {
            *d = v.load();
        }
    }
}

/// Workers for `flops` of products split `units` ways: one for small runs.
fn workers_for(flops: usize, units: usize) -> usize {
    if !parallel(flops / 64) {
        1
    } else {
        threads().min(units).max(1)
    }
}

/// `out[p] = x[row(p)] · w[index(p)]`: `w` holds `groups` matrices of `k x n` values, read
/// `w[e][i][j]` at `e·k·n + i·n + j`, or at `e·k·n + j·k + i` when `transpose_b`.
/// `packed`, when `w` is a weight packed at bind time, holds each matrix's packing in turn.
/// `rows` (`pairs x k`) and `products` (`pairs x n`) are accumulator scratch; `slots` holds
/// `slot_len` packing elements per worker ([`super::gemm::serial_scratch_bound`] for
/// `pairs` rows).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather_matmul<S: FloatStore>(
    d: PairDims,
    transpose_b: bool,
    sorted: &Sorted<'_>,
    x: &[S],
    w: &[S],
    packed: Option<&[S::Acc]>,
    rows: &mut [S::Acc],
    products: &mut [S::Acc],
    slots: &mut [S::Acc],
    slot_len: usize,
    out: &mut [S],
) where
    S::Acc: GemmAcc,
{
    let PairDims { pairs, k, n, .. } = d;
    if pairs == 0 || n == 0 {
        return;
    }
    let kernels = S::Acc::micro_kernels();
    let packed_len = packed_b_len(k, n, kernels.shape);
    let (rows, products) = (&mut rows[..pairs * k], &mut products[..pairs * n]);
    gather_rows(x, k, sorted.order, d.per_token, rows);
    let rows: &[S::Acc] = rows;
    let workers = workers_for(pairs * k * n, pairs).min(slots.len() / slot_len.max(1));
    let share = pairs.div_ceil(workers.max(1));
    let (b_rs, b_cs) = if transpose_b { (1, k) } else { (n, 1) };
    let outs = SharedMut::new(out);
    let results = Chunks::new(products, share * n);
    let slots = Chunks::new(slots, slot_len.max(1));
    for_each(workers.max(1), |worker| {
        let (lo, hi) = (worker * share, pairs.min((worker + 1) * share));
        if lo >= hi {
            return;
        }
        // SAFETY: `for_each` calls each worker index once, and each takes its own chunks.
        let (result, slot) = unsafe { (results.take(worker), slots.take(worker)) };
        for e in 0..d.groups {
            let range = sorted.range(e);
            let (start, end) = (range.start.max(lo), range.end.min(hi));
            if start >= end {
                continue;
            }
            let dims = GemmDims {
                m: end - start,
                n,
                k,
                a_rs: k,
                a_cs: 1,
                b_rs,
                b_cs,
            };
            let plan = GemmPlan::new(dims, 1, kernels.shape);
            gemm(
                &plan,
                kernels,
                &rows[start * k..end * k],
                &w[e * k * n..(e + 1) * k * n],
                &mut result[(start - lo) * n..(end - lo) * n],
                slot,
                packed.map(|p| &p[e * packed_len..(e + 1) * packed_len]),
                None,
            );
        }
        for q in lo..hi {
            let target = sorted.order[q] as usize * n;
            // SAFETY: every pair appears once in `order`, so each output row is written
            // by the one worker whose range holds its slot; `out` stays borrowed until
            // `for_each` has joined every worker.
            let dst = unsafe { std::slice::from_raw_parts_mut(outs.ptr().add(target), n) };
            for (o, v) in dst.iter_mut().zip(&result[(q - lo) * n..][..n]) {
                *o = S::store(*v);
            }
        }
    });
}

/// `out[e] = Σ x[row(p)]ᵀ · g[p]` over the pairs of matrix `e` (`k x n`; `n x k`, the
/// transpose, when `transpose`). `rows` (`pairs x k`) and `grads` (`pairs x n`) are
/// accumulator scratch; `slots` holds `slot_len` packing elements per worker and `wide`
/// (for f16/bf16, else `None`) a `k x n` accumulator block per worker.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter_matmul<S: FloatStore>(
    d: PairDims,
    transpose: bool,
    sorted: &Sorted<'_>,
    x: &[S],
    g: &[S],
    rows: &mut [S::Acc],
    grads: &mut [S::Acc],
    slots: &mut [S::Acc],
    slot_len: usize,
    wide: Option<&mut [S::Acc]>,
    out: &mut [S],
) where
    S::Acc: GemmAcc,
{
    let PairDims {
        pairs,
        k,
        n,
        groups,
        ..
    } = d;
    let block = k * n;
    if block == 0 || groups == 0 {
        return;
    }
    let kernels = S::Acc::micro_kernels();
    let (rows, grads) = (&mut rows[..pairs * k], &mut grads[..pairs * n]);
    gather_rows(x, k, sorted.order, d.per_token, rows);
    gather_rows(g, n, sorted.order, 1, grads);
    let (rows, grads): (&[S::Acc], &[S::Acc]) = (rows, grads);
    // Whole matrices per worker (each writes its own), balanced by their pairs.
    let workers = workers_for(pairs * block, groups).min(slots.len() / slot_len.max(1));
    let workers = workers.max(1);
    let per_worker = pairs.div_ceil(workers).max(1);
    let owner = |e: usize| (sorted.starts[e] as usize / per_worker).min(workers - 1);
    let outs = Chunks::new(out, block);
    let slots = Chunks::new(slots, slot_len.max(1));
    let wides = wide.map(|wide| Chunks::new(wide, block));
    for_each(workers, |worker| {
        // SAFETY: `for_each` calls each worker index once, and each takes its own chunks.
        let slot = unsafe { slots.take(worker) };
        // SAFETY: as above.
        let mut wide = wides.as_ref().map(|w| unsafe { w.take(worker) });
        for e in (0..groups).filter(|&e| owner(e) == worker) {
            let range = sorted.range(e);
            let count = range.len();
            // Product rows are `x`'s columns (`g`'s when transposed), over the pairs.
            let (a, b, m, cols) = if transpose {
                (&grads[range.start * n..], &rows[range.start * k..], n, k)
            } else {
                (&rows[range.start * k..], &grads[range.start * n..], k, n)
            };
            let dims = GemmDims {
                m,
                n: cols,
                k: count,
                a_rs: 1,
                a_cs: m,
                b_rs: cols,
                b_cs: 1,
            };
            let plan = GemmPlan::new(dims, 1, kernels.shape);
            // SAFETY: each matrix index is owned by one worker, which takes its block once.
            let dst = unsafe { outs.take(e) };
            in_accumulator(dst, wide.as_deref_mut(), |c| {
                gemm::<S::Acc, S::Acc>(&plan, kernels, a, b, c, slot, None, None);
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_sort_stably_by_matrix() {
        let indices = [2i64, 0, 2, 1, 0];
        let (mut order, mut starts) = (vec![0; 5], vec![0; 4]);
        let sorted = sort_pairs(5, 3, |p| indices[p], &mut order, &mut starts).unwrap();
        assert_eq!(sorted.order, [1, 4, 3, 0, 2]);
        assert_eq!(sorted.starts, [0, 2, 3, 5]);
        let mut starts = vec![0; 3];
        assert_eq!(
            sort_pairs(5, 2, |p| indices[p], &mut order, &mut starts).err(),
            Some(2)
        );
    }
}

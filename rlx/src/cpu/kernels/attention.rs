//! Fused attention: `softmax(q kᵀ · scale + mask) v` blocked over queries and keys with
//! an online softmax, never holding a score matrix larger than one tile.

use super::attention_direct::{DirectScores, DirectValues};
pub(crate) use super::attention_rows::Rows;
use super::attention_rows::{block_rows, sum_lanes};
use super::gemm::{GemmAcc, GemmDims, GemmPlan, KernelShape, Kernels, gemm};
use super::layout::{SharedMut, parallel};
use super::numeric::{FloatStore, Real};
use super::positions::RowPositions;
use super::simd::{Isa, VectorKernel, isa, vectorized};

/// Which keys each query row may see (resolved from the op's mask kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyRange {
    All,
    /// Keys at or before the query's aligned position, and within `window` of it if set.
    Causal {
        window: Option<usize>,
    },
}

/// One attention problem, fixed at plan time.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AttentionDims {
    /// Query heads (all leading dims of q flattened).
    pub heads: usize,
    /// Query heads per key/value head (grouped-query attention); 1 otherwise.
    pub group: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub head_dim: usize,
    pub value_dim: usize,
    pub scale: f64,
    pub keys: KeyRange,
    /// Where an explicit mask's values are.
    pub mask: Option<MaskLayout>,
    /// Leading-dims size of q per key/value head index calculation: `q_heads` of the axis
    /// before the sequence (1 when rank is 2).
    pub q_heads_axis: usize,
    /// Where the heads of q, k, v and the output are stored.
    pub layouts: [HeadLayout; 4],
}

/// Where the rows of each head of one attention operand are: head `h` (leading dims
/// flattened) starts at `(h / heads) * outer_stride + (h % heads) * head_stride`, its
/// positions `row_stride` apart, features contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeadLayout {
    heads: usize,
    outer_stride: usize,
    head_stride: usize,
    row_stride: usize,
}

impl HeadLayout {
    /// `[.., H, S, D]` stored as it reads.
    pub(crate) fn contiguous(shape: &[usize]) -> HeadLayout {
        let r = shape.len();
        let (s, d) = (shape[r - 2], shape[r - 1]);
        HeadLayout {
            heads: 1,
            outer_stride: s * d,
            head_stride: 0,
            row_stride: d,
        }
    }

    /// `[.., H, S, D]` stored as `[.., S, H, D]`: the heads were split off the features of
    /// each position and never transposed (rank 3 or more).
    pub(crate) fn sequence_major(shape: &[usize]) -> HeadLayout {
        let r = shape.len();
        let (h, s, d) = (shape[r - 3], shape[r - 2], shape[r - 1]);
        HeadLayout {
            heads: h,
            outer_stride: s * h * d,
            head_stride: d,
            row_stride: h * d,
        }
    }

    /// The element offset of row `i` of head `h`.
    pub(super) fn row(&self, h: usize, i: usize) -> usize {
        (h / self.heads) * self.outer_stride
            + (h % self.heads) * self.head_stride
            + i * self.row_stride
    }
}

/// Element offsets of a broadcast mask: per flattened head, then strides along the query
/// and key axes (0 where the mask broadcasts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MaskLayout {
    /// Shared, so that a run over fewer keys copies the dims without allocating.
    pub head_offsets: std::sync::Arc<[usize]>,
    pub query_stride: usize,
    pub key_stride: usize,
}

/// The mask operand's kind.
#[derive(Clone, Copy)]
pub(crate) enum MaskValues<'a, T> {
    None,
    /// True (non-zero) where a query may attend.
    Bool(&'a [u8]),
    /// Added to the scaled scores.
    Additive(&'a [T]),
}

/// How one attention problem is cut into tasks: blocks of query rows of one head, each
/// walking the keys in blocks (`S = Q·Kᵀ` by GEMM, an online softmax, `O += P·V` by GEMM),
/// so no score matrix larger than one tile is ever held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AttentionTiling {
    pub query_block: usize,
    pub key_block: usize,
    /// Workers, each with one scratch slot.
    pub workers: usize,
    /// Accumulator elements of one worker's scratch slot.
    pub slot_len: usize,
    /// The GEMM kernel shape the products are planned for.
    pub shape: KernelShape,
}

/// Query rows per task, at most: each task packs its keys once per key block, so longer
/// blocks pack less; the probabilities of one block stay in L2.
const QUERY_BLOCK: usize = 128;
/// Keys per step of the online softmax.
const KEY_BLOCK: usize = 256;

impl AttentionTiling {
    pub(crate) fn new(
        heads: usize,
        seq_q: usize,
        seq_k: usize,
        head_dim: usize,
        value_dim: usize,
        threads: usize,
        shape: KernelShape,
    ) -> AttentionTiling {
        // Equal blocks of at most QUERY_BLOCK rows, split further (down to one kernel
        // height) until every thread has at least two tasks.
        let mut blocks = seq_q.div_ceil(QUERY_BLOCK).max(1);
        while heads * blocks < 2 * threads && seq_q.div_ceil(blocks + 1) >= shape.mr {
            blocks += 1;
        }
        let query_block = seq_q.div_ceil(blocks).max(1);
        let key_block = KEY_BLOCK.min(seq_k.max(1));
        let tasks = heads * seq_q.div_ceil(query_block);
        let work = heads * seq_q * seq_k * (head_dim + value_dim);
        // Split even small attentions (a short sentence's 12 heads): run on one thread,
        // they leave the other workers idle long enough to fall asleep, and waking them
        // for the next product costs more than the split.
        let workers = if work < 1 << 16 {
            1
        } else {
            threads.clamp(1, tasks.max(1))
        };
        // Packing scratch does not depend on the strides.
        let dense = [head_dim, head_dim, value_dim];
        let (scores, pv) = Self::products(query_block, key_block, (head_dim, value_dim), dense);
        let slot_len = query_block * key_block // probabilities
            + query_block * value_dim // running output
            + 2 * query_block // running max and sum
            + GemmPlan::new(scores, 1, shape)
                .scratch_len()
                .max(GemmPlan::new(pv, 1, shape).scratch_len());
        AttentionTiling {
            query_block,
            key_block,
            workers,
            slot_len,
            shape,
        }
    }

    /// The two products of one step, `S[rows, keys] = Q·Kᵀ` and `P·V[rows, value_dim]`,
    /// for q, k and v rows the given strides apart.
    fn products(
        rows: usize,
        keys: usize,
        (head_dim, value_dim): (usize, usize),
        [q_rs, k_rs, v_rs]: [usize; 3],
    ) -> (GemmDims, GemmDims) {
        let scores = GemmDims {
            m: rows,
            n: keys,
            k: head_dim,
            a_rs: q_rs,
            a_cs: 1,
            b_rs: 1,
            b_cs: k_rs,
        };
        let pv = GemmDims {
            m: rows,
            n: value_dim,
            k: keys,
            a_rs: keys,
            a_cs: 1,
            b_rs: v_rs,
            b_cs: 1,
        };
        (scores, pv)
    }
}

/// `out = softmax(q kᵀ · scale + mask) v`, blocked as [`AttentionTiling`] says. `scratch`
/// holds `tiling.workers` slots of `tiling.slot_len` elements; `rows_scratch` holds
/// `tiling.workers` blocks of [`int8_rows_len`] values where `k` or `v` is int8 (else it
/// may be empty). `keys` is how many leading keys each row of q's axis 0 attends (the heads
/// split evenly between the rows), each at most `d.seq_k`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention<T: FloatStore>(
    d: &AttentionDims,
    keys: RowPositions<'_>,
    tiling: &AttentionTiling,
    q: &[T],
    k: Rows<'_, T>,
    v: Rows<'_, T>,
    mask: MaskValues<'_, T>,
    out: &mut [T],
    scratch: &mut [T::Acc],
    rows_scratch: &mut [T],
) where
    T::Acc: GemmAcc,
{
    let blocks_per_head = d.seq_q.div_ceil(tiling.query_block);
    let tasks = d.heads * blocks_per_head;
    if tasks == 0 || d.value_dim == 0 {
        return;
    }
    let out_layout = d.layouts[3];
    assert!(
        out.len() >= d.heads * d.seq_q * d.value_dim
            && out_layout.row(d.heads - 1, d.seq_q - 1) + d.value_dim <= out.len(),
        "attention output too small"
    );
    // Tasks write disjoint rows; the parallel section joins before `attention` returns.
    let shared = SharedMut::new(out);
    let int8 = matches!(k, Rows::Int8 { .. }) || matches!(v, Rows::Int8 { .. });
    let rows_len = if int8 {
        int8_rows_len(tiling, d.head_dim, d.value_dim)
    } else {
        0
    };
    assert!(
        rows_scratch.len() >= tiling.workers * rows_len,
        "attention scratch for int8 rows too small"
    );
    let shared_rows = SharedMut::new(rows_scratch);
    let kernels = T::Acc::micro_kernels();
    let per_worker = tasks.div_ceil(tiling.workers);
    let heads_per_row = d.heads / keys.rows().max(1);
    let run = |tasks: std::ops::Range<usize>, w: usize, slot: &mut [T::Acc]| {
        // SAFETY: worker `w` alone uses block `w` of the int8 rows' scratch, which lies
        // inside it (checked above: `workers` blocks of `rows_len`).
        let rows_block = unsafe {
            std::slice::from_raw_parts_mut(shared_rows.ptr().add(w * rows_len), rows_len)
        };
        for task in tasks {
            let (h, block) = (task / blocks_per_head, task % blocks_per_head);
            let q0 = block * tiling.query_block;
            let rows = tiling.query_block.min(d.seq_q - q0);
            let keys = keys.get(h / heads_per_row) as usize;
            let job = QueryBlock { h, q0, rows, keys };
            let operands = (q, k, v, mask);
            let result = attention_block(d, tiling, kernels, job, operands, slot, &mut *rows_block);
            for (r, values) in result.chunks_exact(d.value_dim).enumerate() {
                let at = out_layout.row(h, q0 + r);
                // SAFETY: row q0+r of head h is this task's alone (tasks partition heads ×
                // query blocks, and a layout maps distinct rows to disjoint ranges), and it
                // lies inside `out` (checked above for the last row of the last head).
                let row =
                    unsafe { std::slice::from_raw_parts_mut(shared.ptr().add(at), d.value_dim) };
                vectorized(|| {
                    for (o, x) in row.iter_mut().zip(values) {
                        *o = T::store(*x);
                    }
                });
            }
        }
    };
    let slots = &mut scratch[..tiling.workers * tiling.slot_len];
    if tiling.workers > 1 && parallel(d.heads * d.seq_q * d.seq_k * d.head_dim) {
        crate::cpu::workers::chunks_mut(slots, tiling.slot_len, |w, slot| {
            run(w * per_worker..tasks.min((w + 1) * per_worker), w, slot)
        });
    } else {
        run(0..tasks, 0, &mut slots[..tiling.slot_len]);
    }
}

/// Values of one worker's scratch for int8 rows: a key block of keys and of values.
pub(crate) fn int8_rows_len(tiling: &AttentionTiling, head_dim: usize, value_dim: usize) -> usize {
    tiling.key_block * (head_dim + value_dim)
}

/// Query rows `q0..q0 + rows` of flattened head `h`, which attends its first `keys` keys.
#[derive(Clone, Copy)]
struct QueryBlock {
    h: usize,
    q0: usize,
    rows: usize,
    keys: usize,
}

impl AttentionDims {
    /// The keys query row `i` may see, of the first `seq_k`.
    fn key_range(&self, seq_k: usize, i: usize) -> (usize, usize) {
        match self.keys {
            KeyRange::All => (0, seq_k),
            KeyRange::Causal { window } => {
                // Queries align to the end of the keys (decoding with a cache): query `i`
                // sits at key position `i + Sk - Sq`, and one before the first key sees none.
                let Some(pos) = (i + seq_k).checked_sub(self.seq_q) else {
                    return (0, 0);
                };
                let last = (pos + 1).min(seq_k);
                let first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
                (first.min(last), last)
            }
        }
    }
}

/// Query rows up to which a block's two products run as direct loops rather than GEMM:
/// a decode step's one row per head would pay GEMM's packing of the keys and values for a
/// single pass over them.
const DIRECT_ROWS: usize = 2;

/// One query block through every key block: online softmax over GEMM tiles (direct loops
/// for a block of [`DIRECT_ROWS`] rows or fewer).
#[allow(clippy::too_many_arguments)]
fn attention_block<'s, T: FloatStore>(
    d: &AttentionDims,
    tiling: &AttentionTiling,
    kernels: Kernels<T::Acc>,
    job: QueryBlock,
    (q, k, v, mask): (&[T], Rows<'_, T>, Rows<'_, T>, MaskValues<'_, T>),
    slot: &'s mut [T::Acc],
    rows_scratch: &mut [T],
) -> &'s [T::Acc]
where
    T::Acc: GemmAcc,
{
    let zero = <T::Acc as Real>::ZERO;
    let neg_inf = <T::Acc as Real>::NEG_INFINITY;
    let (qb, kb, dv) = (tiling.query_block, tiling.key_block, d.value_dim);
    let (probs, rest) = slot.split_at_mut(qb * kb);
    let (acc, rest) = rest.split_at_mut(qb * dv);
    let (row_max, rest) = rest.split_at_mut(qb);
    let (row_sum, gemm_scratch) = rest.split_at_mut(qb);
    let rows = job.rows;
    row_max[..rows].fill(neg_inf);
    row_sum[..rows].fill(zero);
    acc[..rows * dv].fill(zero);

    // Grouped-query attention: q head `h` reads key/value head `h / group` on the heads
    // axis; other leading dims are shared.
    let kv_h = if d.group == 1 {
        job.h
    } else {
        let (outer, head) = (job.h / d.q_heads_axis, job.h % d.q_heads_axis);
        outer * (d.q_heads_axis / d.group) + head / d.group
    };
    let [q_at, k_at, v_at, _] = d.layouts;
    let (k_scratch, v_scratch) = rows_scratch.split_at_mut(rows_scratch.len().min(kb * d.head_dim));
    // Int8 rows are read from scratch, a key block of them scaled back at a time.
    let stride_of = |rows: Rows<'_, T>, at: HeadLayout, width: usize| match rows {
        Rows::Float(_) => at.row_stride,
        Rows::Int8 { .. } => width,
    };
    let strides = [
        q_at.row_stride,
        stride_of(k, k_at, d.head_dim),
        stride_of(v, v_at, dv),
    ];
    let q_block = &q[q_at.row(job.h, job.q0)..];
    // Keys any row of the block may see (row ranges only move forward with the row).
    let first = d.key_range(job.keys, job.q0).0;
    let last = d.key_range(job.keys, job.q0 + rows - 1).1;
    let scale = <T::Acc as Real>::from_f64(d.scale);
    let fused_exp = isa() >= Isa::Avx2;
    for k0 in (first..last).step_by(kb) {
        let keys = kb.min(last - k0);
        let (score_dims, pv_dims) =
            AttentionTiling::products(rows, keys, (d.head_dim, dv), strides);
        let probs = &mut probs[..rows * keys];
        let k_block = block_rows(k, k_at, (kv_h, k0, keys), d.head_dim, &mut *k_scratch);
        if rows <= DIRECT_ROWS {
            vectorized(DirectScores {
                probs: &mut *probs,
                keys,
                q_block,
                k_block,
                strides,
                head_dim: d.head_dim,
            });
        } else {
            gemm(
                &GemmPlan::new(score_dims, 1, tiling.shape),
                kernels,
                q_block,
                k_block,
                probs,
                gemm_scratch,
                None,
                None,
            );
        }
        vectorized(ScoreRows {
            d,
            job,
            k0,
            keys,
            scale,
            mask,
            fused_exp,
            probs: &mut *probs,
            acc: &mut acc[..rows * dv],
            row_max: &mut row_max[..rows],
            row_sum: &mut row_sum[..rows],
        });
        // The rows were rescaled to the new maxima above; add this block's P·V to them.
        let v_block = block_rows(v, v_at, (kv_h, k0, keys), dv, &mut *v_scratch);
        if rows <= DIRECT_ROWS {
            vectorized(DirectValues {
                acc: &mut acc[..rows * dv],
                probs: &*probs,
                keys,
                v_block,
                v_stride: strides[2],
                value_dim: dv,
            });
        } else {
            gemm(
                &GemmPlan::new(pv_dims, 1, tiling.shape).adding(),
                kernels,
                &*probs,
                v_block,
                &mut acc[..rows * dv],
                gemm_scratch,
                None,
                None,
            );
        }
    }
    let (acc, row_max, row_sum) = (&mut acc[..rows * dv], &row_max[..rows], &row_sum[..rows]);
    vectorized(|| {
        for (r, o) in acc.chunks_exact_mut(dv).enumerate() {
            // A row with every key masked has no distribution; it yields zeros.
            let inv = if row_max[r] == neg_inf {
                zero
            } else {
                <T::Acc as Real>::ONE / row_sum[r]
            };
            for a in o.iter_mut() {
                *a = *a * inv;
            }
        }
    });
    acc
}

/// One key block's scores of a query block turned into unnormalised probabilities: scale,
/// key range and mask, then the online-softmax update of each row's running maximum and
/// sum, rescaling the row's output so far.
struct ScoreRows<'a, T: FloatStore> {
    d: &'a AttentionDims,
    job: QueryBlock,
    k0: usize,
    keys: usize,
    scale: T::Acc,
    mask: MaskValues<'a, T>,
    /// The ISA has FMA: see [`exp_and_sum`].
    fused_exp: bool,
    /// `rows x keys` scores in, probabilities out.
    probs: &'a mut [T::Acc],
    acc: &'a mut [T::Acc],
    row_max: &'a mut [T::Acc],
    row_sum: &'a mut [T::Acc],
}

impl<T: FloatStore> VectorKernel for ScoreRows<'_, T>
where
    T::Acc: GemmAcc,
{
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let ScoreRows {
            d,
            job,
            k0,
            keys,
            scale,
            mask,
            fused_exp,
            probs,
            acc,
            row_max,
            row_sum,
        } = self;
        let zero = <T::Acc as Real>::ZERO;
        let neg_inf = <T::Acc as Real>::NEG_INFINITY;
        let dv = d.value_dim;
        for (r, p) in probs.chunks_exact_mut(keys).enumerate() {
            let i = job.q0 + r;
            let (lo, hi) = d.key_range(job.keys, i);
            let (lo, hi) = (lo.clamp(k0, k0 + keys) - k0, hi.clamp(k0, k0 + keys) - k0);
            p[..lo].fill(neg_inf);
            p[hi..].fill(neg_inf);
            let seen = &mut p[lo..hi];
            let n = seen.len();
            // Scale and mask, and the row's maximum, in one pass over the row.
            let base = d.mask.as_ref().map(|m| {
                let at = m.head_offsets[job.h] + i * m.query_stride + (k0 + lo) * m.key_stride;
                (at, m.key_stride)
            });
            let block_max = match (mask, base) {
                // Contiguous mask rows (the common case) as straight selects and adds.
                (MaskValues::Bool(values), Some((at, 1))) => {
                    let keep = &values[at..at + n];
                    write_and_max_zip(seen, keep, |k, s| if k == 0 { neg_inf } else { s * scale })
                }
                (MaskValues::Additive(values), Some((at, 1))) => {
                    let add = &values[at..at + n];
                    write_and_max_zip(seen, add, |a, s| s * scale + a.load())
                }
                (MaskValues::Bool(values), Some((at, stride))) => write_and_max(seen, |j, s| {
                    if values[at + j * stride] == 0 {
                        neg_inf
                    } else {
                        s * scale
                    }
                }),
                (MaskValues::Additive(values), Some((at, stride))) => {
                    write_and_max(seen, |j, s| s * scale + values[at + j * stride].load())
                }
                _ => write_and_max(seen, |_, s| s * scale),
            };
            let new_max = row_max[r].maximum(block_max);
            if new_max == neg_inf {
                // Every key so far is masked: nothing to add for this row yet.
                p.fill(zero);
                continue;
            }
            let sum = exp_and_sum(p, new_max, fused_exp);
            // Rescale what earlier key blocks added to this row to the new maximum (nothing
            // was added while the maximum was -inf).
            let alpha = (row_max[r] - new_max).exp();
            if alpha != <T::Acc as Real>::ONE && row_max[r] != neg_inf {
                for a in &mut acc[r * dv..(r + 1) * dv] {
                    *a = *a * alpha;
                }
            }
            row_sum[r] = row_sum[r] * alpha + sum;
            row_max[r] = new_max;
        }
    }
}

/// Replaces each score `s` of a row by `value(j, s)` (`j` its position) and returns the
/// largest new value, NaN if any is NaN, over sixteen lanes.
#[inline(always)]
fn write_and_max<R: Real>(row: &mut [R], value: impl Fn(usize, R) -> R) -> R {
    let mut lanes = [R::NEG_INFINITY; 16];
    let mut chunks = row.chunks_exact_mut(16);
    let mut at = 0;
    for c in &mut chunks {
        for (i, (l, s)) in lanes.iter_mut().zip(c.iter_mut()).enumerate() {
            let v = value(at + i, *s);
            *s = v;
            // Once NaN, a lane stays NaN (`v > NaN` is false).
            let take = (v > *l) | v.is_nan();
            *l = if take { v } else { *l };
        }
        at += 16;
    }
    let mut max = R::NEG_INFINITY;
    for (i, s) in chunks.into_remainder().iter_mut().enumerate() {
        let v = value(at + i, *s);
        *s = v;
        max = max.maximum(v);
    }
    lanes.iter().fold(max, |m, l| m.maximum(*l))
}

/// [`write_and_max`] with `value(m, s)` reading a mask row `mask` in step with the scores
/// (a contiguous mask). Zipped slices rather than an index: an indexed read is bounds-checked
/// per score, which kept the loop scalar (the scale-and-mask pass was a quarter of
/// single-thread attention on MiniLM's heads). It stays a loop of its own: one core shared
/// with [`write_and_max`] through a per-chunk closure compiled scalar again (attention on
/// `[8,12,128,32]`, one thread: 6.3 ms against 4.5).
#[inline(always)]
fn write_and_max_zip<R: Real, M: Copy>(row: &mut [R], mask: &[M], value: impl Fn(M, R) -> R) -> R {
    debug_assert_eq!(row.len(), mask.len());
    let mut lanes = [R::NEG_INFINITY; 16];
    // Sixteen at a time, every load before any store: the compiler cannot tell that the
    // mask and the scores do not overlap, and interleaved loads and stores kept the values
    // scalar.
    let (rows, row_rest) = row.as_chunks_mut::<16>();
    let (masks, mask_rest) = mask.as_chunks::<16>();
    for (c, m) in rows.iter_mut().zip(masks) {
        let (scores, mask) = (*c, *m);
        let values: [R; 16] = std::array::from_fn(|i| value(mask[i], scores[i]));
        *c = values;
        for (l, v) in lanes.iter_mut().zip(values) {
            let take = (v > *l) | v.is_nan();
            *l = if take { v } else { *l };
        }
    }
    let mut max = R::NEG_INFINITY;
    for (s, m) in row_rest.iter_mut().zip(mask_rest) {
        let v = value(*m, *s);
        *s = v;
        max = max.maximum(v);
    }
    lanes.iter().fold(max, |m, l| m.maximum(*l))
}

/// Replaces each score `s` of a row by `exp(s - max)` and returns their sum, in one pass
/// over sixteen lanes (one 512-bit vector of f32). With `fused` (the instruction set has
/// FMA, decided once per attention block) the exponential is
/// [`Real::exp_nonpositive_fused`] (`s - max ≤ 0`), about half the work of the general
/// one; both are within about 1 ulp of the true value.
#[inline(always)]
fn exp_and_sum<R: Real>(row: &mut [R], max: R, fused: bool) -> R {
    if fused {
        exp_and_sum_with(row, max, |x: R| x.exp_nonpositive_fused())
    } else {
        exp_and_sum_with(row, max, R::exp)
    }
}

#[inline(always)]
fn exp_and_sum_with<R: Real>(row: &mut [R], max: R, exp: impl Fn(R) -> R) -> R {
    let mut lanes = [R::ZERO; 16];
    let mut chunks = row.chunks_exact_mut(16);
    for c in &mut chunks {
        for (l, s) in lanes.iter_mut().zip(c.iter_mut()) {
            *s = exp(*s - max);
            *l += *s;
        }
    }
    let mut sum = R::ZERO;
    for s in chunks.into_remainder() {
        *s = exp(*s - max);
        sum += *s;
    }
    sum_lanes(lanes) + sum
}

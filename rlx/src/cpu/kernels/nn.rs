//! Attention and rotary embeddings.

use rayon::prelude::*;

use super::layout::parallel;
use super::numeric::{FloatStore, Real};

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
}

/// Element offsets of a broadcast mask: per flattened head, then strides along the query
/// and key axes (0 where the mask broadcasts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MaskLayout {
    pub head_offsets: Vec<usize>,
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

/// `Σ a·b` in eight independent lanes, so the compiler can keep them in one SIMD register
/// (a single running sum is a dependency chain it may not reorder).
#[inline]
fn dot<T: FloatStore>(a: &[T], b: &[T]) -> T::Acc {
    let mut lanes = [<T::Acc as Real>::ZERO; 8];
    let (mut ca, mut cb) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            lanes[l] += x[l].load() * y[l].load();
        }
    }
    let mut sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        sum += x.load() * y.load();
    }
    sum
}

/// `out = softmax(q kᵀ · scale + mask) v`, one query row at a time. `scores` is scratch of
/// `seq_k` elements per worker slot.
pub(crate) fn attention<T: FloatStore>(
    d: &AttentionDims,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: MaskValues<'_, T>,
    out: &mut [T],
    scores: &mut [T::Acc],
) {
    let rows = d.heads * d.seq_q;
    let row_job = |row: usize, out_row: &mut [T], scores: &mut [T::Acc]| {
        let (h, i) = (row / d.seq_q, row % d.seq_q);
        // Grouped-query attention: q head `h` reads key/value head `h / group` on the heads
        // axis; other leading dims are shared.
        let kv_h = if d.group == 1 {
            h
        } else {
            let (outer, head) = (h / d.q_heads_axis, h % d.q_heads_axis);
            outer * (d.q_heads_axis / d.group) + head / d.group
        };
        let qv = &q[(h * d.seq_q + i) * d.head_dim..][..d.head_dim];
        let (first, last) = match d.keys {
            KeyRange::All => (0, d.seq_k),
            KeyRange::Causal { window } => {
                // Queries align to the end of the keys (decoding with a cache).
                let pos = i + d.seq_k.saturating_sub(d.seq_q);
                let last = (pos + 1).min(d.seq_k);
                let first = window.map_or(0, |w| (pos + 1).saturating_sub(w));
                (first, last)
            }
        };
        let scale = <T::Acc as Real>::from_f64(d.scale);
        let mut max = <T::Acc as Real>::NEG_INFINITY;
        for j in 0..d.seq_k {
            let mut s = <T::Acc as Real>::NEG_INFINITY;
            if (first..last).contains(&j) {
                let kv = &k[(kv_h * d.seq_k + j) * d.head_dim..][..d.head_dim];
                s = dot(qv, kv) * scale;
                if let Some(m) = &d.mask {
                    let at = m.head_offsets[h] + i * m.query_stride + j * m.key_stride;
                    match mask {
                        MaskValues::Bool(m) if m[at] == 0 => s = <T::Acc as Real>::NEG_INFINITY,
                        MaskValues::Additive(m) => s += m[at].load(),
                        _ => {}
                    }
                }
            }
            scores[j] = s;
            max = max.maximum(s);
        }
        // A row with every key masked has no distribution; it yields zeros.
        if max == <T::Acc as Real>::NEG_INFINITY {
            out_row.fill(T::store(<T::Acc as Real>::ZERO));
            return;
        }
        let mut sum = <T::Acc as Real>::ZERO;
        for s in scores[..d.seq_k].iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        let inv = <T::Acc as Real>::ONE / sum;
        let mut acc = [<T::Acc as Real>::ZERO; 256];
        for c0 in (0..d.value_dim).step_by(256) {
            let width = 256.min(d.value_dim - c0);
            acc[..width].fill(<T::Acc as Real>::ZERO);
            for (j, p) in scores[..d.seq_k].iter().enumerate() {
                if *p == <T::Acc as Real>::ZERO {
                    continue;
                }
                let vv = &v[(kv_h * d.seq_k + j) * d.value_dim + c0..][..width];
                for (a, x) in acc[..width].iter_mut().zip(vv) {
                    *a += *p * x.load();
                }
            }
            for (o, a) in out_row[c0..c0 + width].iter_mut().zip(&acc[..width]) {
                *o = T::store(*a * inv);
            }
        }
    };
    let slots = scores.len() / d.seq_k.max(1);
    if slots > 1 && parallel(rows * d.seq_k * d.head_dim) {
        let per_slot = rows.div_ceil(slots);
        out.par_chunks_mut(per_slot * d.value_dim)
            .zip(scores.par_chunks_mut(d.seq_k.max(1)))
            .enumerate()
            .for_each(|(w, (block, scores))| {
                for (r, out_row) in block.chunks_mut(d.value_dim).enumerate() {
                    row_job(w * per_slot + r, out_row, scores);
                }
            });
    } else {
        for (row, out_row) in out.chunks_mut(d.value_dim.max(1)).enumerate().take(rows) {
            row_job(row, out_row, scores);
        }
    }
}

/// Rotary embedding parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RopeDims {
    /// Rows of `[seq, features]` (all leading dims flattened).
    pub batches: usize,
    pub seq: usize,
    pub features: usize,
    pub dims: usize,
    pub base: f64,
    pub scale: f64,
    pub traditional: bool,
}

/// Rotates the first `dims` features of each position by position-dependent angles.
pub(crate) fn rope<T: FloatStore>(r: &RopeDims, offset: i64, x: &[T], out: &mut [T]) {
    let half = r.dims / 2;
    for b in 0..r.batches {
        for s in 0..r.seq {
            let row = (b * r.seq + s) * r.features;
            let (xs, os) = (&x[row..row + r.features], &mut out[row..row + r.features]);
            let pos = (offset as f64 + s as f64) * r.scale;
            for i in 0..half {
                let theta = pos * r.base.powf(-2.0 * i as f64 / r.dims as f64);
                let (sin, cos) = theta.sin_cos();
                let (sin, cos) = (
                    <T::Acc as Real>::from_f64(sin),
                    <T::Acc as Real>::from_f64(cos),
                );
                let (a, b) = if r.traditional {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                let (x1, x2) = (xs[a].load(), xs[b].load());
                os[a] = T::store(x1 * cos - x2 * sin);
                os[b] = T::store(x1 * sin + x2 * cos);
            }
            os[r.dims..].copy_from_slice(&xs[r.dims..]);
        }
    }
}

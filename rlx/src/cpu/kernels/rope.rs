//! Rotary position embeddings.

use super::numeric::{FloatStore, Real};
use super::positions::RowPositions;
use super::simd::vectorized;
use super::trig;

/// Rotary embedding parameters.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RopeDims {
    /// Rows of `[seq, features]` (all leading dims flattened).
    pub batches: usize,
    pub seq: usize,
    pub features: usize,
    pub dims: usize,
    pub base: f64,
    pub scale: f64,
    pub traditional: bool,
    /// Each pair's frequency, when not `base`'s.
    pub freqs: Option<std::sync::Arc<[f64]>>,
}

/// Rotates the first `dims` features of each position by position-dependent angles.
///
/// An angle depends on the position and the pair only, so each is computed once and
/// turns that pair in every row of that position (every head): the sines and cosines, not
/// the rotations, are what cost here, so they are computed [`trig::LANES`] at a time.
/// `offsets` has one offset, or one per row of axis 0 (the batches split evenly between
/// them).
pub(crate) fn rope<T: FloatStore>(r: &RopeDims, offsets: RowPositions<'_>, x: &[T], out: &mut [T]) {
    if r.batches == 0 {
        return;
    }
    vectorized(|| rotate(r, offsets, x, out));
    if r.dims < r.features {
        for row in 0..r.batches * r.seq {
            let at = row * r.features;
            out[at + r.dims..at + r.features].copy_from_slice(&x[at + r.dims..at + r.features]);
        }
    }
}

/// Pairs whose frequencies, sines and cosines one pass keeps on the stack.
const PAIRS: usize = 64;

#[inline(always)]
fn rotate<T: FloatStore>(r: &RopeDims, offsets: RowPositions<'_>, x: &[T], out: &mut [T]) {
    let half = r.dims / 2;
    let rows = offsets.rows();
    let per_row = r.batches / rows;
    let mut frequencies = [0f64; PAIRS];
    let zero = <T::Acc as Real>::from_f64(0.0);
    let (mut sin, mut cos) = ([zero; PAIRS], [zero; PAIRS]);
    for i0 in (0..half).step_by(PAIRS) {
        let pairs = PAIRS.min(half - i0);
        for (j, f) in frequencies[..pairs].iter_mut().enumerate() {
            *f = match &r.freqs {
                Some(freqs) => freqs[i0 + j],
                None => r.base.powf(-2.0 * (i0 + j) as f64 / r.dims as f64),
            };
        }
        for (row, s) in (0..rows).flat_map(|row| (0..r.seq).map(move |s| (row, s))) {
            let pos = (offsets.get(row) as f64 + s as f64) * r.scale;
            for j0 in (0..pairs).step_by(trig::LANES) {
                let mut angles = [0f64; trig::LANES];
                let lanes = trig::LANES.min(pairs - j0);
                for (a, f) in angles.iter_mut().zip(&frequencies[j0..j0 + lanes]) {
                    *a = pos * f;
                }
                let (mut s64, mut c64) = ([0f64; trig::LANES], [0f64; trig::LANES]);
                trig::sin_cos(&angles, &mut s64, &mut c64);
                for l in 0..lanes {
                    sin[j0 + l] = <T::Acc as Real>::from_f64(s64[l]);
                    cos[j0 + l] = <T::Acc as Real>::from_f64(c64[l]);
                }
            }
            let (sin, cos) = (&sin[..pairs], &cos[..pairs]);
            for batch in row * per_row..(row + 1) * per_row {
                let at = (batch * r.seq + s) * r.features;
                let (x, out) = (&x[at..at + r.dims], &mut out[at..at + r.dims]);
                if r.traditional {
                    let (x, out) = (&x[2 * i0..], &mut out[2 * i0..]);
                    for j in 0..pairs {
                        let (x1, x2) = (x[2 * j].load(), x[2 * j + 1].load());
                        out[2 * j] = T::store(x1 * cos[j] - x2 * sin[j]);
                        out[2 * j + 1] = T::store(x1 * sin[j] + x2 * cos[j]);
                    }
                } else {
                    let (first, second) = out.split_at_mut(half);
                    let (first, second) = (&mut first[i0..i0 + pairs], &mut second[i0..i0 + pairs]);
                    let (x1s, x2s) = (&x[i0..i0 + pairs], &x[half + i0..half + i0 + pairs]);
                    for j in 0..pairs {
                        let (x1, x2) = (x1s[j].load(), x2s[j].load());
                        first[j] = T::store(x1 * cos[j] - x2 * sin[j]);
                        second[j] = T::store(x1 * sin[j] + x2 * cos[j]);
                    }
                }
            }
        }
    }
}

//! Rotary position embeddings.

use super::numeric::{FloatStore, Real};
use super::positions::RowPositions;

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
/// the rotations, are what cost here. `offsets` has one offset, or one per row of axis 0
/// (the batches split evenly between them).
pub(crate) fn rope<T: FloatStore>(r: &RopeDims, offsets: RowPositions<'_>, x: &[T], out: &mut [T]) {
    /// Frequencies computed per pass, on the stack.
    const PAIRS: usize = 64;
    if r.batches == 0 {
        return;
    }
    let half = r.dims / 2;
    let mut frequencies = [0f64; PAIRS];
    for i0 in (0..half).step_by(PAIRS) {
        let pairs = PAIRS.min(half - i0);
        for (j, f) in frequencies[..pairs].iter_mut().enumerate() {
            *f = match &r.freqs {
                Some(freqs) => freqs[i0 + j],
                None => r.base.powf(-2.0 * (i0 + j) as f64 / r.dims as f64),
            };
        }
        let rows = offsets.rows();
        let per_row = r.batches / rows;
        for (row, s) in (0..rows).flat_map(|row| (0..r.seq).map(move |s| (row, s))) {
            let pos = (offsets.get(row) as f64 + s as f64) * r.scale;
            for (j, frequency) in frequencies[..pairs].iter().enumerate() {
                let i = i0 + j;
                let (sin, cos) = (pos * frequency).sin_cos();
                let (sin, cos) = (
                    <T::Acc as Real>::from_f64(sin),
                    <T::Acc as Real>::from_f64(cos),
                );
                let (a, b) = if r.traditional {
                    (2 * i, 2 * i + 1)
                } else {
                    (i, i + half)
                };
                for batch in row * per_row..(row + 1) * per_row {
                    let row = (batch * r.seq + s) * r.features;
                    let (x1, x2) = (x[row + a].load(), x[row + b].load());
                    out[row + a] = T::store(x1 * cos - x2 * sin);
                    out[row + b] = T::store(x1 * sin + x2 * cos);
                }
            }
        }
    }
    if r.dims < r.features {
        for row in 0..r.batches * r.seq {
            let at = row * r.features;
            out[at + r.dims..at + r.features].copy_from_slice(&x[at + r.dims..at + r.features]);
        }
    }
}

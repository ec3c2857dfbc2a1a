//! How attention reads key and value rows: float rows where they lie or int8 rows scaled
//! back a block at a time, and the direct loops of a decode step's few query rows over them.

use super::attention::HeadLayout;
use super::numeric::{FloatStore, Real};
use super::simd::{VectorKernel, vectorized};

/// Key or value rows as an attention reads them.
#[derive(Clone, Copy)]
pub(crate) enum Rows<'a, T> {
    Float(&'a [T]),
    /// Int8 rows (stored contiguously, `[.., S, width]`), each scaled back by its float32
    /// scale: the row at element offset `r · width` by `scales[r]`. A block of rows is
    /// scaled back into scratch as the kernel reaches it.
    Int8 {
        values: &'a [i8],
        scales: &'a [f32],
    },
}

/// `Σ a_i b_i` in the accumulator type, in 16 lanes (so it vectorizes).
#[inline(always)]
pub(super) fn dot<T: FloatStore>(a: &[T], b: &[T]) -> T::Acc {
    let mut lanes = [<T::Acc as Real>::ZERO; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((l, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *l += x.load() * y.load();
        }
    }
    let mut tail = <T::Acc as Real>::ZERO;
    for (x, y) in ra.iter().zip(rb) {
        tail += x.load() * y.load();
    }
    sum_lanes(lanes) + tail
}

/// The sum of 16 lanes, pairwise: the same rounding at every vector width.
#[inline(always)]
pub(super) fn sum_lanes<R: Real>(mut lanes: [R; 16]) -> R {
    let mut width = 16;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
    }
    lanes[0]
}

/// Rows `first..first + count` of head `h` of `rows` (each `width` values), from row
/// `first` on: float rows where they lie, int8 rows scaled back into `scratch` (rows
/// `width` apart).
pub(super) fn block_rows<'a, T: FloatStore>(
    rows: Rows<'a, T>,
    at: HeadLayout,
    (h, first, count): (usize, usize, usize),
    width: usize,
    scratch: &'a mut [T],
) -> &'a [T] {
    match rows {
        Rows::Float(values) => &values[at.row(h, first)..],
        Rows::Int8 { values, scales } => {
            let start = at.row(h, first);
            let out = &mut scratch[..count * width];
            vectorized(ScaleRows {
                out: &mut *out,
                values: &values[start..start + count * width],
                scales: &scales[start / width..][..count],
                width,
            });
            out
        }
    }
}

/// Int8 rows scaled back: value by value `f32(q) · scale`, as the graph's cast and
/// product compute them.
struct ScaleRows<'a, T> {
    out: &'a mut [T],
    values: &'a [i8],
    scales: &'a [f32],
    width: usize,
}

impl<T: FloatStore> VectorKernel for ScaleRows<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for ((out, row), scale) in self
            .out
            .chunks_exact_mut(self.width)
            .zip(self.values.chunks_exact(self.width))
            .zip(self.scales)
        {
            for (o, q) in out.iter_mut().zip(row) {
                let value = f32::from(*q) * scale;
                *o = T::store(<T::Acc as Real>::from_f64(f64::from(value)));
            }
        }
    }
}

/// A block's scores `q · kᵀ` as direct dot products, one per key (a struct, so that the
/// loops are compiled inside each instruction set's copy).
pub(super) struct DirectScores<'a, T: FloatStore> {
    pub probs: &'a mut [T::Acc],
    pub keys: usize,
    pub q_block: &'a [T],
    pub k_block: &'a [T],
    pub strides: [usize; 3],
    pub head_dim: usize,
}

impl<T: FloatStore> VectorKernel for DirectScores<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (r, p) in self.probs.chunks_exact_mut(self.keys).enumerate() {
            let q_row = &self.q_block[r * self.strides[0]..][..self.head_dim];
            for (j, s) in p.iter_mut().enumerate() {
                *s = dot(q_row, &self.k_block[j * self.strides[1]..][..self.head_dim]);
            }
        }
    }
}

/// A block's `P · V` added to the running outputs, key by key.
pub(super) struct DirectValues<'a, T: FloatStore> {
    pub acc: &'a mut [T::Acc],
    pub probs: &'a [T::Acc],
    pub keys: usize,
    pub v_block: &'a [T],
    pub v_stride: usize,
    pub value_dim: usize,
}

impl<T: FloatStore> VectorKernel for DirectValues<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        // Sixteen outputs at a time stay in registers through every key (the same sums, in
        // the same order, as adding row by row into memory).
        const LANES: usize = 16;
        let dv = self.value_dim;
        for (p, o) in self
            .probs
            .chunks_exact(self.keys)
            .zip(self.acc.chunks_exact_mut(dv))
        {
            for (c, out) in o.chunks_mut(LANES).enumerate() {
                let at = c * LANES;
                if let Ok(out) = <&mut [T::Acc; LANES]>::try_from(&mut *out) {
                    let mut lanes = *out;
                    for (j, pj) in p.iter().enumerate() {
                        let v: &[T; LANES] = self.v_block[j * self.v_stride + at..][..LANES]
                            .try_into()
                            .expect("16 values");
                        for (a, x) in lanes.iter_mut().zip(v) {
                            *a += *pj * x.load();
                        }
                    }
                    *out = lanes;
                } else {
                    for (j, pj) in p.iter().enumerate() {
                        let v = &self.v_block[j * self.v_stride + at..][..out.len()];
                        for (a, x) in out.iter_mut().zip(v) {
                            *a += *pj * x.load();
                        }
                    }
                }
            }
        }
    }
}

//! How attention reads key and value rows: float rows where they lie or int8 rows scaled
//! back a block at a time.

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

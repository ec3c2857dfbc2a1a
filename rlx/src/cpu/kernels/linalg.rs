//! Dense solve and quantized matmul.

use super::layout::parallel;
use super::numeric::{FloatStore, Real};

/// Solves `a x = b` for each of `batch` systems (`a` is `n x n`, `b` is `n x k`) by LU
/// with partial pivoting in f64. `work` holds `n*n + n*k` values. Returns `Err(())` for a
/// singular matrix.
pub(crate) fn solve<T: FloatStore>(
    batch: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    out: &mut [T],
    work: &mut [f64],
) -> Result<(), ()> {
    let (lu, x) = work.split_at_mut(n * n);
    let x = &mut x[..n * k];
    for s in 0..batch {
        for (d, v) in lu.iter_mut().zip(&a[s * n * n..(s + 1) * n * n]) {
            *d = v.load().into_f64();
        }
        for (d, v) in x.iter_mut().zip(&b[s * n * k..(s + 1) * n * k]) {
            *d = v.load().into_f64();
        }
        for col in 0..n {
            let pivot = (col..n)
                .max_by(|&i, &j| lu[i * n + col].abs().total_cmp(&lu[j * n + col].abs()))
                .unwrap_or(col);
            if lu[pivot * n + col] == 0.0 || !lu[pivot * n + col].is_finite() {
                return Err(());
            }
            if pivot != col {
                for j in 0..n {
                    lu.swap(col * n + j, pivot * n + j);
                }
                for j in 0..k {
                    x.swap(col * k + j, pivot * k + j);
                }
            }
            let p = lu[col * n + col];
            for row in col + 1..n {
                let f = lu[row * n + col] / p;
                if f == 0.0 {
                    continue;
                }
                for j in col..n {
                    lu[row * n + j] -= f * lu[col * n + j];
                }
                for j in 0..k {
                    x[row * k + j] -= f * x[col * k + j];
                }
            }
        }
        for col in (0..n).rev() {
            let p = lu[col * n + col];
            for j in 0..k {
                let mut v = x[col * k + j];
                for c in col + 1..n {
                    v -= lu[col * n + c] * x[c * k + j];
                }
                x[col * k + j] = v / p;
            }
        }
        for (o, v) in out[s * n * k..(s + 1) * n * k].iter_mut().zip(x.iter()) {
            *o = T::store(<T::Acc as Real>::from_f64(*v));
        }
    }
    Ok(())
}

/// Widening to f64 for the solver.
pub(crate) trait IntoF64 {
    fn into_f64(self) -> f64;
}

impl IntoF64 for f32 {
    fn into_f64(self) -> f64 {
        f64::from(self)
    }
}

impl IntoF64 for f64 {
    fn into_f64(self) -> f64 {
        self
    }
}

/// Quantized weights: `n` rows of `k` values packed `bits` wide, with one scale and bias per
/// `group` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QuantDims {
    pub rows: usize,
    pub n: usize,
    pub k: usize,
    pub bits: u8,
    pub group: usize,
}

/// The `j`-th quantized value of a packed row (low nibble first for 4 bits).
fn quant(row: &[u8], j: usize, bits: u8) -> u8 {
    if bits == 8 {
        row[j]
    } else {
        (row[j / 2] >> ((j % 2) * 4)) & 0x0f
    }
}

/// `out[n, j] = scale[n, g] · q[n, j] + bias[n, g]` for the `n` packed rows of `w`
/// (`d.rows` is unused), each product and sum rounded as `T`'s accumulator does.
pub(crate) fn dequantize<T: FloatStore>(
    d: &QuantDims,
    w: &[u8],
    scales: &[T],
    biases: &[T],
    out: &mut [T],
) {
    let row_bytes = d.k * d.bits as usize / 8;
    let groups = d.k / d.group;
    for (row, values) in out.chunks_mut(d.k).enumerate() {
        let packed = &w[row * row_bytes..(row + 1) * row_bytes];
        for (j, value) in values.iter_mut().enumerate() {
            let g = row * groups + j / d.group;
            let q = <T::Acc as Real>::from_f64(f64::from(quant(packed, j, d.bits)));
            *value = T::store(scales[g].load() * q + biases[g].load());
        }
    }
}

/// `out[r, n] = Σ_j x[r, j] · (scale[n, g] · q[n, j] + bias[n, g])`, with the dequantization
/// folded per group: `Σ_g scale · Σ_j x q + bias · Σ_j x`.
pub(crate) fn quantized_matmul<T: FloatStore>(
    d: &QuantDims,
    x: &[T],
    w: &[u8],
    scales: &[T],
    biases: &[T],
    out: &mut [T],
) {
    let row_bytes = d.k * d.bits as usize / 8;
    let groups = d.k / d.group;
    let job = |r: usize, out_row: &mut [T]| {
        let xs = &x[r * d.k..(r + 1) * d.k];
        for (col, o) in out_row.iter_mut().enumerate() {
            let packed = &w[col * row_bytes..(col + 1) * row_bytes];
            let mut total = <T::Acc as Real>::ZERO;
            for g in 0..groups {
                let mut dot = <T::Acc as Real>::ZERO;
                let mut sum = <T::Acc as Real>::ZERO;
                let first = g * d.group;
                for (j, x) in xs[first..first + d.group].iter().enumerate() {
                    let xv = x.load();
                    dot += xv
                        * <T::Acc as Real>::from_f64(f64::from(quant(packed, first + j, d.bits)));
                    sum += xv;
                }
                total +=
                    scales[col * groups + g].load() * dot + biases[col * groups + g].load() * sum;
            }
            *o = T::store(total);
        }
    };
    if parallel(d.rows * d.n * d.k / 8) && d.rows > 1 {
        crate::cpu::workers::chunks_mut(out, d.n, job);
    } else {
        out.chunks_mut(d.n)
            .enumerate()
            .for_each(|(r, row)| job(r, row));
    }
}

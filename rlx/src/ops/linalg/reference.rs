//! The float64 values of matrix products and solves.

use crate::ops::array::{Array, Out};

/// Element `(row, col)` of the matrix of `t` that the batch index `lead` of a broadcast
/// result selects, read with the matrix's last two axes swapped when `transposed`.
fn matrix_at(t: &Array, lead: &[usize], transposed: bool, row: usize, col: usize) -> f64 {
    let r = t.shape.len();
    let offset = lead.len() - (r - 2);
    let mut flat = 0;
    for (a, d) in t.shape[..r - 2].iter().enumerate() {
        flat = flat * d + if *d == 1 { 0 } else { lead[offset + a] };
    }
    let (i, j) = if transposed { (col, row) } else { (row, col) };
    t.data[(flat * t.shape[r - 2] + i) * t.shape[r - 1] + j]
}

/// `a · b` at each index of `out`, the transposes read in place.
fn products(a: &Array, b: &Array, transpose_a: bool, transpose_b: bool, out: &Out) -> Vec<f64> {
    let r = a.shape.len();
    let k = if transpose_a {
        a.shape[r - 2]
    } else {
        a.shape[r - 1]
    };
    let rank = out.shape.len();
    out.fill(|o| {
        let (lead, i, j) = (&o[..rank - 2], o[rank - 2], o[rank - 1]);
        (0..k)
            .map(|p| matrix_at(a, lead, transpose_a, i, p) * matrix_at(b, lead, transpose_b, p, j))
            .sum()
    })
    .data
}

pub(super) fn matmul(transpose_a: bool, transpose_b: bool, x: &[Array], out: &Out) -> Array {
    out.holding(products(&x[0], &x[1], transpose_a, transpose_b, out))
}

/// `x · dequant(w)ᵀ`, each weight `scale · q + bias` of its group.
pub(super) fn quantized_matmul(bits: u8, group_size: usize, x: &[Array], out: &Out) -> Array {
    let (w, scales, biases) = (&x[1], &x[2], &x[3]);
    let k = *x[0].shape.last().expect("x has rank 1 or more");
    let n = w.shape[0];
    let per_byte = 8 / usize::from(bits);
    let groups = k / group_size;
    let weight = |row: usize, col: usize| {
        let byte = w.data[row * w.shape[1] + col / per_byte] as u32;
        let q = (byte >> (u32::from(bits) * (col % per_byte) as u32)) & ((1u32 << bits) - 1);
        let g = row * groups + col / group_size;
        scales.data[g] * f64::from(q) + biases.data[g]
    };
    let rows = x[0].data.len() / k.max(1);
    let mut data = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let xs = &x[0].data[r * k..(r + 1) * k];
        for col in 0..n {
            data.push(xs.iter().enumerate().map(|(p, v)| v * weight(col, p)).sum());
        }
    }
    out.holding(data)
}

/// `a⁻¹ b` for each matrix of the batch, by Gaussian elimination with partial pivoting in
/// float64 (a singular matrix gives infinities or NaNs, as a kernel's would).
pub(super) fn solve(x: &[Array], out: &Out) -> Array {
    let (a, b) = (&x[0], &x[1]);
    let r = a.shape.len();
    let n = a.shape[r - 1];
    let k = b.shape[r - 1];
    let batches = a.data.len() / (n * n).max(1);
    let mut data = Vec::with_capacity(batches * n * k);
    for batch in 0..batches {
        let mut m: Vec<f64> = a.data[batch * n * n..(batch + 1) * n * n].to_vec();
        let mut rhs: Vec<f64> = b.data[batch * n * k..(batch + 1) * n * k].to_vec();
        for col in 0..n {
            let pivot = (col..n)
                .max_by(|&p, &q| m[p * n + col].abs().total_cmp(&m[q * n + col].abs()))
                .unwrap_or(col);
            for c in 0..n {
                m.swap(col * n + c, pivot * n + c);
            }
            for c in 0..k {
                rhs.swap(col * k + c, pivot * k + c);
            }
            for row in col + 1..n {
                let f = m[row * n + col] / m[col * n + col];
                for c in col..n {
                    m[row * n + c] -= f * m[col * n + c];
                }
                for c in 0..k {
                    rhs[row * k + c] -= f * rhs[col * k + c];
                }
            }
        }
        for row in (0..n).rev() {
            for c in 0..k {
                let tail: f64 = (row + 1..n).map(|j| m[row * n + j] * rhs[j * k + c]).sum();
                rhs[row * k + c] = (rhs[row * k + c] - tail) / m[row * n + row];
            }
        }
        data.extend(rhs);
    }
    out.holding(data)
}

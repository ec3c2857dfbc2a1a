//! Random matrix products and solves.

use crate::ir::{DType, Dim, Op};
use crate::ops::sample::{Sampled, Sampler, chance, dims, pick};
use crate::ops::{MatMul, QuantizedMatMul};

/// A float operand times a new input or param of fitting dims, either operand maybe
/// stored transposed, `b` with `a`'s batch dims or none.
pub(super) fn matmul(s: &mut dyn Sampler) -> Sampled {
    let a = s.operand(&|t| t.dtype.is_float() && t.rank() > 0)?;
    let dtype = s.ty(a).dtype;
    let a_dims = dims(s, a);
    let rank = a_dims.len();
    let transpose_a = rank >= 2 && chance(s, 0.3);
    let k = if transpose_a {
        a_dims[rank - 2].clone()
    } else {
        a_dims[rank - 1].clone()
    };
    let n = s.dim();
    let transpose_b = chance(s, 0.4);
    let mut b_dims = if transpose_b { vec![n, k] } else { vec![k, n] };
    if rank > 2 && chance(s, 0.4) {
        let mut batch = a_dims[..rank - 2].to_vec();
        batch.extend(b_dims);
        b_dims = batch;
    }
    let fixed: Option<Vec<usize>> = b_dims.iter().map(Dim::as_static).collect();
    let b = match fixed {
        Some(fixed) if chance(s, 0.5) => s.param(dtype, &fixed, None)?,
        _ => s.input(dtype, b_dims)?,
    };
    let op = Op::MatMul(MatMul {
        transpose_a,
        transpose_b,
    });
    Some((op, vec![a, b]))
}

/// A well-conditioned matrix (a param: random values plus a dominant diagonal, so every
/// backend and the reference factor it without a zero pivot) and a fitting right-hand side.
pub(super) fn solve(s: &mut dyn Sampler) -> Sampled {
    let dtype = pick(s, &[DType::F32, DType::F32, DType::F64]);
    let n = 1 + s.below(4);
    let batch: Vec<usize> = (0..s.below(2)).map(|_| 1 + s.below(3)).collect();
    let mut a_dims = batch.clone();
    a_dims.extend([n, n]);
    let count: usize = a_dims.iter().product();
    let values: Vec<f64> = (0..count)
        .map(|i| {
            let (row, col) = ((i / n) % n, i % n);
            let diagonal = if row == col { 3.0 * n as f64 } else { 0.0 };
            s.uniform(-1.0, 1.0) + diagonal
        })
        .collect();
    let a = s.param(dtype, &a_dims, Some(&values))?;
    let mut b_dims: Vec<Dim> = batch.iter().map(|&d| Dim::from(d)).collect();
    b_dims.extend([Dim::from(n), s.dim()]);
    let b = s.input(dtype, b_dims)?;
    Some((Op::Solve, vec![a, b]))
}

/// A new float input whose last axis is a multiple of the group size, times a new packed
/// weight with its scales and biases.
pub(super) fn quantized_matmul(s: &mut dyn Sampler) -> Sampled {
    let dtype = pick(s, &[DType::F32, DType::F32, DType::F16, DType::BF16]);
    let bits = pick(s, &[4u8, 8]);
    let group_size = pick(s, &[32, 64, 128]);
    let k = group_size * (1 + s.below(2));
    let n = 1 + s.below(5);
    let mut x_dims: Vec<Dim> = (0..s.below(3)).map(|_| s.dim()).collect();
    x_dims.push(Dim::from(k));
    let x = s.input(dtype, x_dims)?;
    let bytes = k * usize::from(bits) / 8;
    let packed: Vec<f64> = (0..n * bytes).map(|_| s.below(256) as f64).collect();
    let w = s.param(DType::U8, &[n, bytes], Some(&packed))?;
    let groups = k / group_size;
    let scales: Vec<f64> = (0..n * groups).map(|_| s.uniform(-0.1, 0.1)).collect();
    let biases: Vec<f64> = (0..n * groups).map(|_| s.uniform(-1.0, 1.0)).collect();
    let scales = s.param(dtype, &[n, groups], Some(&scales))?;
    let biases = s.param(dtype, &[n, groups], Some(&biases))?;
    let op = Op::QuantizedMatMul(QuantizedMatMul { bits, group_size });
    Some((op, vec![x, w, scales, biases]))
}

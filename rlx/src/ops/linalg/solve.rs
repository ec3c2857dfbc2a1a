//! Solve: `a x = b` for square `a`, batched.

use super::{matmul_op, split_matrix};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, Dim, InferError, NodeId, Op, Permute, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, exact_rank, min_rank, require_float, same_dim, same_dtype};
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Solves `a x = b` for square `a`. Operands: `a` `[.., N, N]`, `b` `[.., N, K]` (float,
/// same batch dims). See [`Op::Solve`].
pub(crate) struct Solve;

impl Primitive for Solve {
    fn name(&self) -> &'static str {
        "solve"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Solve
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        solve_type(inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        solve_vjp(e, x[0], x[1], y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        solve_bound(x)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(solve_value(x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_solve(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn solve_type(inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2")?;
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    min_rank(inputs, 0, 2)?;
    exact_rank(inputs, 1, inputs[0].rank())?;
    let (batch_a, rows, cols) = split_matrix(&inputs[0].shape);
    let (batch_b, b_rows, _) = split_matrix(&inputs[1].shape);
    same_dim("rows and columns of the square matrix", &rows, &cols)?;
    same_dim(
        "rows of the matrix and of the right-hand side",
        &rows,
        &b_rows,
    )?;
    if batch_a != batch_b {
        return Err(attr_err!(
            "batch dims {batch_a} and {batch_b} of the matrix and the right-hand side differ"
        ));
    }
    Ok(inputs[1].clone())
}

/// `x = A⁻¹·B`: `gB = A⁻ᵀ·g`, `gA = −gB·xᵀ`.
fn solve_vjp(
    e: &mut Emitter<'_>,
    a: NodeId,
    b: NodeId,
    x: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let rank = e.shape(a).rank();
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(rank - 2, rank - 1);
    let at = e.op(Op::Permute(Permute { perm }), &[a])?;
    let gb = e.op(Op::Solve, &[at, g])?;
    let outer = matmul_op(e, gb, x, false, true)?;
    let ga = e.neg(outer)?;
    let ga = e.unbroadcast(ga, &e.shape(a))?;
    let gb = e.unbroadcast(gb, &e.shape(b))?;
    Ok(vec![Grad::Some(ga), Grad::Some(gb)])
}

/// `a⁻¹ b` for each matrix of the batch, by Gaussian elimination with partial pivoting in
/// float64 (a singular matrix gives infinities or NaNs, as a kernel's would).
fn solve_value(x: &[Array], out: &Out) -> Array {
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

/// A well-conditioned matrix (a param: random values plus a dominant diagonal, so every
/// backend and the reference factor it without a zero pivot) and a fitting right-hand side.
fn random_solve(s: &mut dyn Sampler) -> Sampled {
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

/// LU with partial pivoting is backward stable, so the forward error is about
/// `n u cond(a) |x|`: `cond` the infinity-norm condition number from an inverse in
/// float64, `|x|` bounded by `|a⁻¹|∞ |b|max`. A singular or non-finite matrix leaves the
/// node unjudged (infinite growth).
fn solve_bound(x: &Operands<'_>) -> Bound {
    let unjudged = Bound::Within {
        rel: 0.0,
        abs: 0.0,
        growth: f64::INFINITY,
    };
    let (Some(a), Some(b)) = (x.values.first(), x.values.get(1)) else {
        return unjudged;
    };
    let n = a.shape().last().copied().unwrap_or(1).max(1);
    let b_max = b
        .to_f64_vec()
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(1.0);
    let (mut cond, mut x_max) = (1.0f64, 0.0f64);
    for matrix in a.to_f64_vec().chunks(n * n) {
        let Some(inverse) = invert(matrix, n) else {
            return unjudged;
        };
        let norm = |m: &[f64]| {
            m.chunks(n)
                .map(|row| row.iter().map(|v| v.abs()).sum::<f64>())
                .fold(0.0f64, f64::max)
        };
        let inverse_norm = norm(&inverse);
        cond = cond.max(norm(matrix) * inverse_norm);
        x_max = x_max.max(inverse_norm * b_max);
    }
    let error = 16.0 * n as f64 * x.u * cond;
    Bound::Within {
        rel: error,
        abs: error * x_max + x.tiny,
        growth: cond * x_max,
    }
}

/// The inverse of the row-major `n x n` `matrix` (the solve of `matrix · X = I`, by the CPU
/// kernel's LU with partial pivoting in float64), or `None` when it is singular or not
/// finite.
fn invert(matrix: &[f64], n: usize) -> Option<Vec<f64>> {
    let identity: Vec<f64> = (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect();
    let mut inverse = vec![0.0; n * n];
    let mut work = vec![0.0; 2 * n * n];
    crate::cpu::kernels::linalg::solve(1, n, n, matrix, &identity, &mut inverse, &mut work).ok()?;
    Some(inverse)
}

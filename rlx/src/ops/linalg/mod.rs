//! Matrix products (plain, with an epilogue, quantized) and linear solves.

mod grad;
mod infer;
mod reference;
mod sample;

use super::array::{Array, Out};
use super::sample::{Sampled, Sampler};
use super::tolerance::{Bound, Operands};
use super::{Primitive, ReferenceError};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, Op, TensorType};

/// Batched matrix product `[.., M, K] x [.., K, N] -> [.., M, N]`; batch dims broadcast.
/// Operands: `a`, `b` (float, one dtype). A transpose flag means that operand is stored
/// with its last two axes swapped, so no transposed copy is needed.
#[derive(Clone, Debug, PartialEq)]
pub struct MatMul {
    /// `a` is stored as `[.., K, M]`.
    pub transpose_a: bool,
    /// `b` is stored as `[.., N, K]` (PyTorch `Linear` weights).
    pub transpose_b: bool,
}

/// `x · dequant(w)ᵀ` with group-wise affine dequantization
/// `w = scale * q + bias` per `group_size` consecutive inputs. Operands: `x` `[.., K]`
/// (float), `w` `[N, K*bits/8]` (`u8`, little-endian packing: for 4 bits the low nibble
/// is the first element), `scales` and `biases` `[N, K/group_size]` in the dtype of `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedMatMul {
    /// 4 or 8.
    pub bits: u8,
    /// Inputs sharing one scale and bias: 32, 64 or 128.
    pub group_size: usize,
}

/// Solves `a x = b` for square `a`. Operands: `a` `[.., N, N]`, `b` `[.., N, K]` (float,
/// same batch dims). See [`Op::Solve`].
pub(crate) struct Solve;

/// `transpose_a` and `transpose_b` as printed.
fn transposes(out: &mut Vec<String>, transpose_a: bool, transpose_b: bool) {
    if transpose_a {
        out.push("transpose_a".into());
    }
    if transpose_b {
        out.push("transpose_b".into());
    }
}

impl Primitive for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        transposes(out, self.transpose_a, self.transpose_b);
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::MatMul(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::matmul(self.transpose_a, self.transpose_b, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::matmul(e, x[0], x[1], self.transpose_a, self.transpose_b, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let (abs, growth) = product_bound(x, self.transpose_a);
        Bound::Within {
            rel: 2.0 * x.u,
            abs,
            growth,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::matmul(
            self.transpose_a,
            self.transpose_b,
            x,
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::matmul(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for QuantizedMatMul {
    fn name(&self) -> &'static str {
        "quantized_matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!(
            "bits={}, group_size={}",
            self.bits, self.group_size
        ));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::QuantizedMatMul(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::quantized_matmul(self.bits, self.group_size, inputs)
    }

    /// Quantized weights (packed integers, their scales and offsets) are not trained; the
    /// activations' gradient needs a dequantizing op the IR does not have yet.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::NotYet, Grad::None, Grad::None, Grad::None])
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // A sum over `k` products of an activation and a dequantized weight
        // `scale * q + bias`, with `q` below `2^bits`.
        let k = x.dims(0).last().copied().unwrap_or(1).max(1) as f64;
        let weight = x.largest(2) * f64::from((1u32 << self.bits) - 1) + x.largest(3);
        let terms = k * x.largest(0).max(1.0) * weight.max(1.0);
        Bound::Within {
            rel: 2.0 * x.u,
            abs: 4.0 * x.u * k * terms + x.tiny,
            growth: terms,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::quantized_matmul(
            self.bits,
            self.group_size,
            x,
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::quantized_matmul(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Solve {
    fn name(&self) -> &'static str {
        "solve"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Solve
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::solve(inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::solve(e, x[0], x[1], y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        solve_bound(x)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reference::solve(x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        sample::solve(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

/// A product over `k` terms of two operands up to `scale`.
fn product_bound(x: &Operands<'_>, transpose_a: bool) -> (f64, f64) {
    let a = x.dims(0);
    let k = if transpose_a && a.len() >= 2 {
        a[a.len() - 2]
    } else {
        a.last().copied().unwrap_or(1)
    }
    .max(1) as f64;
    let abs = 2.0 * x.u * k * k * x.scale * x.scale + x.tiny;
    (abs, k * x.scale * x.scale)
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

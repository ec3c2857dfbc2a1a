//! How far a backend's value may be from the float64 value of the same op on the same
//! operands.
//!
//! The bound is `rel * |want| + abs`, with `u` the unit roundoff of the output dtype (of
//! float32 for float64 outputs: MLX evaluates transcendentals, norms and attention at f32
//! precision even for f64 data):
//! - ops that only move or select values, compare, or cast to an integer: exact;
//! - one rounding (a cast to a float, `add`, `sub`, `mul`, `div`): `rel = 2u`;
//! - transcendentals and `pow`: `rel = 64u`, plus `64u * scale` absolute (sin of a large
//!   argument); `scale` is the largest operand magnitude (at least 1);
//! - a sum of `n` terms: `2u * n * (n * scale)` (the classic `n u sum|x|` bound, with
//!   `sum|x| <= n * scale`); a mean divides it by `n`; a product `rel = 4 n u`; a matmul
//!   over `k` the same with `k * scale^2`; softmax `64u * n * (1 + scale)`;
//! - layer and RMS norm: the sum bound times the row's amplification
//!   `1 / sqrt(var + eps)` and the weight's scale;
//! - attention: the softmax bound over the keys with scores up to `d * scale^2 * |factor|`,
//!   times the values' scale; a conv like a matmul over `C/groups * kernel`; rope `8u`;
//!   scatter-add a sum of its updates; average pooling a mean, max pooling exact.
//! - solve: `16 n u cond(a)` relative to the solution's bound `|a⁻¹| |b|` (a singular
//!   matrix is unjudged); a quantized matmul like a matmul over the dequantized weights;
//!   a fused elementwise chain a transcendental's bound per step.
//!
//! The match over ops has no catch-all: a new op states its tolerance here.
//!
//! Every bound also allows a few smallest normal numbers absolute (flushed subnormals). A
//! node is *unjudged* (no numeric verdict) when an operand is infinite or NaN, or when its
//! growth factor nears the dtype's range; NaN must still match NaN whenever it is judged.

use rlx::ir::{
    Attention, Cumsum, FusedElementwise, FusedMatMul, LayerNorm, MatMul, Pool, QuantizedMatMul,
    Reduce, RmsNorm, Rope, Softmax,
};
use rlx::ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};
use rlx::tensor::HostTensor;

/// A verdict on one element.
pub(crate) enum Judgement {
    Agrees,
    Unjudged,
    Differs,
}

/// The tolerance of one node.
pub(crate) struct Bound {
    exact: bool,
    rel: f64,
    abs: f64,
    /// The largest finite value of the output dtype.
    max: f64,
    judged: bool,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.exact {
            write!(f, "must be exact")
        } else {
            write!(f, "bound {:.3e} * |want| + {:.3e}", self.rel, self.abs)
        }
    }
}

impl Bound {
    pub(crate) fn accepts(&self, want: f64, have: f64) -> Judgement {
        let verdict = |ok: bool| match (ok, self.judged) {
            (true, _) => Judgement::Agrees,
            (false, true) => Judgement::Differs,
            (false, false) => Judgement::Unjudged,
        };
        if want.is_nan() || have.is_nan() {
            return verdict(want.is_nan() && have.is_nan());
        }
        if want == have {
            return Judgement::Agrees;
        }
        if self.exact {
            return Judgement::Differs;
        }
        // Past the dtype's range the backend rounds to infinity where float64 does not.
        if want.abs() >= 0.5 * self.max {
            let same_side = have.signum() == want.signum() && have.abs() >= 0.25 * self.max;
            return verdict(same_side);
        }
        if !have.is_finite() {
            return verdict(false);
        }
        verdict((want - have).abs() <= self.rel * want.abs() + self.abs)
    }
}

/// The largest finite value an op's result reliably has: for float64 that of float32,
/// since MLX evaluates transcendentals of f64 data in f32 (documented, ARCHITECTURE).
fn largest(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 65504.0,
        DType::BF16 => 3.38e38,
        _ => f32::MAX as f64,
    }
}

fn smallest_normal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 6.104e-5,
        DType::BF16 => 1.18e-38,
        DType::F32 => f32::MIN_POSITIVE as f64,
        _ => f64::MIN_POSITIVE,
    }
}

fn unit(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

/// The tolerance of `op` producing `out` from the (float64-widened) `operands`.
pub(crate) fn of(op: &Op, operands: &[HostTensor], out: DType) -> Bound {
    let max = largest(out);
    let exact = Bound {
        exact: true,
        rel: 0.0,
        abs: 0.0,
        max,
        judged: true,
    };
    if !out.is_float() {
        return exact;
    }
    // One pass over the float operands: whether all are finite, and the largest finite
    // magnitude (at least 1).
    let (finite, scale) = operands
        .iter()
        .filter(|t| t.dtype().is_float())
        .flat_map(|t| t.to_f64_vec())
        .fold((true, 1.0f64), |(finite, scale), v| {
            if v.is_finite() {
                (finite, scale.max(v.abs()))
            } else {
                (false, scale)
            }
        });
    let u = unit(out);
    let tiny = 4.0 * smallest_normal(out);
    let dims = |i: usize| {
        operands
            .get(i)
            .map(|t| t.shape().to_vec())
            .unwrap_or_default()
    };
    // (rel, abs, growth): growth is how large intermediate values may get.
    let (rel, abs, growth) = match op {
        Op::Cast(_) => (u, tiny, scale),
        Op::Unary(kind) => match kind {
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Relu
            | UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round => return exact,
            _ => (64.0 * u, 64.0 * u * scale + tiny, scale),
        },
        Op::Binary(kind) => match kind {
            BinaryOp::Max | BinaryOp::Min => return exact,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                (2.0 * u, tiny, scale * scale)
            }
            BinaryOp::Rem => (2.0 * u, 4.0 * u * scale + tiny, scale),
            BinaryOp::Pow => (64.0 * u, 64.0 * u + tiny, scale),
        },
        Op::Reduce(Reduce { op, axes, .. }) => {
            let x = dims(0);
            let n = axes
                .iter()
                .map(|&a| x.get(a).copied().unwrap_or(1))
                .product::<usize>()
                .max(1) as f64;
            match op {
                ReduceOp::Max | ReduceOp::Min => return exact,
                ReduceOp::Sum => (2.0 * u, 2.0 * u * n * n * scale + tiny, n * scale),
                ReduceOp::Mean => (2.0 * u, 2.0 * u * n * scale + tiny, n * scale),
                ReduceOp::Prod => (4.0 * u * n, tiny, scale.powf(n)),
            }
        }
        Op::Cumsum(Cumsum { axis, .. }) => {
            let n = dims(0).get(*axis).copied().unwrap_or(1).max(1) as f64;
            (2.0 * u, 2.0 * u * n * n * scale + tiny, n * scale)
        }
        Op::Softmax(Softmax { axis, .. }) => {
            let n = dims(0).get(*axis).copied().unwrap_or(1).max(1) as f64;
            (4.0 * u, 64.0 * u * n * (1.0 + scale) + tiny, scale)
        }
        Op::ConvTranspose(_) => {
            // Each output sums at most `C/groups * kernel` products, as a conv does.
            let w = dims(1);
            let k = w.iter().skip(1).product::<usize>().max(1) as f64 * w[0].max(1) as f64;
            let abs = 2.0 * u * k * (k * scale * scale + scale) + tiny;
            (2.0 * u, abs, k * scale * scale)
        }
        Op::Upsample(_) => (4.0 * u, 4.0 * u * scale + tiny, scale),
        Op::MatMul(MatMul { transpose_a, .. })
        | Op::FusedMatMul(FusedMatMul { transpose_a, .. }) => {
            let a = dims(0);
            let k = if *transpose_a && a.len() >= 2 {
                a[a.len() - 2]
            } else {
                a.last().copied().unwrap_or(1)
            }
            .max(1) as f64;
            let product = 2.0 * u * k * k * scale * scale + tiny;
            // A fused epilogue (bias, activation, residual) adds a transcendental's error.
            let (rel, abs) = match op {
                Op::FusedMatMul(_) => (64.0 * u, product + 64.0 * u * scale),
                _ => (2.0 * u, product),
            };
            (rel, abs, k * scale * scale)
        }
        Op::Attention(Attention { scale: factor, .. }) => {
            // Scores of up to `d * scale^2 * |factor|`, probabilities over `t` keys, then a
            // weighted sum of values.
            let (q, k) = (dims(0), dims(1));
            let d = q.last().copied().unwrap_or(1).max(1) as f64;
            let t = k.get(k.len().wrapping_sub(2)).copied().unwrap_or(1).max(1) as f64;
            let scores = factor.abs() * d * scale * scale;
            let abs = 64.0 * u * t * (1.0 + scores) * scale + tiny;
            (4.0 * u, abs, scores.max(t * scale))
        }
        Op::Rope(Rope { scale: factor, .. }) => {
            // Angles up to `position * |factor|` carry an f32 rounding each (MLX computes
            // them in f32), which sin and cos turn into absolute errors.
            let x = dims(0);
            let rows = x.get(x.len().wrapping_sub(2)).copied().unwrap_or(1) as f64;
            let offset = operands.get(1).map_or(0.0, |o| {
                o.to_f64_vec().first().copied().unwrap_or(0.0).abs()
            });
            let angle = (rows + offset) * factor.abs().max(1.0);
            (8.0 * u, 16.0 * u * scale * (1.0 + angle) + tiny, scale)
        }
        Op::ScatterAdd(_) => {
            let n = dims(2).iter().product::<usize>().max(1) as f64;
            (2.0 * u, 2.0 * u * n * scale + tiny, n * scale)
        }
        Op::Conv(_) => {
            let w = dims(1);
            let k = w.iter().skip(1).product::<usize>().max(1) as f64;
            let abs = 2.0 * u * k * (k * scale * scale + scale) + tiny;
            (2.0 * u, abs, k * scale * scale)
        }
        Op::Pool(Pool { kind, kernel, .. }) => match kind {
            rlx::ir::PoolKind::Max => return exact,
            rlx::ir::PoolKind::Avg => {
                let n = kernel.iter().product::<usize>().max(1) as f64;
                (2.0 * u, 2.0 * u * n * scale + tiny, n * scale)
            }
        },
        Op::LayerNorm(LayerNorm {
            eps, has_weight, ..
        }) => norm_bound(operands, *eps, *has_weight, true, u, scale, tiny),
        Op::RmsNorm(RmsNorm { eps, has_weight }) => {
            norm_bound(operands, *eps, *has_weight, false, u, scale, tiny)
        }
        Op::Solve => solve_bound(operands, u, tiny),
        Op::QuantizedMatMul(QuantizedMatMul { bits, .. }) => {
            // A sum over `k` products of an activation and a dequantized weight
            // `scale * q + bias`, with `q` below `2^bits`.
            let k = dims(0).last().copied().unwrap_or(1).max(1) as f64;
            let largest = |i: usize| {
                operands.get(i).map_or(0.0, |t| {
                    t.to_f64_vec().iter().fold(0.0f64, |m, v| m.max(v.abs()))
                })
            };
            let weight = largest(2) * f64::from((1u32 << bits) - 1) + largest(3);
            let terms = k * largest(0).max(1.0) * weight.max(1.0);
            (2.0 * u, 4.0 * u * k * terms + tiny, terms)
        }
        Op::FusedElementwise(FusedElementwise { steps }) => {
            // Each step may be a transcendental of the last one's result.
            let n = steps.len() as f64;
            (
                64.0 * u * n,
                64.0 * u * n * scale + tiny,
                scale.powf(n.min(4.0)),
            )
        }
        // Ops that move, select or compare values, or produce indices: exact.
        Op::Input
        | Op::Param
        | Op::Constant(_)
        | Op::Compare(_)
        | Op::Where
        | Op::ArgReduce(_)
        | Op::StopGradient
        | Op::Reshape(_)
        | Op::Permute(_)
        | Op::Slice(_)
        | Op::Concat(_)
        | Op::Broadcast(_)
        | Op::Pad(_)
        | Op::Gather(_)
        | Op::TopK(_)
        | Op::Sort(_) => return exact,
        // A custom op's kernels are the user's; the random graphs make none, and one met
        // here must match its float64 run exactly.
        Op::Custom(_) => return exact,
    };
    Bound {
        exact: false,
        rel,
        abs,
        max,
        judged: finite && growth.is_finite() && growth < 1e-3 * max,
    }
}

/// Layer norm (`centered`) or RMS norm over the last axis.
fn norm_bound(
    operands: &[HostTensor],
    eps: f64,
    has_weight: bool,
    centered: bool,
    u: f64,
    scale: f64,
    tiny: f64,
) -> (f64, f64, f64) {
    let x = &operands[0];
    let n = x.shape().last().copied().unwrap_or(1).max(1);
    let values = x.to_f64_vec();
    let mut amplification = 0.0f64;
    for row in values.chunks(n) {
        let mean = if centered {
            row.iter().sum::<f64>() / n as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        amplification = amplification.max(1.0 / (var + eps).sqrt());
    }
    let weight = if has_weight {
        operands[1]
            .to_f64_vec()
            .iter()
            .fold(1.0f64, |m, v| m.max(v.abs()))
    } else {
        1.0
    };
    let n = n as f64;
    let abs = 32.0 * u * n * scale * amplification * weight + 4.0 * u * scale + tiny;
    (4.0 * u, abs, n * scale * amplification * weight)
}

/// A batched solve `a x = b`: LU with partial pivoting is backward stable, so the forward
/// error is about `n u cond(a) |x|`. `cond` is the infinity-norm condition number,
/// computed from an inverse in float64, and `|x|` is bounded by `|a⁻¹|∞ |b|max`. A
/// singular or non-finite matrix leaves the node unjudged (infinite growth).
fn solve_bound(operands: &[HostTensor], u: f64, tiny: f64) -> (f64, f64, f64) {
    let (a, b) = (&operands[0], &operands[1]);
    let n = a.shape().last().copied().unwrap_or(1).max(1);
    let b_max = b
        .to_f64_vec()
        .iter()
        .fold(0.0f64, |m, v| m.max(v.abs()))
        .max(1.0);
    let (mut cond, mut x_max) = (1.0f64, 0.0f64);
    for matrix in a.to_f64_vec().chunks(n * n) {
        let Some(inverse) = invert(matrix, n) else {
            return (0.0, 0.0, f64::INFINITY);
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
    let error = 16.0 * n as f64 * u * cond;
    (error, error * x_max + tiny, cond * x_max)
}

/// The inverse of the row-major `n x n` `matrix` by Gauss-Jordan elimination with partial
/// pivoting in float64, or `None` when a pivot is zero or not finite.
fn invert(matrix: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut a = matrix.to_vec();
    let mut inv: Vec<f64> = (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect();
    for col in 0..n {
        let pivot =
            (col..n).max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))?;
        let p = a[pivot * n + col];
        if p == 0.0 || !p.is_finite() {
            return None;
        }
        for j in 0..n {
            a.swap(col * n + j, pivot * n + j);
            inv.swap(col * n + j, pivot * n + j);
        }
        for j in 0..n {
            a[col * n + j] /= p;
            inv[col * n + j] /= p;
        }
        for row in (0..n).filter(|&r| r != col) {
            let f = a[row * n + col];
            for j in 0..n {
                a[row * n + j] -= f * a[col * n + j];
                inv[row * n + j] -= f * inv[col * n + j];
            }
        }
    }
    Some(inv)
}

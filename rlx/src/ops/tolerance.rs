//! How far a backend's value of an op may be from the float64 value of the same op on the
//! same operands: each op states its bound ([`Primitive::tolerance`](super::Primitive)),
//! and [`Op::tolerance`] turns it into a [`Tolerance`] that judges values.
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
//!   scatter-add a sum of its updates; average pooling a mean, max pooling exact;
//! - a sampled token: exact, unjudged when a threshold or the draw's point lies within
//!   rounding of a boundary.
//! - solve: `16 n u cond(a)` relative to the solution's bound `|a⁻¹| |b|` (a singular
//!   matrix is unjudged); a quantized matmul like a matmul over the dequantized weights;
//!   a fused elementwise chain a transcendental's bound per step.
//!
//! `Primitive::tolerance` has no default: a new op states its bound with its other rules.
//!
//! Every bound also allows a few smallest normal numbers absolute (flushed subnormals). A
//! node is *unjudged* (no numeric verdict) when an operand is infinite or NaN, when its
//! growth factor nears the dtype's range, or when an integer operand is past 2^53 (where
//! float64 no longer holds every integer); NaN must still match NaN whenever it is judged.

use crate::ir::{DType, Op};
use crate::tensor::HostTensor;

/// A verdict on one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Within the bound.
    Agrees,
    /// Outside it, but the bound does not apply (non-finite operands, growth near the
    /// dtype's range): no verdict.
    Unjudged,
    /// Outside the bound.
    Differs,
}

/// How far a backend's value of one op on given operands may be from the float64 value of
/// the same op on the same operands (see [`Op::tolerance`]).
///
/// ```
/// use rlx::ir::{BinaryOp, DType, Judgement, Op};
/// use rlx::tensor::HostTensor;
/// let a = HostTensor::from_vec(vec![1.0f64, 2.0], [2])?;
/// let add = Op::Binary(BinaryOp::Add).tolerance(&[a.clone(), a], DType::F32);
/// assert_eq!(add.accepts(3.0, 3.0 + 1e-7), Judgement::Agrees);
/// assert_eq!(add.accepts(3.0, 3.1), Judgement::Differs);
/// # Ok::<(), rlx::tensor::TensorError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Tolerance {
    exact: bool,
    rel: f64,
    abs: f64,
    /// The largest finite value of the output dtype.
    max: f64,
    judged: bool,
}

impl std::fmt::Display for Tolerance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.exact {
            write!(f, "must be exact")
        } else {
            write!(f, "bound {:.3e} * |want| + {:.3e}", self.rel, self.abs)
        }
    }
}

impl Tolerance {
    /// Whether `have` (a backend's value) is close enough to `want` (float64's). NaN must
    /// meet NaN whenever the value is judged.
    pub fn accepts(&self, want: f64, have: f64) -> Judgement {
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
            return verdict(false);
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

/// One op's bound, before the output's range decides whether it is judged.
pub(crate) enum Bound {
    /// The value must be exact.
    Exact,
    /// Within `rel * |want| + abs`; `growth` is how large intermediate values may get.
    Within { rel: f64, abs: f64, growth: f64 },
    /// These operands leave the value to rounding (a draw at a boundary): no verdict.
    Unjudged,
}

/// What an op's bound is computed from: the operands (widened to float64), the unit
/// roundoff `u` of the output dtype, a few of its smallest normals (`tiny`, for flushed
/// subnormals) and `scale`, the largest finite float operand magnitude (at least 1).
pub(crate) struct Operands<'a> {
    pub values: &'a [HostTensor],
    pub u: f64,
    pub tiny: f64,
    pub scale: f64,
}

impl Operands<'_> {
    /// The dims of operand `i` (empty when there is none).
    pub fn dims(&self, i: usize) -> Vec<usize> {
        self.values
            .get(i)
            .map(|t| t.shape().to_vec())
            .unwrap_or_default()
    }

    /// The length of operand 0's `axis` (at least 1).
    pub fn axis_len(&self, axis: usize) -> f64 {
        self.dims(0).get(axis).copied().unwrap_or(1).max(1) as f64
    }

    /// The largest magnitude of operand `i` (0 when there is none).
    pub fn largest(&self, i: usize) -> f64 {
        self.values.get(i).map_or(0.0, |t| {
            t.to_f64_vec().iter().fold(0.0f64, |m, v| m.max(v.abs()))
        })
    }

    /// A sum of `n` terms of up to `scale`: `2u` relative, `2u n (n scale)` absolute.
    pub fn sum(&self, n: f64) -> Bound {
        let (u, scale) = (self.u, self.scale);
        Bound::Within {
            rel: 2.0 * u,
            abs: 2.0 * u * n * n * scale + self.tiny,
            growth: n * scale,
        }
    }

    /// A transcendental function's bound (and pow's): `64u` relative and absolute.
    pub fn transcendental(&self) -> Bound {
        let (u, scale) = (self.u, self.scale);
        Bound::Within {
            rel: 64.0 * u,
            abs: 64.0 * u * scale + self.tiny,
            growth: scale,
        }
    }
}

/// The largest finite value an op's result reliably has: for float64 that of float32,
/// since MLX evaluates transcendentals of f64 data in f32.
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

pub(crate) fn unit(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

/// Integers below this magnitude are exact in float64 (2^53).
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;

impl Op {
    /// How far a backend's value of this op on `operands` (as float64) may be from the
    /// float64 value of the same op on the same operands, for an output of dtype `out`:
    /// the bound the random-graph checks apply to each node.
    pub fn tolerance(&self, operands: &[HostTensor], out: DType) -> Tolerance {
        let max = largest(out);
        let exact = Tolerance {
            exact: true,
            rel: 0.0,
            abs: 0.0,
            max,
            judged: true,
        };
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
        let inputs = Operands {
            values: operands,
            u: unit(out),
            tiny: 4.0 * smallest_normal(out),
            scale,
        };
        let bound = self.primitive().tolerance(&inputs);
        if !out.is_float() {
            // Integers past 2^53 have no float64 of their own, so the reference cannot
            // say where wrapping arithmetic on them lands.
            let representable = operands
                .iter()
                .filter(|t| !t.dtype().is_float())
                .flat_map(|t| t.to_f64_vec())
                .all(|v| v.abs() < EXACT_INTEGERS);
            return Tolerance {
                judged: representable && !matches!(bound, Bound::Unjudged),
                ..exact
            };
        }
        match bound {
            Bound::Unjudged => Tolerance {
                judged: false,
                ..exact
            },
            Bound::Exact => exact,
            Bound::Within { rel, abs, growth } => Tolerance {
                exact: false,
                rel,
                abs,
                max,
                judged: finite && growth.is_finite() && growth < 1e-3 * max,
            },
        }
    }
}

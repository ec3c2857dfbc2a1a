//! Unary math, one rule for every kind of [`UnaryOp`](crate::ir::UnaryOp).

use std::f64::consts::{FRAC_2_SQRT_PI, PI, SQRT_2};

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{CompareOp, InferError, NodeId, Op, TensorType, UnaryOp};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, require_domain};
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

impl Primitive for UnaryOp {
    fn name(&self) -> &'static str {
        UnaryOp::name(*self)
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Unary(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        unary_type(*self, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        unary_vjp(e, *self, x[0], y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        match self {
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Relu
            | UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round => Bound::Exact,
            _ => x.transcendental(),
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(unary_reference(*self, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_unary(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn unary_type(kind: UnaryOp, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_domain(inputs, 0, kind.domain())?;
    Ok(inputs[0].clone())
}

/// `d/dx` of `kind` times `g`, where `y = kind(x)`.
fn unary_vjp(
    e: &mut Emitter<'_>,
    kind: UnaryOp,
    x: NodeId,
    y: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let dtype = e.dtype(x);
    let grad = match kind {
        UnaryOp::Neg => e.neg(g)?,
        UnaryOp::Abs => {
            let sign = e.unary(UnaryOp::Sign, x)?;
            e.mul(g, sign)?
        }
        UnaryOp::Exp => e.mul(g, y)?,
        UnaryOp::Log => e.div(g, x)?,
        UnaryOp::Sqrt => {
            let twice = e.scale(y, 2.0)?;
            e.div(g, twice)?
        }
        UnaryOp::Rsqrt => {
            // d/dx x^-1/2 = -y³/2
            let y2 = e.mul(y, y)?;
            let y3 = e.mul(y2, y)?;
            let d = e.scale(y3, -0.5)?;
            e.mul(g, d)?
        }
        UnaryOp::Recip => {
            let y2 = e.mul(y, y)?;
            let d = e.neg(y2)?;
            e.mul(g, d)?
        }
        UnaryOp::Sin => {
            let d = e.unary(UnaryOp::Cos, x)?;
            e.mul(g, d)?
        }
        UnaryOp::Cos => {
            let sin = e.unary(UnaryOp::Sin, x)?;
            let d = e.neg(sin)?;
            e.mul(g, d)?
        }
        UnaryOp::Tanh => {
            let y2 = e.mul(y, y)?;
            let one = e.scalar(1.0, dtype);
            let d = e.sub(one, y2)?;
            e.mul(g, d)?
        }
        UnaryOp::Sigmoid => {
            let one = e.scalar(1.0, dtype);
            let rest = e.sub(one, y)?;
            let d = e.mul(y, rest)?;
            e.mul(g, d)?
        }
        UnaryOp::Relu => {
            let zero = e.scalar(0.0, dtype);
            let positive = e.op(Op::Compare(CompareOp::Gt), &[x, zero])?;
            e.keep_where(positive, g)?
        }
        UnaryOp::Gelu => {
            // Φ(x) + x·φ(x)
            let scaled = e.scale(x, 1.0 / SQRT_2)?;
            let erf = e.unary(UnaryOp::Erf, scaled)?;
            let cdf = e.shift(erf, 1.0)?;
            let cdf = e.scale(cdf, 0.5)?;
            let x2 = e.mul(x, x)?;
            let exponent = e.scale(x2, -0.5)?;
            let bell = e.unary(UnaryOp::Exp, exponent)?;
            let pdf = e.scale(bell, 1.0 / (2.0 * PI).sqrt())?;
            let x_pdf = e.mul(x, pdf)?;
            let d = e.add(cdf, x_pdf)?;
            e.mul(g, d)?
        }
        UnaryOp::GeluTanh => {
            // y = x/2·(1 + tanh(u)), u = c·(x + a·x³):
            // dy/dx = (1 + t)/2 + x/2·(1 − t²)·c·(1 + 3a·x²)
            let (c, a) = ((2.0 / PI).sqrt(), 0.044715);
            let x2 = e.mul(x, x)?;
            let x3 = e.mul(x2, x)?;
            let ax3 = e.scale(x3, a)?;
            let inner = e.add(x, ax3)?;
            let u = e.scale(inner, c)?;
            let t = e.unary(UnaryOp::Tanh, u)?;
            let one_t = e.shift(t, 1.0)?;
            let left = e.scale(one_t, 0.5)?;
            let t2 = e.mul(t, t)?;
            let one = e.scalar(1.0, dtype);
            let sech2 = e.sub(one, t2)?;
            let slope = e.scale(x2, 3.0 * a)?;
            let slope = e.shift(slope, 1.0)?;
            let du = e.scale(slope, c * 0.5)?;
            let right = e.mul(x, sech2)?;
            let right = e.mul(right, du)?;
            let d = e.add(left, right)?;
            e.mul(g, d)?
        }
        UnaryOp::Silu => {
            // s·(1 + x·(1 − s))
            let s = e.unary(UnaryOp::Sigmoid, x)?;
            let one = e.scalar(1.0, dtype);
            let rest = e.sub(one, s)?;
            let xr = e.mul(x, rest)?;
            let inner = e.shift(xr, 1.0)?;
            let d = e.mul(s, inner)?;
            e.mul(g, d)?
        }
        UnaryOp::Erf => {
            let x2 = e.mul(x, x)?;
            let exponent = e.neg(x2)?;
            let bell = e.unary(UnaryOp::Exp, exponent)?;
            let d = e.scale(bell, FRAC_2_SQRT_PI)?;
            e.mul(g, d)?
        }
        // Piecewise constant: zero almost everywhere (PyTorch's convention).
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Sign => e.zeros_like(x)?,
        UnaryOp::Softplus => {
            let d = e.unary(UnaryOp::Sigmoid, x)?;
            e.mul(g, d)?
        }
    };
    Ok(vec![Grad::Some(grad)])
}

fn unary_reference(kind: UnaryOp, x: &[Array], out: &Out) -> Array {
    out.holding(x[0].data.iter().map(|v| unary_value(kind, *v)).collect())
}

fn random_unary(s: &mut dyn Sampler) -> Sampled {
    let kind = pick(s, &UnaryOp::ALL);
    let x = s.operand(&|t| kind.domain().admits(t.dtype))?;
    Some((Op::Unary(kind), vec![x]))
}

/// `kind(x)` of one value; integer results are wrapped by the caller's `store`.
fn unary_value(kind: UnaryOp, x: f64) -> f64 {
    use UnaryOp as U;
    match kind {
        U::Neg => -x,
        U::Abs => x.abs(),
        U::Exp => x.exp(),
        U::Log => x.ln(),
        U::Sqrt => x.sqrt(),
        U::Rsqrt => 1.0 / x.sqrt(),
        U::Recip => 1.0 / x,
        U::Sin => x.sin(),
        U::Cos => x.cos(),
        U::Tanh => x.tanh(),
        U::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        // NaN gives 0, as `max(NaN, 0)` picks the number.
        U::Relu => x.max(0.0),
        U::Gelu => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        U::GeluTanh => {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044_715 * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }
        U::Silu => x / (1.0 + (-x).exp()),
        U::Erf => libm::erf(x),
        U::Floor => x.floor(),
        U::Ceil => x.ceil(),
        U::Round => x.round_ties_even(),
        U::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x * 0.0
            }
        }
        // log(1 + e^x) without overflow for large x.
        U::Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
    }
}

//! Unary and binary math, `where` and casts.

use crate::ir::Cast;
use std::f64::consts::{FRAC_2_SQRT_PI, PI, SQRT_2};

use crate::autodiff::Emitter;
use crate::autodiff::Grad;
use crate::autodiff::GradError;
use crate::ir::{BinaryOp, CompareOp, NodeId, Op, UnaryOp};

/// `d/dx` of `kind` times `g`, where `y = kind(x)`.
pub(crate) fn unary(
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

/// The cotangents of `a` and `b` for `y = a kind b`, summed back over broadcasting.
pub(crate) fn binary(
    e: &mut Emitter<'_>,
    kind: BinaryOp,
    a: NodeId,
    b: NodeId,
    y: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let dtype = e.dtype(y);
    let (ga, gb) = match kind {
        BinaryOp::Add => (g, g),
        BinaryOp::Sub => (g, e.neg(g)?),
        BinaryOp::Mul => (e.mul(g, b)?, e.mul(g, a)?),
        BinaryOp::Div => {
            let ga = e.div(g, b)?;
            let gy = e.mul(g, y)?;
            let gb = e.div(gy, b)?;
            (ga, e.neg(gb)?)
        }
        BinaryOp::Pow => {
            // d/da = b·a^(b−1); d/db = y·ln a, taken as 0 where a = 0 (PyTorch's choice).
            let b1 = e.shift(b, -1.0)?;
            let power = e.binary(BinaryOp::Pow, a, b1)?;
            let da = e.mul(b, power)?;
            let ga = e.mul(g, da)?;
            let ln = e.unary(UnaryOp::Log, a)?;
            let db = e.mul(y, ln)?;
            let zero = e.scalar(0.0, dtype);
            let at_zero = e.op(Op::Compare(CompareOp::Eq), &[a, zero])?;
            let db = e.op(Op::Where, &[at_zero, zero, db])?;
            (ga, e.mul(g, db)?)
        }
        BinaryOp::Max | BinaryOp::Min => {
            // The selected operand takes the gradient; ties split it evenly.
            let wins = if kind == BinaryOp::Max {
                CompareOp::Gt
            } else {
                CompareOp::Lt
            };
            let a_wins = e.op(Op::Compare(wins), &[a, b])?;
            let tie = e.op(Op::Compare(CompareOp::Eq), &[a, b])?;
            let one = e.op(Op::Cast(Cast { to: dtype }), &[a_wins])?;
            let half = e.op(Op::Cast(Cast { to: dtype }), &[tie])?;
            let half = e.scale(half, 0.5)?;
            let share = e.add(one, half)?;
            let ga = e.mul(g, share)?;
            let gb = e.sub(g, ga)?;
            (ga, gb)
        }
        BinaryOp::Rem => {
            // a − b·floor(a/b): d/da = 1, d/db = −floor(a/b).
            let q = e.div(a, b)?;
            let q = e.unary(UnaryOp::Floor, q)?;
            let gq = e.mul(g, q)?;
            (g, e.neg(gq)?)
        }
    };
    let ga = e.unbroadcast(ga, &e.shape(a))?;
    let gb = e.unbroadcast(gb, &e.shape(b))?;
    Ok(vec![Grad::Some(ga), Grad::Some(gb)])
}

/// `where(cond, a, b)`: the condition selects; each branch gets `g` where it was chosen.
pub(crate) fn select(e: &mut Emitter<'_>, x: &[NodeId], g: NodeId) -> Result<Vec<Grad>, GradError> {
    let (cond, a, b) = (x[0], x[1], x[2]);
    let zero = e.scalar(0.0, e.dtype(g));
    let ga = e.op(Op::Where, &[cond, g, zero])?;
    let gb = e.op(Op::Where, &[cond, zero, g])?;
    let ga = e.unbroadcast(ga, &e.shape(a))?;
    let gb = e.unbroadcast(gb, &e.shape(b))?;
    Ok(vec![Grad::Discrete, Grad::Some(ga), Grad::Some(gb)])
}

/// Casts between floats pass the gradient back in the operand's dtype; from an integer
/// or `bool` there is none.
pub(crate) fn cast(e: &mut Emitter<'_>, x: NodeId, g: NodeId) -> Result<Vec<Grad>, GradError> {
    let from = e.dtype(x);
    if !from.is_float() {
        return Ok(vec![Grad::None]);
    }
    let back = if from == e.dtype(g) {
        g
    } else {
        e.op(Op::Cast(Cast { to: from }), &[g])?
    };
    Ok(vec![Grad::Some(back)])
}

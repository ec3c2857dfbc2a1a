//! Binary math and comparisons with broadcasting: one rule for every kind of
//! [`BinaryOp`](crate::ir::BinaryOp) and of [`CompareOp`](crate::ir::CompareOp).

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{BinaryOp, Cast, CompareOp, DType, InferError, NodeId, Op, TensorType, UnaryOp};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, broadcast_shapes, require_domain, same_dtype};
use crate::ops::sample::{Sampled, Sampler, chance, partner, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

impl Primitive for BinaryOp {
    fn name(&self) -> &'static str {
        BinaryOp::name(*self)
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Binary(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        binary_type(*self, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        binary_vjp(e, *self, x[0], x[1], y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let (u, scale, tiny) = (x.u, x.scale, x.tiny);
        match self {
            BinaryOp::Max | BinaryOp::Min => Bound::Exact,
            // One rounding.
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => Bound::Within {
                rel: 2.0 * u,
                abs: tiny,
                growth: scale * scale,
            },
            BinaryOp::Rem => Bound::Within {
                rel: 2.0 * u,
                abs: 4.0 * u * scale + tiny,
                growth: scale,
            },
            BinaryOp::Pow => Bound::Within {
                rel: 64.0 * u,
                abs: 64.0 * u + tiny,
                growth: scale,
            },
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(binary_reference(*self, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_binary(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for CompareOp {
    fn name(&self) -> &'static str {
        CompareOp::name(*self)
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Compare(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        compare_type(*self, inputs)
    }

    /// Its result is `bool`: the driver gives its operands nothing before asking.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::None; x.len()])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(compare_reference(*self, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_compare(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn binary_type(kind: BinaryOp, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2")?;
    require_domain(inputs, 0, kind.domain())?;
    let shape = broadcast_pair(inputs)?;
    Ok(TensorType::new(inputs[0].dtype, shape))
}

fn compare_type(kind: CompareOp, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2")?;
    require_domain(inputs, 0, kind.domain())?;
    let shape = broadcast_pair(inputs)?;
    Ok(TensorType::new(DType::Bool, shape))
}

/// The cotangents of `a` and `b` for `y = a kind b`, summed back over broadcasting.
fn binary_vjp(
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

fn binary_reference(kind: BinaryOp, x: &[Array], out: &Out) -> Array {
    let dtype = x[0].dtype;
    out.fill(|i| binary_value(kind, dtype, x[0].at_broadcast(i), x[1].at_broadcast(i)))
}

fn compare_reference(kind: CompareOp, x: &[Array], out: &Out) -> Array {
    out.fill(|i| compare_value(kind, x[0].at_broadcast(i), x[1].at_broadcast(i)))
}

/// Either operand order, the partner maybe broadcast or a scalar.
fn random_binary(s: &mut dyn Sampler) -> Sampled {
    let kind = pick(s, &BinaryOp::ALL);
    let a = s.operand(&|t| kind.domain().admits(t.dtype))?;
    let b = partner(s, a)?;
    let operands = if chance(s, 0.5) {
        vec![a, b]
    } else {
        vec![b, a]
    };
    Some((Op::Binary(kind), operands))
}

fn random_compare(s: &mut dyn Sampler) -> Sampled {
    let kind = pick(s, &CompareOp::ALL);
    let a = s.operand(&|t| kind.domain().admits(t.dtype))?;
    let b = partner(s, a)?;
    Some((Op::Compare(kind), vec![a, b]))
}

fn broadcast_pair(inputs: &[TensorType]) -> Result<crate::ir::Shape, InferError> {
    same_dtype(inputs, 0, 1)?;
    broadcast_shapes(&inputs[0].shape, &inputs[1].shape)
}

/// `kind(a, b)` of one pair in `dtype`: floor division and remainder (0 when dividing by
/// zero) for integers, IEEE arithmetic for floats; NaN wins `max` and `min`.
fn binary_value(kind: BinaryOp, dtype: DType, a: f64, b: f64) -> f64 {
    let int = !dtype.is_float();
    // Integer sums and products wrap exactly as two's complement does, however far they
    // run past float64's integers.
    let wrapping = |f: fn(i64, i64) -> i64| f(a as i64, b as i64) as f64;
    match kind {
        BinaryOp::Add if int => wrapping(i64::wrapping_add),
        BinaryOp::Sub if int => wrapping(i64::wrapping_sub),
        BinaryOp::Mul if int => wrapping(i64::wrapping_mul),
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div if int => {
            if b == 0.0 {
                0.0
            } else {
                (a / b).floor()
            }
        }
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Max | BinaryOp::Min if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Rem if int && b == 0.0 => 0.0,
        BinaryOp::Rem if int => a - (a / b).floor() * b,
        BinaryOp::Rem if a.is_nan() || b.is_nan() || b == 0.0 || a.is_infinite() => f64::NAN,
        BinaryOp::Rem => {
            // Exact in float64: the remainder of the truncated quotient, moved to the
            // divisor's sign.
            let r = a % b;
            if r != 0.0 && (r < 0.0) != (b < 0.0) {
                r + b
            } else {
                r
            }
        }
    }
}

fn compare_value(kind: CompareOp, a: f64, b: f64) -> f64 {
    let holds = match kind {
        CompareOp::Eq => a == b,
        CompareOp::Ne => a != b,
        CompareOp::Lt => a < b,
        CompareOp::Le => a <= b,
        CompareOp::Gt => a > b,
        CompareOp::Ge => a >= b,
    };
    f64::from(u8::from(holds))
}

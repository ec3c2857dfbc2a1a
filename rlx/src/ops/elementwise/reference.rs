//! The float64 values of the elementwise ops.

use crate::ir::{BinaryOp, CompareOp, DType, UnaryOp};
use crate::ops::array::{Array, Out};

/// `kind(x)` of one value; integer results are wrapped by the caller's `store`.
pub(crate) fn unary_value(kind: UnaryOp, x: f64) -> f64 {
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

/// `kind(a, b)` of one pair in `dtype`: floor division and remainder (0 when dividing by
/// zero) for integers, IEEE arithmetic for floats; NaN wins `max` and `min`.
pub(crate) fn binary_value(kind: BinaryOp, dtype: DType, a: f64, b: f64) -> f64 {
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

pub(super) fn unary(kind: UnaryOp, x: &[Array], out: &Out) -> Array {
    out.holding(x[0].data.iter().map(|v| unary_value(kind, *v)).collect())
}

pub(super) fn binary(kind: BinaryOp, x: &[Array], out: &Out) -> Array {
    let dtype = x[0].dtype;
    out.fill(|i| binary_value(kind, dtype, x[0].at_broadcast(i), x[1].at_broadcast(i)))
}

pub(super) fn compare(kind: CompareOp, x: &[Array], out: &Out) -> Array {
    out.fill(|i| compare_value(kind, x[0].at_broadcast(i), x[1].at_broadcast(i)))
}

pub(super) fn select(x: &[Array], out: &Out) -> Array {
    out.fill(|i| {
        if x[0].at_broadcast(i) != 0.0 {
            x[1].at_broadcast(i)
        } else {
            x[2].at_broadcast(i)
        }
    })
}

/// Rust `as`: floats keep their value (the rounding to a narrower float is the tolerance's
/// business), floats to integers truncate and saturate (NaN to 0), integers wrap, and
/// anything non-zero is `true`.
pub(super) fn cast(to: DType, x: &[Array], out: &Out) -> Array {
    let from_float = x[0].dtype.is_float();
    let convert = |v: f64| match to {
        DType::I64 if from_float => v as i64 as f64,
        DType::I32 if from_float => f64::from(v as i32),
        DType::I8 if from_float => f64::from(v as i8),
        DType::U8 if from_float => f64::from(v as u8),
        _ => v,
    };
    out.holding(x[0].data.iter().map(|v| convert(*v)).collect())
}

//! Unary, binary, comparison, `where` and cast kernels.

use super::layout::{Strided, for_each_chunk};
use super::numeric::{FloatStore, Int, Real};
use super::simd::vectorized;
use crate::cpu::fuse::{ElementwiseArg, ElementwiseStep};
use crate::ir::{BinaryOp, CompareOp, UnaryOp};

fn gelu_tanh<R: Real>(x: R) -> R {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    let c = R::from_f64(0.797_884_560_802_865_4);
    let k = R::from_f64(0.044_715);
    R::from_f64(0.5) * x * (R::ONE + (c * (x + k * x * x * x)).tanh())
}

fn sigmoid<R: Real>(x: R) -> R {
    R::ONE / (R::ONE + (-x).exp())
}

fn softplus<R: Real>(x: R) -> R {
    // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
    x.maximum(R::ZERO) + (-x.abs()).exp().ln_1p()
}

/// Where a unary kernel reads and writes.
pub(crate) enum Target<'a, T> {
    /// From `x` into `out` (split over workers when large).
    Copy { x: &'a [T], out: &'a mut [T] },
    /// In place, on the calling thread (a row of a fused epilogue).
    InPlace(&'a mut [T]),
}

/// `out = f(x)` elementwise. `f` is `Copy` so each worker's loop works on its own copy of
/// what `f` captured: values the compiler can keep in registers instead of re-reading
/// them through a pointer that might alias `out`, which would stop vectorization.
fn map_float<T: FloatStore>(target: Target<'_, T>, f: impl Fn(T::Acc) -> T::Acc + Copy + Sync) {
    match target {
        Target::Copy { x, out } => for_each_chunk(out, |start, block| {
            vectorized(move || {
                for (o, v) in block.iter_mut().zip(&x[start..]) {
                    *o = T::store(f(v.load()));
                }
            })
        }),
        Target::InPlace(values) => vectorized(move || {
            for v in values.iter_mut() {
                *v = T::store(f(v.load()));
            }
        }),
    }
}

/// `out = kind(x)` for float storage types.
pub(crate) fn unary_float<T: FloatStore>(kind: UnaryOp, x: &[T], out: &mut [T]) {
    unary_float_on(kind, Target::Copy { x, out });
}

/// `kind` applied elementwise to `target`, for float storage types: the one definition of
/// each float unary op on the CPU.
pub(crate) fn unary_float_on<T: FloatStore>(kind: UnaryOp, target: Target<'_, T>) {
    use UnaryOp as U;
    let half = <T::Acc as Real>::from_f64(0.5);
    let sqrt_half = <T::Acc as Real>::from_f64(std::f64::consts::FRAC_1_SQRT_2);
    let one = <T::Acc as Real>::ONE;
    let zero = <T::Acc as Real>::ZERO;
    match kind {
        U::Neg => map_float(target, move |v| -v),
        U::Abs => map_float(target, move |v| v.abs()),
        U::Exp => map_float(target, move |v| v.exp()),
        U::Log => map_float(target, move |v| v.ln()),
        U::Sqrt => map_float(target, move |v| v.sqrt()),
        U::Rsqrt => map_float(target, move |v| one / v.sqrt()),
        U::Recip => map_float(target, move |v| one / v),
        U::Sin => map_float(target, move |v| v.sin()),
        U::Cos => map_float(target, move |v| v.cos()),
        U::Tanh => map_float(target, move |v| v.tanh()),
        U::Sigmoid => map_float(target, sigmoid),
        U::Relu => map_float(target, move |v| if v > zero { v } else { zero }),
        U::Gelu => map_float(target, move |v| half * v * (one + (v * sqrt_half).erf())),
        U::GeluTanh => map_float(target, gelu_tanh),
        U::Silu => map_float(target, move |v| v * sigmoid(v)),
        U::Erf => map_float(target, move |v| v.erf()),
        U::Floor => map_float(target, move |v| v.floor()),
        U::Ceil => map_float(target, move |v| v.ceil()),
        U::Round => map_float(target, move |v| v.round_even()),
        U::Sign => map_float(target, move |v| {
            if v > zero {
                one
            } else if v < zero {
                -one
            } else {
                v // keeps 0, -0 and NaN
            }
        }),
        U::Softplus => map_float(target, softplus),
    }
}

fn map_int<T: Int>(x: &[T], out: &mut [T], f: impl Fn(T) -> T + Sync) {
    for_each_chunk(out, |start, block| {
        for (o, v) in block.iter_mut().zip(&x[start..]) {
            *o = f(*v);
        }
    });
}

/// `out = kind(x)` for integers: the kinds whose [`UnaryOp::domain`] admits them.
pub(crate) fn unary_int<T: Int>(kind: UnaryOp, x: &[T], out: &mut [T]) {
    use UnaryOp as U;
    match kind {
        U::Neg => map_int(x, out, T::neg),
        U::Abs => map_int(x, out, T::abs),
        U::Sign => map_int(x, out, T::sign),
        U::Relu => map_int(x, out, |v| v.max(T::ZERO)),
        U::Exp
        | U::Log
        | U::Sqrt
        | U::Rsqrt
        | U::Recip
        | U::Sin
        | U::Cos
        | U::Tanh
        | U::Sigmoid
        | U::Gelu
        | U::GeluTanh
        | U::Silu
        | U::Erf
        | U::Floor
        | U::Ceil
        | U::Round
        | U::Softplus => unreachable!("inference admits {} on floats only", kind.name()),
    }
}

/// `out = f(a, b)` over a broadcast layout.
fn zip2<A: Copy + Sync, O: Send>(
    layout: &Strided<2>,
    a: &[A],
    b: &[A],
    out: &mut [O],
    f: impl Fn(A, A) -> O + Sync,
) {
    layout.for_each_row(out, |row, [oa, ob], [sa, sb]| match (sa, sb) {
        (1, 1) => {
            for ((o, x), y) in row.iter_mut().zip(&a[oa..]).zip(&b[ob..]) {
                *o = f(*x, *y);
            }
        }
        (1, 0) => {
            let y = b[ob];
            for (o, x) in row.iter_mut().zip(&a[oa..]) {
                *o = f(*x, y);
            }
        }
        (0, 1) => {
            let x = a[oa];
            for (o, y) in row.iter_mut().zip(&b[ob..]) {
                *o = f(x, *y);
            }
        }
        _ => {
            for (i, o) in row.iter_mut().enumerate() {
                *o = f(a[oa + i * sa], b[ob + i * sb]);
            }
        }
    });
}

/// The one definition of each float binary op on the CPU: expands `$go!(f)` with `f` the
/// function of two accumulator values `kind` computes.
macro_rules! float_binary {
    ($kind:expr, $acc:ty, $go:ident) => {{
        use BinaryOp as B;
        match $kind {
            B::Add => $go!(|x: $acc, y: $acc| x + y),
            B::Sub => $go!(|x: $acc, y: $acc| x - y),
            B::Mul => $go!(|x: $acc, y: $acc| x * y),
            B::Div => $go!(|x: $acc, y: $acc| x / y),
            B::Pow => $go!(|x: $acc, y: $acc| x.powf(y)),
            B::Max => $go!(|x: $acc, y: $acc| x.maximum(y)),
            B::Min => $go!(|x: $acc, y: $acc| x.minimum(y)),
            B::Rem => $go!(|x: $acc, y: $acc| {
                // Floor modulo: the result takes the divisor's sign.
                let r = x - (x / y).floor() * y;
                if y.is_nan() || x.is_nan() { x / y } else { r }
            }),
        }
    }};
}

/// `out = kind(a, b)` for float storage types.
pub(crate) fn binary_float<T: FloatStore>(
    kind: BinaryOp,
    layout: &Strided<2>,
    a: &[T],
    b: &[T],
    out: &mut [T],
) {
    macro_rules! go {
        ($f:expr) => {{
            let f = $f;
            zip2(layout, a, b, out, |x: T, y: T| {
                T::store(f(x.load(), y.load()))
            })
        }};
    }
    float_binary!(kind, T::Acc, go)
}

/// Values per block of a fused elementwise kernel: every intermediate of a block stays in
/// L1.
const FUSED_BLOCK: usize = 128;

/// An operand of a fused elementwise kernel.
#[derive(Clone, Copy)]
pub(crate) enum FusedOperand<'a, T> {
    /// A tensor of the output's shape.
    Full(&'a [T]),
    /// One value for every element.
    Scalar(T),
    /// The output's own value, element by element (updated in place).
    Output,
}

/// `out` = the last of `steps`, evaluated block by block: each block's operands are loaded
/// into accumulator-type buffers, each step writes its own buffer with the ops' own
/// definitions (`unary_float_on`, `float_binary!`), and only the result is stored. At most
/// [`ElementwiseStep::MAX_VALUES`] operands plus steps (type inference refuses more; the
/// block buffers live on the stack).
pub(crate) fn fused_float<T: FloatStore>(
    steps: &[ElementwiseStep],
    operands: &[FusedOperand<'_, T>],
    out: &mut [T],
) where
    T::Acc: FloatStore<Acc = T::Acc>,
{
    assert!(
        !steps.is_empty() && operands.len() + steps.len() <= ElementwiseStep::MAX_VALUES,
        "fused elementwise kernel with {} operands and {} steps",
        operands.len(),
        steps.len()
    );
    let zero = <T::Acc as Real>::ZERO;
    for_each_chunk(out, |start, chunk| {
        let mut values = [[zero; FUSED_BLOCK]; ElementwiseStep::MAX_VALUES];
        let (loaded, computed) = values.split_at_mut(operands.len());
        for (buf, operand) in loaded.iter_mut().zip(operands) {
            if let FusedOperand::Scalar(v) = operand {
                buf.fill(v.load());
            }
        }
        for (b, block) in chunk.chunks_mut(FUSED_BLOCK).enumerate() {
            let at = start + b * FUSED_BLOCK;
            let n = block.len();
            for (buf, operand) in loaded.iter_mut().zip(operands) {
                let source = match operand {
                    FusedOperand::Full(x) => &x[at..at + n],
                    FusedOperand::Output => &*block,
                    FusedOperand::Scalar(_) => continue,
                };
                for (v, s) in buf[..n].iter_mut().zip(source) {
                    *v = s.load();
                }
            }
            for (i, step) in steps.iter().enumerate() {
                let (done, rest) = computed.split_at_mut(i);
                let dst = &mut rest[0][..n];
                let arg = |a: ElementwiseArg| -> &[T::Acc] {
                    match a {
                        ElementwiseArg::Operand(j) => &loaded[j][..n],
                        ElementwiseArg::Step(s) => &done[s][..n],
                    }
                };
                match *step {
                    ElementwiseStep::Unary(kind, x) => unary_float_on::<T::Acc>(
                        kind,
                        Target::Copy {
                            x: arg(x),
                            out: dst,
                        },
                    ),
                    ElementwiseStep::Binary(kind, x, y) => {
                        let (x, y) = (arg(x), arg(y));
                        macro_rules! go {
                            ($f:expr) => {{
                                let f = $f;
                                for ((o, a), b) in dst.iter_mut().zip(x).zip(y) {
                                    *o = f(*a, *b);
                                }
                            }};
                        }
                        float_binary!(kind, T::Acc, go)
                    }
                }
            }
            for (o, v) in block.iter_mut().zip(&computed[steps.len() - 1][..n]) {
                *o = T::store(*v);
            }
        }
    });
}

/// `out = kind(a, b)` for integers.
pub(crate) fn binary_int<T: Int>(
    kind: BinaryOp,
    layout: &Strided<2>,
    a: &[T],
    b: &[T],
    out: &mut [T],
) {
    use BinaryOp as B;
    match kind {
        B::Add => zip2(layout, a, b, out, T::add),
        B::Sub => zip2(layout, a, b, out, T::sub),
        B::Mul => zip2(layout, a, b, out, T::mul),
        B::Div => zip2(layout, a, b, out, T::floor_div),
        B::Max => zip2(layout, a, b, out, |x, y| x.max(y)),
        B::Min => zip2(layout, a, b, out, |x, y| x.min(y)),
        B::Rem => zip2(layout, a, b, out, T::floor_rem),
        B::Pow => unreachable!("inference admits pow on floats only"),
    }
}

/// `out = a <kind> b` as bool bytes, comparing values converted by `key`.
pub(crate) fn compare<A: Copy + Sync, K: PartialOrd>(
    kind: CompareOp,
    layout: &Strided<2>,
    a: &[A],
    b: &[A],
    out: &mut [u8],
    key: impl Fn(A) -> K + Sync,
) {
    use CompareOp as C;
    match kind {
        C::Eq => zip2(layout, a, b, out, |x, y| u8::from(key(x) == key(y))),
        C::Ne => zip2(layout, a, b, out, |x, y| u8::from(key(x) != key(y))),
        C::Lt => zip2(layout, a, b, out, |x, y| u8::from(key(x) < key(y))),
        C::Le => zip2(layout, a, b, out, |x, y| u8::from(key(x) <= key(y))),
        C::Gt => zip2(layout, a, b, out, |x, y| u8::from(key(x) > key(y))),
        C::Ge => zip2(layout, a, b, out, |x, y| u8::from(key(x) >= key(y))),
    }
}

/// `out = cond ? a : b`, for any element type of this size.
pub(crate) fn select<T: Copy + Send + Sync>(
    layout: &Strided<3>,
    cond: &[u8],
    a: &[T],
    b: &[T],
    out: &mut [T],
) {
    layout.for_each_row(out, |row, [oc, oa, ob], [sc, sa, sb]| {
        for (i, o) in row.iter_mut().enumerate() {
            *o = if cond[oc + i * sc] != 0 {
                a[oa + i * sa]
            } else {
                b[ob + i * sb]
            };
        }
    });
}

/// Converts elementwise with `f`.
pub(crate) fn convert<A: Copy + Sync, B: Send>(x: &[A], out: &mut [B], f: impl Fn(A) -> B + Sync) {
    for_each_chunk(out, |start, block| {
        for (o, v) in block.iter_mut().zip(&x[start..]) {
            *o = f(*v);
        }
    });
}

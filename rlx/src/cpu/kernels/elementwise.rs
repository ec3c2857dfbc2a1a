//! Unary, binary, comparison, `where` and cast kernels.

use super::layout::{Strided, for_each_chunk};
use super::numeric::{FloatStore, Int, Real};
use super::simd::{VectorKernel, vectorized};
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

/// The closure computing each float unary op, handed to `$go!`: the one definition of each
/// float unary op on the CPU, used by the standalone and the fused kernels.
macro_rules! float_unary {
    ($kind:expr, $acc:ty, $go:ident) => {{
        use UnaryOp as U;
        let half = <$acc as Real>::from_f64(0.5);
        let sqrt_half = <$acc as Real>::from_f64(std::f64::consts::FRAC_1_SQRT_2);
        let one = <$acc as Real>::ONE;
        let zero = <$acc as Real>::ZERO;
        match $kind {
            U::Neg => $go!(move |v: $acc| -v),
            U::Abs => $go!(move |v: $acc| v.abs()),
            U::Exp => $go!(move |v: $acc| v.exp()),
            U::Log => $go!(move |v: $acc| v.ln()),
            U::Sqrt => $go!(move |v: $acc| v.sqrt()),
            U::Rsqrt => $go!(move |v: $acc| one / v.sqrt()),
            U::Recip => $go!(move |v: $acc| one / v),
            U::Sin => $go!(move |v: $acc| v.sin()),
            U::Cos => $go!(move |v: $acc| v.cos()),
            U::Tanh => $go!(move |v: $acc| v.tanh()),
            U::Sigmoid => $go!(sigmoid::<$acc>),
            U::Relu => $go!(move |v: $acc| if v > zero { v } else { zero }),
            U::Gelu => $go!(move |v: $acc| half * v * (one + (v * sqrt_half).erf())),
            U::GeluTanh => $go!(gelu_tanh::<$acc>),
            U::Silu => $go!(move |v: $acc| v * sigmoid(v)),
            U::Erf => $go!(move |v: $acc| v.erf()),
            U::Floor => $go!(move |v: $acc| v.floor()),
            U::Ceil => $go!(move |v: $acc| v.ceil()),
            U::Round => $go!(move |v: $acc| v.round_even()),
            U::Sign => $go!(move |v: $acc| {
                if v > zero {
                    one
                } else if v < zero {
                    -one
                } else {
                    v // keeps 0, -0 and NaN
                }
            }),
            U::Softplus => $go!(softplus::<$acc>),
        }
    }};
}

/// `kind` applied elementwise to `target`, for float storage types.
pub(crate) fn unary_float_on<T: FloatStore>(kind: UnaryOp, target: Target<'_, T>) {
    macro_rules! go {
        ($f:expr) => {
            map_float(target, $f)
        };
    }
    float_unary!(kind, T::Acc, go)
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
/// Values per block when a worker's whole chunk is at most this long.
const SMALL_FUSED_BLOCK: usize = 64;

/// An operand of a fused elementwise kernel.
#[derive(Clone, Copy)]
pub(crate) enum FusedOperand<'a, T> {
    /// A tensor of the output's shape.
    Full(&'a [T]),
    /// One value for every element.
    Scalar(T),
    /// One value per row of the output, rows of the given length.
    PerRow(&'a [T], usize),
    /// One row of the given length, repeated for every row of the output.
    OneRow(&'a [T], usize),
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
    for_each_chunk(out, |start, chunk| {
        vectorized(FusedChunk {
            steps,
            operands,
            start,
            chunk,
        })
    });
}

/// One worker's range of a fused elementwise kernel, compiled once per instruction set so
/// every step's loop runs at the vector width (see [`vectorized`]).
struct FusedChunk<'s, 'a, 'o, T> {
    steps: &'s [ElementwiseStep],
    operands: &'s [FusedOperand<'a, T>],
    start: usize,
    chunk: &'o mut [T],
}

impl<T: FloatStore> VectorKernel for FusedChunk<'_, '_, '_, T>
where
    T::Acc: FloatStore<Acc = T::Acc>,
{
    type Output = ();

    #[inline(always)]
    fn run(self) {
        // The block buffers are zeroed on every call: 12 KB at 128 values a block, more
        // than the work of a small tensor's chain (a decoding step's vectors, a bias).
        if self.chunk.len() <= SMALL_FUSED_BLOCK {
            self.blocks::<SMALL_FUSED_BLOCK>()
        } else {
            self.blocks::<FUSED_BLOCK>()
        }
    }
}

impl<T: FloatStore> FusedChunk<'_, '_, '_, T>
where
    T::Acc: FloatStore<Acc = T::Acc>,
{
    /// The chunk in blocks of `B` values.
    #[inline(always)]
    fn blocks<const B: usize>(self) {
        let FusedChunk {
            steps,
            operands,
            start,
            chunk,
        } = self;
        let zero = <T::Acc as Real>::ZERO;
        let mut values = [[zero; B]; ElementwiseStep::MAX_VALUES];
        let (loaded, computed) = values.split_at_mut(operands.len());
        for (buf, operand) in loaded.iter_mut().zip(operands) {
            if let FusedOperand::Scalar(v) = operand {
                buf.fill(v.load());
            }
        }
        for (b, block) in chunk.chunks_mut(B).enumerate() {
            let at = start + b * B;
            let n = block.len();
            for (buf, operand) in loaded.iter_mut().zip(operands) {
                let source = match *operand {
                    FusedOperand::Full(x) => &x[at..at + n],
                    FusedOperand::Output => &*block,
                    FusedOperand::Scalar(_) => continue,
                    FusedOperand::PerRow(x, len) => {
                        load_per_row(x, len, at, &mut buf[..n]);
                        continue;
                    }
                    FusedOperand::OneRow(x, len) => {
                        load_one_row(x, len, at, &mut buf[..n]);
                        continue;
                    }
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
                    ElementwiseStep::Unary(kind, x) => {
                        let x = arg(x);
                        macro_rules! go {
                            ($f:expr) => {{
                                let f = $f;
                                for (o, v) in dst.iter_mut().zip(x) {
                                    *o = f(*v);
                                }
                            }};
                        }
                        float_unary!(kind, T::Acc, go)
                    }
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
    }
}

/// `buf[i]` = the value of the row (of `len` elements) that element `at + i` lies in.
#[inline(always)]
fn load_per_row<T: FloatStore>(x: &[T], len: usize, at: usize, buf: &mut [T::Acc]) {
    let mut i = 0;
    while i < buf.len() {
        let row = (at + i) / len;
        let end = ((row + 1) * len - at).min(buf.len());
        buf[i..end].fill(x[row].load());
        i = end;
    }
}

/// `buf[i]` = element `(at + i) % len` of the one row `x`.
#[inline(always)]
fn load_one_row<T: FloatStore>(x: &[T], len: usize, at: usize, buf: &mut [T::Acc]) {
    let mut i = 0;
    while i < buf.len() {
        let column = (at + i) % len;
        let end = (i + len - column).min(buf.len());
        for (v, s) in buf[i..end].iter_mut().zip(&x[column..]) {
            *v = s.load();
        }
        i = end;
    }
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

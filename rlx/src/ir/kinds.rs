//! Op kinds: the small enums that select a function within an op family.
//!
//! Each enum is written once, in [`op_kinds!`]: its variants, their printed names, `ALL`
//! and the element types each kind accepts all come from that one list. Everything else
//! that handles kinds (inference, the CPU kernels, the MLX shim's codes) matches on them
//! exhaustively, so a new kind is a compile error wherever it still needs a rule.

use super::dtype::DType;

/// Which element types a kind accepts as operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Floats only (`f16`, `bf16`, `f32`, `f64`).
    Float,
    /// Signed numbers: signed integers and floats.
    Signed,
    /// Every number: integers and floats, not `bool`.
    Numeric,
    /// Every dtype, `bool` included.
    Any,
}

impl Domain {
    /// True if `dtype` is in the domain.
    ///
    /// ```
    /// use rlx::ir::{DType, Domain};
    /// assert!(Domain::Signed.admits(DType::I8));
    /// assert!(!Domain::Signed.admits(DType::U8));
    /// ```
    pub fn admits(self, dtype: DType) -> bool {
        match self {
            Domain::Float => dtype.is_float(),
            Domain::Signed => dtype.is_signed(),
            Domain::Numeric => dtype != DType::Bool,
            Domain::Any => true,
        }
    }

    /// How error messages name the domain.
    pub fn describe(self) -> &'static str {
        match self {
            Domain::Float => "a float dtype",
            Domain::Signed => "a signed dtype",
            Domain::Numeric => "a numeric dtype (not bool)",
            Domain::Any => "any dtype",
        }
    }
}

/// Defines a kind enum from one list of `Variant => "name" (Domain)` entries: the enum,
/// `ALL`, `name()`, `from_name()` and `domain()`.
macro_rules! op_kinds {
    (
        $(#[$meta:meta])*
        pub enum $kind:ident {
            $($(#[$vmeta:meta])* $variant:ident => $text:literal ($domain:ident),)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $kind {
            $($(#[$vmeta])* $variant,)+
        }

        impl $kind {
            /// Every kind, in declaration order.
            pub const ALL: [$kind; [$($text),+].len()] = [$($kind::$variant),+];

            /// The lowercase name printed in graphs.
            pub const fn name(self) -> &'static str {
                match self {
                    $($kind::$variant => $text,)+
                }
            }

            /// The kind printed as `name`, if any.
            pub fn from_name(name: &str) -> Option<$kind> {
                $kind::ALL.into_iter().find(|k| k.name() == name)
            }

            /// The operand dtypes the kind accepts.
            pub const fn domain(self) -> Domain {
                match self {
                    $($kind::$variant => Domain::$domain,)+
                }
            }
        }
    };
}

op_kinds! {
    /// Elementwise functions of one tensor.
    ///
    /// ```
    /// use rlx::ir::{Domain, UnaryOp};
    /// assert_eq!(UnaryOp::from_name("gelu_tanh"), Some(UnaryOp::GeluTanh));
    /// assert_eq!(UnaryOp::Relu.domain(), Domain::Numeric);
    /// ```
    pub enum UnaryOp {
        /// `-x`.
        Neg => "neg" (Signed),
        /// `|x|`.
        Abs => "abs" (Numeric),
        /// `e^x`.
        Exp => "exp" (Float),
        /// Natural logarithm.
        Log => "log" (Float),
        /// Square root.
        Sqrt => "sqrt" (Float),
        /// `1 / sqrt(x)`.
        Rsqrt => "rsqrt" (Float),
        /// `1 / x`.
        Recip => "recip" (Float),
        /// Sine.
        Sin => "sin" (Float),
        /// Cosine.
        Cos => "cos" (Float),
        /// Hyperbolic tangent.
        Tanh => "tanh" (Float),
        /// `1 / (1 + e^-x)`.
        Sigmoid => "sigmoid" (Float),
        /// `max(x, 0)`; NaN gives 0.
        Relu => "relu" (Numeric),
        /// GELU with the exact erf formulation.
        Gelu => "gelu" (Float),
        /// GELU with the tanh approximation.
        GeluTanh => "gelu_tanh" (Float),
        /// `x * sigmoid(x)`.
        Silu => "silu" (Float),
        /// The error function.
        Erf => "erf" (Float),
        /// Round towards -∞.
        Floor => "floor" (Float),
        /// Round towards +∞.
        Ceil => "ceil" (Float),
        /// Round half to even.
        Round => "round" (Float),
        /// -1, 0 or 1 (NaN stays NaN).
        Sign => "sign" (Numeric),
        /// `log(1 + e^x)`.
        Softplus => "softplus" (Float),
    }
}

op_kinds! {
    /// Elementwise functions of two tensors, with numpy-style broadcasting.
    ///
    /// Integer `Div` is floor division and `Rem` takes the sign of the divisor (Python and
    /// numpy semantics), so `a == (a div b) * b + (a rem b)` for every dtype.
    ///
    /// ```
    /// use rlx::ir::BinaryOp;
    /// assert_eq!(BinaryOp::ALL.len(), 8);
    /// assert_eq!(BinaryOp::Rem.name(), "rem");
    /// ```
    pub enum BinaryOp {
        /// `a + b`.
        Add => "add" (Numeric),
        /// `a - b`.
        Sub => "sub" (Numeric),
        /// `a * b`.
        Mul => "mul" (Numeric),
        /// `a / b` (floor division for integers).
        Div => "div" (Numeric),
        /// `a ^ b`.
        Pow => "pow" (Float),
        /// The larger (NaN wins).
        Max => "max" (Numeric),
        /// The smaller (NaN wins).
        Min => "min" (Numeric),
        /// Remainder with the divisor's sign.
        Rem => "rem" (Numeric),
    }
}

op_kinds! {
    /// Elementwise comparisons producing `bool`. `Eq`/`Ne` also accept `bool` operands.
    ///
    /// ```
    /// use rlx::ir::{CompareOp, Domain};
    /// assert_eq!(CompareOp::Ne.domain(), Domain::Any);
    /// ```
    pub enum CompareOp {
        /// `a == b`.
        Eq => "eq" (Any),
        /// `a != b`.
        Ne => "ne" (Any),
        /// `a < b`.
        Lt => "lt" (Numeric),
        /// `a <= b`.
        Le => "le" (Numeric),
        /// `a > b`.
        Gt => "gt" (Numeric),
        /// `a >= b`.
        Ge => "ge" (Numeric),
    }
}

op_kinds! {
    /// Reductions over a set of axes.
    ///
    /// ```
    /// use rlx::ir::ReduceOp;
    /// assert_eq!(ReduceOp::Max.name(), "reduce_max");
    /// ```
    pub enum ReduceOp {
        /// Sum.
        Sum => "sum" (Numeric),
        /// Arithmetic mean.
        Mean => "mean" (Float),
        /// Maximum (NaN wins).
        Max => "reduce_max" (Numeric),
        /// Minimum (NaN wins).
        Min => "reduce_min" (Numeric),
        /// Product.
        Prod => "prod" (Numeric),
    }
}

op_kinds! {
    /// Index of the largest or smallest element along an axis (first one on ties), as `i64`.
    ///
    /// ```
    /// use rlx::ir::ArgReduceOp;
    /// assert_eq!(ArgReduceOp::ArgMin.name(), "argmin");
    /// ```
    pub enum ArgReduceOp {
        /// The largest (a NaN wins).
        ArgMax => "argmax" (Numeric),
        /// The smallest (a NaN wins).
        ArgMin => "argmin" (Numeric),
    }
}

op_kinds! {
    /// Which result a sort-like op produces: the sorted values or their `i64` source indices.
    ///
    /// ```
    /// use rlx::ir::SortOutput;
    /// assert_eq!(SortOutput::Indices.name(), "indices");
    /// ```
    pub enum SortOutput {
        /// The sorted values.
        Values => "values" (Numeric),
        /// Indices into the input axis (`i64`).
        Indices => "indices" (Numeric),
    }
}

op_kinds! {
    /// Pooling function.
    ///
    /// ```
    /// use rlx::ir::PoolKind;
    /// assert_eq!(PoolKind::Avg.name(), "avg_pool");
    /// ```
    pub enum PoolKind {
        /// Maximum over the window; padding never wins.
        Max => "max_pool" (Float),
        /// Mean over the window; padded positions count as zeros (PyTorch's default).
        Avg => "avg_pool" (Float),
    }
}

op_kinds! {
    /// How [`Op::Upsample`](super::Op::Upsample) maps an output position to input positions,
    /// as PyTorch's `interpolate` defines each mode. With input size `i` and output size `o`
    /// along an axis, output position `p`:
    ///
    /// ```
    /// use rlx::ir::UpsampleMode;
    /// assert_eq!(UpsampleMode::BilinearAlignCorners.name(), "bilinear_align_corners");
    /// ```
    pub enum UpsampleMode {
        /// Copies input `floor(p · i / o)` (PyTorch's `nearest`).
        Nearest => "nearest" (Float),
        /// Interpolates at `(p + 0.5) · i / o − 0.5`, clamped at 0 (`align_corners=False`).
        Bilinear => "bilinear" (Float),
        /// Interpolates at `p · (i − 1) / (o − 1)`, so the corners align (`align_corners=True`).
        BilinearAlignCorners => "bilinear_align_corners" (Float),
    }
}

/// The input positions one output position of an upsampling reads: `(lo, hi, t)` stands
/// for `x[lo]·(1 − t) + x[hi]·t` (`t = 0` and `lo = hi` for nearest).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UpsampleTap {
    /// First input position.
    pub lo: usize,
    /// Second input position (`lo + 1`, or `lo` at the edge).
    pub hi: usize,
    /// Weight of `hi`, in `[0, 1)`.
    pub t: f64,
}

impl UpsampleMode {
    /// The taps of output position `at` along an axis resized from `input` to `output`
    /// positions (both at least 1, `at < output`). Nearest uses exact integer arithmetic,
    /// where PyTorch's CPU kernel multiplies by an `f32` scale and can land one position
    /// lower when `at · input / output` is a whole number (e.g. 14 → 20 at position 10).
    ///
    /// ```
    /// use rlx::ir::{UpsampleMode, UpsampleTap};
    /// let tap = UpsampleMode::Bilinear.tap(1, 2, 4);
    /// assert_eq!(tap, UpsampleTap { lo: 0, hi: 1, t: 0.25 });
    /// assert_eq!(UpsampleMode::BilinearAlignCorners.tap(3, 2, 4).lo, 1);
    /// ```
    pub fn tap(self, at: usize, input: usize, output: usize) -> UpsampleTap {
        let last = input.saturating_sub(1);
        let source = match self {
            UpsampleMode::Nearest => {
                let lo = (at * input / output.max(1)).min(last);
                return UpsampleTap { lo, hi: lo, t: 0.0 };
            }
            UpsampleMode::Bilinear => {
                let scale = input as f64 / output as f64;
                ((at as f64 + 0.5) * scale - 0.5).max(0.0)
            }
            UpsampleMode::BilinearAlignCorners if output > 1 => {
                at as f64 * last as f64 / (output - 1) as f64
            }
            UpsampleMode::BilinearAlignCorners => 0.0,
        };
        let lo = (source.floor() as usize).min(last);
        let hi = (lo + 1).min(last);
        let t = if hi == lo { 0.0 } else { source - lo as f64 };
        UpsampleTap { lo, hi, t }
    }
}

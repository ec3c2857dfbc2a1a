//! Element traits the kernels are generic over.
//!
//! Floats are stored as `f16`/`bf16`/`f32`/`f64` and computed in `f32` (or `f64` for `f64`);
//! integers compute in their own type with wrapping arithmetic and floor division.

use half::{bf16, f16};

use crate::ir::DType;

/// The type float kernels of `dtype` accumulate in: `f64` for `f64`, `f32` otherwise
/// (halves are widened). Scratch of GEMM, conv and attention is sized in it.
pub(crate) fn accumulator(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// A type kernels compute floats in: `f32` or `f64`.
pub(crate) trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::ops::AddAssign
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;
    const INFINITY: Self;
    fn from_f64(v: f64) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn abs(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_even(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn ln_1p(self) -> Self;
    fn is_nan(self) -> bool;
    fn maximum(self, o: Self) -> Self;
    fn minimum(self, o: Self) -> Self;
}

macro_rules! real {
    ($t:ty, $erf:path) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const INFINITY: Self = <$t>::INFINITY;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn erf(self) -> Self {
                $erf(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            /// NaN-propagating maximum, like numpy and PyTorch.
            fn maximum(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t>::NAN
                } else if self >= o {
                    self
                } else {
                    o
                }
            }
            /// NaN-propagating minimum.
            fn minimum(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t>::NAN
                } else if self <= o {
                    self
                } else {
                    o
                }
            }
        }
    };
}

real!(f32, erf_f32);
real!(f64, libm::erf);

/// `erf` for f32 as a rational function of `x` clamped to [−4, 4] (beyond it erf is ±1 to
/// f32 precision; the function holds one step below),
/// with the coefficients of Eigen's `generic_fast_erf_float`. Straight-line arithmetic
/// (plain multiply-adds: `mul_add` would call libm's `fmaf` where FMA is not enabled), so
/// loops over slices vectorize (libm's `erff` branches per element and cannot); within
/// 4.8e-7 of libm's `erff` everywhere, about 4 ulp of 1 (`erf_f32_matches_libm`). NaN stays
/// NaN.
#[inline(always)]
pub(crate) fn erf_f32(x: f32) -> f32 {
    // `clamp` keeps NaN as NaN.
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p + -2.101_024e-6;
    p = x2 * p + -5.692_506_4e-5;
    p = x2 * p + -7.349_906_3e-4;
    p = x2 * p + -2.9546e-3;
    p = x2 * p + -1.609_603_3e-2;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    q = x2 * q + -1.682_827e-3;
    q = x2 * q + -7.373_329e-3;
    q = x2 * q + -1.426_474e-2;
    x * p / q
}

/// A float storage type and the type it computes in.
pub(crate) trait FloatStore: Copy + Send + Sync + bytemuck::Pod + 'static {
    type Acc: Real + super::linalg::IntoF64;
    fn load(self) -> Self::Acc;
    fn store(v: Self::Acc) -> Self;
}

impl FloatStore for f32 {
    type Acc = f32;
    fn load(self) -> f32 {
        self
    }
    fn store(v: f32) -> f32 {
        v
    }
}

impl FloatStore for f64 {
    type Acc = f64;
    fn load(self) -> f64 {
        self
    }
    fn store(v: f64) -> f64 {
        v
    }
}

impl FloatStore for f16 {
    type Acc = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

impl FloatStore for bf16 {
    type Acc = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(v: f32) -> bf16 {
        bf16::from_f32(v)
    }
}

/// Integer element types, with the semantics the IR documents.
pub(crate) trait Int: Copy + Send + Sync + Ord + bytemuck::Pod + 'static {
    const ZERO: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// Floor division; 0 when dividing by zero (never a panic).
    fn floor_div(self, o: Self) -> Self;
    /// Remainder with the divisor's sign; 0 when dividing by zero.
    fn floor_rem(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn sign(self) -> Self;
}

macro_rules! signed_int {
    ($($t:ty),*) => {$(
        impl Int for $t {
            const ZERO: Self = 0;
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn floor_div(self, o: Self) -> Self {
                if o == 0 {
                    return 0;
                }
                let q = self.wrapping_div(o);
                if (self.wrapping_rem(o) != 0) && ((self < 0) != (o < 0)) { q.wrapping_sub(1) } else { q }
            }
            fn floor_rem(self, o: Self) -> Self {
                if o == 0 {
                    return 0;
                }
                let r = self.wrapping_rem(o);
                if r != 0 && ((r < 0) != (o < 0)) { r.wrapping_add(o) } else { r }
            }
            fn neg(self) -> Self { self.wrapping_neg() }
            fn abs(self) -> Self { self.wrapping_abs() }
            fn sign(self) -> Self { self.signum() }
        }
    )*};
}
signed_int!(i8, i32, i64);

impl Int for u8 {
    const ZERO: Self = 0;
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    fn floor_div(self, o: Self) -> Self {
        self.checked_div(o).unwrap_or(0)
    }
    fn floor_rem(self, o: Self) -> Self {
        self.checked_rem(o).unwrap_or(0)
    }
    fn neg(self) -> Self {
        self.wrapping_neg()
    }
    fn abs(self) -> Self {
        self
    }
    fn sign(self) -> Self {
        u8::from(self > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::{Int, erf_f32};

    #[test]
    fn erf_f32_matches_libm() {
        let mut worst = 0.0f32;
        for i in -600_000..=600_000 {
            let x = i as f32 * 1e-5;
            let err = (erf_f32(x) - libm::erff(x)).abs();
            worst = worst.max(err);
        }
        assert!(worst <= 5e-7, "worst abs error {worst}");
        // Past the clamp it holds erf(4), one f32 step below 1.
        assert!((erf_f32(10.0) - 1.0).abs() <= 1.2e-7);
        assert_eq!(erf_f32(-10.0), -erf_f32(10.0));
        assert_eq!(erf_f32(0.0), 0.0);
        assert!(erf_f32(f32::NAN).is_nan());
    }

    #[test]
    fn floor_division_matches_python() {
        for (a, b) in [
            (7i32, 2),
            (-7, 2),
            (7, -2),
            (-7, -2),
            (6, 3),
            (-6, 3),
            (0, 5),
        ] {
            let q = a.floor_div(b);
            let r = a.floor_rem(b);
            assert_eq!(
                q,
                (f64::from(a) / f64::from(b)).floor() as i32,
                "{a} // {b}"
            );
            assert_eq!(q * b + r, a);
            assert!(r == 0 || (r < 0) == (b < 0));
        }
        assert_eq!(5i32.floor_div(0), 0);
        assert_eq!(i32::MIN.floor_div(-1), i32::MIN);
        assert_eq!(i8::MIN.floor_rem(-1), 0);
    }
}

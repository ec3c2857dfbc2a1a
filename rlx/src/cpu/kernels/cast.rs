//! Dtype conversion with Rust `as` semantics (float to int saturates, NaN becomes 0;
//! int to narrower int wraps; anything non-zero is `true`).

use half::{bf16, f16};

/// A value read for conversion: every float widens to `f64` exactly, every int to `i64`.
#[derive(Clone, Copy)]
pub(crate) enum Wide {
    Float(f64),
    Int(i64),
}

pub(crate) trait CastFrom: Copy + Send + Sync {
    fn widen(self) -> Wide;
    fn narrow(v: Wide) -> Self;
}

macro_rules! cast_float {
    ($($t:ty: $to:expr, $from_f:expr, $from_i:expr);* $(;)?) => {$(
        impl CastFrom for $t {
            fn widen(self) -> Wide {
                Wide::Float(($to)(self))
            }
            fn narrow(v: Wide) -> Self {
                match v {
                    Wide::Float(f) => ($from_f)(f),
                    Wide::Int(i) => ($from_i)(i),
                }
            }
        }
    )*};
}

cast_float!(
    f32: |x: f32| f64::from(x), |f: f64| f as f32, |i: i64| i as f32;
    f64: |x: f64| x, |f: f64| f, |i: i64| i as f64;
    f16: |x: f16| x.to_f64(), f16::from_f64, |i: i64| f16::from_f32(i as f32);
    bf16: |x: bf16| x.to_f64(), bf16::from_f64, |i: i64| bf16::from_f32(i as f32);
);

macro_rules! cast_int {
    ($($t:ty),*) => {$(
        impl CastFrom for $t {
            fn widen(self) -> Wide {
                Wide::Int(self as i64)
            }
            fn narrow(v: Wide) -> Self {
                match v {
                    Wide::Float(f) => f as $t,
                    Wide::Int(i) => i as $t,
                }
            }
        }
    )*};
}

cast_int!(i32, i64, i8, u8);

/// Bool stored as a byte; any non-zero byte reads as `true`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct BoolByte(pub u8);

// SAFETY: `BoolByte` is a transparent wrapper of `u8`: no padding, any bit pattern.
unsafe impl bytemuck::Zeroable for BoolByte {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for BoolByte {}

impl CastFrom for BoolByte {
    fn widen(self) -> Wide {
        Wide::Int(i64::from(self.0 != 0))
    }
    fn narrow(v: Wide) -> Self {
        BoolByte(u8::from(match v {
            Wide::Float(f) => f != 0.0,
            Wide::Int(i) => i != 0,
        }))
    }
}

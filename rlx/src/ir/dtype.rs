//! Element types of tensors.

use std::fmt;

/// The element type of a tensor.
///
/// ```
/// use rlx::ir::DType;
/// assert_eq!(DType::BF16.size_bytes(), 2);
/// assert!(DType::F16.is_float());
/// assert!(DType::I8.is_int() && DType::I8.is_signed());
/// assert_eq!(DType::Bool.to_string(), "bool");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16: the upper half of an `f32`.
    BF16,
    /// IEEE 754 double precision.
    F64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Boolean, stored as one byte (0 or 1).
    Bool,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 9] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];

    /// Bytes one element occupies.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// Floating-point types (`f16`, `bf16`, `f32`, `f64`).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// Integer types (signed or unsigned; `bool` is not an integer).
    pub const fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::I8 | DType::U8)
    }

    /// Types that can be negative.
    pub const fn is_signed(self) -> bool {
        self.is_float() || matches!(self, DType::I32 | DType::I64 | DType::I8)
    }

    /// Types that support arithmetic: every float and integer type, not `bool`.
    pub const fn is_numeric(self) -> bool {
        self.is_float() || self.is_int()
    }

    /// The short lowercase name used in printed shapes (`f32`, `bf16`, `bool`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that is the element type of some [`DType`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tensor element type",
    label = "expected one of f32, f64, f16, bf16, i32, i64, i8, u8, bool"
)]
///
/// Values convert to and from little-endian bytes, the layout of constant data in the IR.
///
/// ```
/// use rlx::ir::{DType, Element};
/// assert_eq!(<half::bf16 as Element>::DTYPE, DType::BF16);
/// let mut bytes = Vec::new();
/// 1.5f32.write_le(&mut bytes);
/// assert_eq!(f32::read_le(&bytes), 1.5);
/// ```
pub trait Element: Copy + Send + Sync + fmt::Debug + 'static {
    /// The dtype this Rust type stores.
    const DTYPE: DType;
    /// Appends the little-endian bytes of `self`.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads a value from the first `DTYPE.size_bytes()` bytes of `bytes`.
    ///
    /// Panics if `bytes` is shorter than that; callers slice by the dtype size.
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! impl_element_le {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        #[diagnostic::do_not_recommend]
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut raw = [0u8; std::mem::size_of::<$t>()];
                raw.copy_from_slice(&bytes[..std::mem::size_of::<$t>()]);
                <$t>::from_le_bytes(raw)
            }
        }
    )*};
}

impl_element_le!(
    f32 => F32,
    f64 => F64,
    half::f16 => F16,
    half::bf16 => BF16,
    i32 => I32,
    i64 => I64,
    i8 => I8,
    u8 => U8,
);

#[diagnostic::do_not_recommend]
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(u8::from(self));
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_partition_the_dtypes() {
        for d in DType::ALL {
            let kinds = [d.is_float(), d.is_int(), d == DType::Bool];
            assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{d}");
            assert_eq!(d.is_numeric(), d != DType::Bool);
        }
        assert!(!DType::U8.is_signed());
        assert!(DType::I32.is_signed());
    }

    #[test]
    fn element_round_trips_through_bytes() {
        fn check<T: Element + PartialEq>(v: T) {
            let mut b = Vec::new();
            v.write_le(&mut b);
            assert_eq!(b.len(), T::DTYPE.size_bytes());
            assert_eq!(T::read_le(&b), v);
        }
        check(-2.5f32);
        check(1e300f64);
        check(half::f16::from_f32(0.333));
        check(half::bf16::from_f32(-7.0));
        check(-5i32);
        check(i64::MIN);
        check(-128i8);
        check(255u8);
        check(true);
    }
}

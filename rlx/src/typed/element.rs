//! Element types of typed handles.

pub use crate::ir::Element;
use half::{bf16, f16};

/// Element types float ops accept: `f32`, `f64`, `f16`, `bf16`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a float element type",
    label = "this op needs a tensor of f32, f64, f16 or bf16",
    note = "convert first with `.cast::<f32>()`"
)]
pub trait Float: Numeric {}

/// Element types arithmetic accepts: every float and integer type, not `bool`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a numeric element type",
    label = "arithmetic needs numbers, not `{Self}`",
    note = "compare to get `bool` tensors and `select` to choose with them"
)]
pub trait Numeric: Element {}

macro_rules! mark {
    ($tr:ident: $($t:ty),*) => {$(
        #[diagnostic::do_not_recommend]
        impl $tr for $t {}
    )*};
}

mark!(Float: f32, f64, f16, bf16);
mark!(Numeric: f32, f64, f16, bf16, i32, i64, i8, u8);

//! Dims at the type level: static sizes and named runtime dims.

use crate::ir;

/// A dim known to the type system: its IR form and how errors name it.
///
/// Implemented by [`Const<N>`] and by the types [`dims!`](crate::dims) declares.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a dim",
    label = "expected `Const<N>` or a dim declared with `rlx::dims!`",
    note = "shapes are tuples of dims, e.g. `(Batch, Const<384>)`"
)]
pub trait Dim: Copy + Default + Send + Sync + 'static {
    /// The dim in the IR.
    fn ir() -> ir::Dim;
}

/// A static dim of size `N`.
///
/// ```
/// use rlx::typed::{Const, Dim};
/// assert_eq!(Const::<384>::ir(), rlx::ir::Dim::Static(384));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Const<const N: usize>;

impl<const N: usize> Dim for Const<N> {
    fn ir() -> ir::Dim {
        ir::Dim::Static(N)
    }
}

/// `HeadDim` → `head_dim`: the symbol name of a named dim in the IR.
pub fn symbol_name(type_name: &str) -> String {
    let mut out = String::with_capacity(type_name.len() + 4);
    for (i, c) in type_name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Declares named runtime dims: unit types whose values are bound when the graph runs.
/// The IR symbol is the snake-case name (`Batch` → `batch`, `HeadDim` → `head_dim`).
///
/// ```
/// rlx::dims!(Batch, SeqLen);
/// use rlx::typed::Dim;
/// assert_eq!(Batch::ir().to_string(), "batch");
/// assert_eq!(SeqLen::ir().to_string(), "seq_len");
/// ```
#[macro_export]
macro_rules! dims {
    ($($(#[$meta:meta])* $name:ident),+ $(,)?) => {$(
        $(#[$meta])*
        #[doc = concat!("The runtime dim `", stringify!($name), "`, bound when the graph runs.")]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $name;

        impl $crate::typed::Dim for $name {
            fn ir() -> $crate::ir::Dim {
                $crate::ir::Dim::sym(&$crate::typed::symbol_name(stringify!($name)))
            }
        }
    )+};
}

#[cfg(test)]
mod tests {
    use super::symbol_name;

    #[test]
    fn snake_case_names() {
        assert_eq!(symbol_name("Batch"), "batch");
        assert_eq!(symbol_name("HeadDim"), "head_dim");
        assert_eq!(symbol_name("Seq"), "seq");
    }
}

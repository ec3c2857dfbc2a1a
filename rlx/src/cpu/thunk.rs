//! Thunks: pre-resolved kernel calls over planned memory.
//!
//! A thunk is plain data chosen when a plan is made: element counts, layouts and views.
//! Running one is a virtual call and a kernel call, with no lookup, allocation or shape
//! arithmetic. Each thunk type lives with the lowering of its op family (`lower/`) and
//! implements [`Kernel`] in one place: [`Kernel::accesses`], the list of views it touches
//! that `Plan::check` proves disjoint, sits right beside [`Kernel::execute`], the only code
//! that touches them.

use super::view::{Memory, View};

use crate::backend::RunError;

/// A view with the size of its elements in bytes.
pub(crate) type Access = (View, usize);

/// The memory one thunk touches.
#[derive(Debug, Default)]
pub(crate) struct Accesses {
    /// Views written (pairwise disjoint, and disjoint from every read).
    pub writes: Vec<Access>,
    /// Views read.
    pub reads: Vec<Access>,
}

impl Accesses {
    /// One view read and one written, with elements of `size` bytes.
    pub(crate) fn one_to_one(read: View, write: View, size: usize) -> Accesses {
        Accesses {
            writes: vec![(write, size)],
            reads: vec![(read, size)],
        }
    }
}

/// One kernel call over planned views.
pub(crate) trait Kernel: std::fmt::Debug + Send + Sync {
    /// Every view [`Kernel::execute`] reads or writes, with its element size.
    fn accesses(&self) -> Accesses;

    /// Runs the kernel over `mem`, touching only the views of [`Kernel::accesses`].
    fn execute(&self, mem: &Memory) -> Result<(), RunError>;
}

/// A planned kernel call.
pub(crate) type Thunk = Box<dyn Kernel>;

/// Runs `$body` with `$t` the storage type of a float dtype.
macro_rules! float_type {
    ($dtype:expr, |$t:ident| $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::F16 => {
                type $t = half::f16;
                $body
            }
            DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            other => unreachable!("{other} is not a float dtype (inference admits floats only)"),
        }
    };
}

/// Runs `$body` with `$t` the type of an integer dtype.
macro_rules! int_type {
    ($dtype:expr, |$t:ident| $body:expr) => {
        match $dtype {
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::I8 => {
                type $t = i8;
                $body
            }
            DType::U8 => {
                type $t = u8;
                $body
            }
            other => unreachable!("{other} is not an integer dtype"),
        }
    };
}

/// Runs `$body` with `$t` an opaque word of the dtype's size.
macro_rules! word_type {
    ($dtype:expr, |$t:ident| $body:expr) => {
        match $dtype.size_bytes() {
            1 => {
                type $t = u8;
                $body
            }
            2 => {
                type $t = u16;
                $body
            }
            4 => {
                type $t = u32;
                $body
            }
            _ => {
                type $t = u64;
                $body
            }
        }
    };
}

pub(crate) use {float_type, int_type, word_type};

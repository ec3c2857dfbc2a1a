//! Elementwise ops: unary and binary math, comparisons, `where` and casts. Each kind-family
//! (every `UnaryOp`, every `BinaryOp` and `CompareOp`) shares one file and one rule.

mod binary;
mod cast;
mod select;
mod unary;

pub use cast::Cast;
pub(crate) use select::Where;

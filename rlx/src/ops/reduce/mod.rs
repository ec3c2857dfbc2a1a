//! Reductions over axes, arg-reductions along one, and cumulative sums.

mod cumsum;
mod reduction;

pub use cumsum::Cumsum;
pub use reduction::{ArgReduce, Reduce};

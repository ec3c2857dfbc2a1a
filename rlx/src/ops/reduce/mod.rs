//! Reductions over axes, arg-reductions along one, cumulative sums and linear scans.

mod cumsum;
mod linear_scan;
mod reduction;

pub use cumsum::Cumsum;
pub use linear_scan::LinearScan;
pub use reduction::{ArgReduce, Reduce};

//! Reductions over axes, arg-reductions along one, cumulative sums, linear scans and the
//! gated delta rule.

mod cumsum;
mod delta_rule;
mod linear_scan;
mod reduction;

pub use cumsum::Cumsum;
pub(crate) use delta_rule::{DeltaRule, DeltaRuleGrad};
pub use linear_scan::LinearScan;
pub use reduction::{ArgReduce, Reduce};

//! Graph-to-graph rewrites shared by backends. Each pass returns a verified graph.
//!
//! - [`dce`]: drops nodes no output depends on (inputs and params always stay: they are
//!   the executable's interface).
//! - [`cse`]: merges nodes that compute the same op on the same operands.
//! - [`simplify`]: removes identities (same-shape reshape or broadcast, identity permute,
//!   same-dtype cast, full slice, single-operand concat, zero padding).
//!
//! Fusion will slot in after these; constant folding needs kernels and lives with each
//! backend.

mod cse;
mod dce;
mod rewrite;
mod simplify;

pub use cse::cse;
pub use dce::dce;
pub use simplify::simplify;

pub(crate) use rewrite::Rewriter;

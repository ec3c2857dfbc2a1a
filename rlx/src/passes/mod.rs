//! Graph-to-graph rewrites shared by backends. Each pass returns a verified graph.
//!
//! - [`dce`]: drops nodes no output depends on (inputs and params always stay: they are
//!   the executable's interface).
//! - [`cse`]: merges nodes that compute the same op on the same operands.
//! - [`simplify`]: removes identities (same-shape reshape or broadcast, identity permute,
//!   same-dtype cast, full slice, single-operand concat, zero padding).
//!
//! - [`decompose`]: replaces composite ops by their decompositions (for a backend without
//!   a kernel of its own, or to see a graph as primitives only).
//! - [`compute_in`]: computes a float32 graph in float16 or bfloat16 behind a float32
//!   interface (the MLX backend's half precisions).
//!
//! Constant folding needs kernels, and fusion is a choice of kernels: both live with each
//! backend.

mod cse;
mod dce;
mod decompose;
pub(crate) mod epilogue;
mod precision;
mod rewrite;
mod simplify;

pub use cse::cse;
pub use dce::dce;
pub use decompose::decompose;
pub use precision::compute_in;
pub use simplify::simplify;

pub(crate) use rewrite::Rewriter;

use crate::backend::CompileError;
use crate::ir::{Graph, VerifyError};

/// Names a pass's failure for [`CompileError::Pass`].
pub(crate) fn pass(
    name: &'static str,
    result: Result<Graph, VerifyError>,
) -> Result<Graph, CompileError> {
    result.map_err(|e| CompileError::Pass {
        pass: name,
        source: Box::new(e),
    })
}

/// The rewrites every backend runs before lowering: simplify, CSE, DCE.
pub(crate) fn standard(graph: &Graph) -> Result<Graph, CompileError> {
    let g = pass("simplify", simplify(graph))?;
    let g = pass("cse", cse(&g))?;
    pass("dce", dce(&g))
}

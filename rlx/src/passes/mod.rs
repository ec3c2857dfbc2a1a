//! Graph-to-graph rewrites shared by backends. Each pass returns a verified graph.
//!
//! - [`dce`]: drops nodes no output depends on (inputs and params always stay: they are
//!   the executable's interface).
//! - [`cse`]: merges nodes that compute the same op on the same operands.
//! - [`simplify`]: removes identities (same-shape reshape or broadcast, identity permute,
//!   same-dtype cast, full slice, single-operand concat, zero padding).
//!
//! - [`fuse_matmul_epilogues`]: folds a matmul's bias add, activation and residual add into
//!   one [`Op::FusedMatMul`](crate::ir::Op::FusedMatMul) (the CPU backend runs it).
//! - [`fuse_elementwise`]: folds chains of elementwise float ops into one
//!   [`Op::FusedElementwise`](crate::ir::Op::FusedElementwise) (the CPU backend runs it).
//!
//! - [`decompose`]: replaces composite ops by their decompositions (for a backend without
//!   a kernel of its own, or to see a graph as primitives only).
//! - [`compute_in`]: computes a float32 graph in float16 or bfloat16 behind a float32
//!   interface (the MLX backend's half precisions).
//!
//! Constant folding needs kernels and lives with each backend.

mod cse;
mod dce;
mod decompose;
mod fuse;
mod fuse_elementwise;
mod precision;
mod rewrite;
mod simplify;

pub use cse::cse;
pub use dce::dce;
pub use decompose::decompose;
pub use fuse::fuse_matmul_epilogues;
pub use fuse_elementwise::fuse_elementwise;
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

//! The op table: every op the CPU backend supports, on random inputs of several shapes and
//! dtypes (broadcasting, runtime dims bound at run time, transposed operands), against
//! naive f64 references. The harness is generic over [`rlx::backend::Backend`], so the same
//! cases run on every backend.

mod elementwise;
mod harness;
mod linalg;
mod movement;
mod nn;
mod reduce;
mod reference;
mod spatial;

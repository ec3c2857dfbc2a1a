//! Compute kernels of the CPU executor: plain functions over slices, chosen and
//! parameterized when a plan is made.

pub(crate) mod attention;
mod attention_direct;
mod attention_rows;
pub(crate) mod block_matmul;
pub(crate) mod cast;
pub(crate) mod conv;
pub(crate) mod copy;
pub(crate) mod delta_rule;
pub(crate) mod elementwise;
pub(crate) mod gathered;
pub(crate) mod gemm;
pub(crate) mod layout;
pub(crate) mod linalg;
pub(crate) mod numeric;
pub(crate) mod positions;
pub(crate) mod reduce;
pub(crate) mod rope;
pub(crate) mod sample;
pub(crate) mod simd;
pub(crate) mod sort;
pub(crate) mod spatial;
pub(crate) mod trig;

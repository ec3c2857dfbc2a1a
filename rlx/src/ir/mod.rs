//! The untyped intermediate representation: dtypes, dims, shapes, ops and graphs.
//!
//! Everything a backend sees. Type parameters of the typed frontend never reach this level.

mod constant;
mod dim;
mod dtype;
mod error;
mod graph;
mod kinds;
mod node;
mod op;
mod shape;
mod verify;

pub use crate::ops::{
    ActivationPrecision, ArgReduce, Attention, BLOCK_FORMATS, BlockDequantize, BlockMatMul,
    Broadcast, Cast, Concat, Conv, ConvTranspose, Cumsum, Custom, Dequantize, DynamicSlice, Gather,
    GatherMatMul, Judgement, LayerNorm, LinearScan, MatMul, Op, OpKind, Pad, Permute, Pool,
    QuantizedMatMul, RandomUniform, Reduce, ReferenceError, Reshape, RmsNorm, Rope, SampleToken,
    Sampled, Sampler, ScatterAdd, ScatterMatMul, Slice, SliceUpdate, Softmax, Sort, Tolerance,
    TopK, Upsample, block_matmul_supports, evaluate_reference,
};
pub use constant::{ConstantData, ConstantError, Scalar};
pub use dim::{Dim, DimExpr, EvalDimError, Symbol};
pub use dtype::{DType, Element};
pub use error::InferError;
pub(crate) use error::attr_err;
pub use graph::{Graph, Output};
pub use kinds::Domain;
pub use kinds::UpsampleTap;
pub use node::{Node, NodeId};
pub use op::{
    ArgReduceOp, AttentionMask, AttrValue, BinaryOp, CompareOp, PoolKind, ReduceOp, SortOutput,
    UnaryOp, UpsampleMode,
};
pub use shape::{Shape, TensorType};
pub use verify::VerifyError;

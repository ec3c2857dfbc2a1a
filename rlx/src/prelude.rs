//! The names most programs need: `use rlx::prelude::*;`.

pub use crate::builder::{BuildError, BuildErrorKind, GraphBuilder};
pub use crate::ir::{
    ArgReduceOp, AttentionMask, BinaryOp, CompareOp, ConstantData, DType, Dim, Graph, NodeId, Op,
    PoolKind, ReduceOp, Scalar, Shape, SortOutput, Symbol, TensorType, UnaryOp,
};

//! The IR's enums as the shim's codes, by name.
//!
//! The codes are the enumerators of `rlx_mlx.h` (their Rust constants are generated from the
//! header), and every map here is an exhaustive match: a new kind on either side is a
//! compile error until both sides name it, and reordering either enum changes nothing.

use rlx_mlx_sys as sys;

use crate::ir::{ArgReduceOp, BinaryOp, CompareOp, DType, PoolKind, ReduceOp, SortOutput, UnaryOp};

pub(crate) fn dtype(dtype: DType) -> sys::rlx_mlx_dtype {
    match dtype {
        DType::Bool => sys::RLX_MLX_BOOL,
        DType::U8 => sys::RLX_MLX_U8,
        DType::I8 => sys::RLX_MLX_I8,
        DType::I32 => sys::RLX_MLX_I32,
        DType::I64 => sys::RLX_MLX_I64,
        DType::F16 => sys::RLX_MLX_F16,
        DType::F32 => sys::RLX_MLX_F32,
        DType::F64 => sys::RLX_MLX_F64,
        DType::BF16 => sys::RLX_MLX_BF16,
    }
}

/// The dtype of an MLX array, if RLX has it (MLX also has u16, u32, u64, i16, complex).
pub(crate) fn dtype_of(code: sys::rlx_mlx_dtype) -> Option<DType> {
    Some(match code {
        sys::RLX_MLX_BOOL => DType::Bool,
        sys::RLX_MLX_U8 => DType::U8,
        sys::RLX_MLX_I8 => DType::I8,
        sys::RLX_MLX_I32 => DType::I32,
        sys::RLX_MLX_I64 => DType::I64,
        sys::RLX_MLX_F16 => DType::F16,
        sys::RLX_MLX_F32 => DType::F32,
        sys::RLX_MLX_F64 => DType::F64,
        sys::RLX_MLX_BF16 => DType::BF16,
        _ => return None,
    })
}

pub(crate) fn unary(op: UnaryOp) -> sys::rlx_mlx_unary_op {
    match op {
        UnaryOp::Neg => sys::RLX_MLX_UNARY_NEG,
        UnaryOp::Abs => sys::RLX_MLX_UNARY_ABS,
        UnaryOp::Exp => sys::RLX_MLX_UNARY_EXP,
        UnaryOp::Log => sys::RLX_MLX_UNARY_LOG,
        UnaryOp::Sqrt => sys::RLX_MLX_UNARY_SQRT,
        UnaryOp::Rsqrt => sys::RLX_MLX_UNARY_RSQRT,
        UnaryOp::Recip => sys::RLX_MLX_UNARY_RECIP,
        UnaryOp::Sin => sys::RLX_MLX_UNARY_SIN,
        UnaryOp::Cos => sys::RLX_MLX_UNARY_COS,
        UnaryOp::Tanh => sys::RLX_MLX_UNARY_TANH,
        UnaryOp::Sigmoid => sys::RLX_MLX_UNARY_SIGMOID,
        UnaryOp::Relu => sys::RLX_MLX_UNARY_RELU,
        UnaryOp::Gelu => sys::RLX_MLX_UNARY_GELU,
        UnaryOp::GeluTanh => sys::RLX_MLX_UNARY_GELU_TANH,
        UnaryOp::Silu => sys::RLX_MLX_UNARY_SILU,
        UnaryOp::Erf => sys::RLX_MLX_UNARY_ERF,
        UnaryOp::Floor => sys::RLX_MLX_UNARY_FLOOR,
        UnaryOp::Ceil => sys::RLX_MLX_UNARY_CEIL,
        UnaryOp::Round => sys::RLX_MLX_UNARY_ROUND,
        UnaryOp::Sign => sys::RLX_MLX_UNARY_SIGN,
        UnaryOp::Softplus => sys::RLX_MLX_UNARY_SOFTPLUS,
    }
}

pub(crate) fn binary(op: BinaryOp) -> sys::rlx_mlx_binary_op {
    match op {
        BinaryOp::Add => sys::RLX_MLX_BINARY_ADD,
        BinaryOp::Sub => sys::RLX_MLX_BINARY_SUB,
        BinaryOp::Mul => sys::RLX_MLX_BINARY_MUL,
        BinaryOp::Div => sys::RLX_MLX_BINARY_DIV,
        BinaryOp::Pow => sys::RLX_MLX_BINARY_POW,
        BinaryOp::Max => sys::RLX_MLX_BINARY_MAX,
        BinaryOp::Min => sys::RLX_MLX_BINARY_MIN,
        BinaryOp::Rem => sys::RLX_MLX_BINARY_REM,
    }
}

pub(crate) fn compare(op: CompareOp) -> sys::rlx_mlx_compare_op {
    match op {
        CompareOp::Eq => sys::RLX_MLX_COMPARE_EQ,
        CompareOp::Ne => sys::RLX_MLX_COMPARE_NE,
        CompareOp::Lt => sys::RLX_MLX_COMPARE_LT,
        CompareOp::Le => sys::RLX_MLX_COMPARE_LE,
        CompareOp::Gt => sys::RLX_MLX_COMPARE_GT,
        CompareOp::Ge => sys::RLX_MLX_COMPARE_GE,
    }
}

pub(crate) fn reduce(op: ReduceOp) -> sys::rlx_mlx_reduce_op {
    match op {
        ReduceOp::Sum => sys::RLX_MLX_REDUCE_SUM,
        ReduceOp::Mean => sys::RLX_MLX_REDUCE_MEAN,
        ReduceOp::Max => sys::RLX_MLX_REDUCE_MAX,
        ReduceOp::Min => sys::RLX_MLX_REDUCE_MIN,
        ReduceOp::Prod => sys::RLX_MLX_REDUCE_PROD,
    }
}

pub(crate) fn arg_reduce(op: ArgReduceOp) -> sys::rlx_mlx_arg_reduce_op {
    match op {
        ArgReduceOp::ArgMax => sys::RLX_MLX_ARGMAX,
        ArgReduceOp::ArgMin => sys::RLX_MLX_ARGMIN,
    }
}

pub(crate) fn sort_output(output: SortOutput) -> sys::rlx_mlx_sort_output {
    match output {
        SortOutput::Values => sys::RLX_MLX_SORT_VALUES,
        SortOutput::Indices => sys::RLX_MLX_SORT_INDICES,
    }
}

pub(crate) fn pool(kind: PoolKind) -> sys::rlx_mlx_pool_kind {
    match kind {
        PoolKind::Max => sys::RLX_MLX_POOL_MAX,
        PoolKind::Avg => sys::RLX_MLX_POOL_AVG,
    }
}

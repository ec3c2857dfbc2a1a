//! [`OpKind`]: which variant of [`Op`] a node is, without its attributes.

use super::op::Op;

/// Defines [`OpKind`] from the list of [`Op`]'s variants, with `ALL`.
macro_rules! op_kinds {
    ($($variant:ident),+ $(,)?) => {
        /// The variant of an [`Op`], without attributes: what tests and tools enumerate when
        /// they must cover every op of the vocabulary (the random-graph generator must
        /// produce each). [`Op::kind`] matches exhaustively, so a new op cannot be left out.
        ///
        /// ```
        /// use rlx::ir::{Op, OpKind};
        /// assert_eq!(Op::Solve.kind(), OpKind::Solve);
        /// assert!(OpKind::ALL.contains(&OpKind::MatMul));
        /// ```
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(missing_docs)]
        pub enum OpKind {
            $($variant,)+
        }

        impl OpKind {
            /// Every kind, in the order of [`Op`]'s variants.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$variant),+];
        }
    };
}

op_kinds!(
    Input,
    Param,
    Constant,
    Unary,
    Binary,
    Compare,
    Where,
    Cast,
    MatMul,
    FusedMatMul,
    FusedElementwise,
    Reduce,
    ArgReduce,
    Cumsum,
    Softmax,
    LayerNorm,
    RmsNorm,
    StopGradient,
    Reshape,
    Permute,
    Slice,
    Concat,
    Broadcast,
    Pad,
    Gather,
    ScatterAdd,
    Attention,
    Rope,
    Conv,
    ConvTranspose,
    Pool,
    Upsample,
    TopK,
    Sort,
    Solve,
    QuantizedMatMul,
    Custom,
);

impl Op {
    /// Which variant this op is.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Input => OpKind::Input,
            Op::Param => OpKind::Param,
            Op::Constant(_) => OpKind::Constant,
            Op::Unary(_) => OpKind::Unary,
            Op::Binary(_) => OpKind::Binary,
            Op::Compare(_) => OpKind::Compare,
            Op::Where => OpKind::Where,
            Op::Cast { .. } => OpKind::Cast,
            Op::MatMul { .. } => OpKind::MatMul,
            Op::FusedMatMul { .. } => OpKind::FusedMatMul,
            Op::FusedElementwise { .. } => OpKind::FusedElementwise,
            Op::Reduce { .. } => OpKind::Reduce,
            Op::ArgReduce { .. } => OpKind::ArgReduce,
            Op::Cumsum { .. } => OpKind::Cumsum,
            Op::Softmax { .. } => OpKind::Softmax,
            Op::LayerNorm { .. } => OpKind::LayerNorm,
            Op::RmsNorm { .. } => OpKind::RmsNorm,
            Op::StopGradient => OpKind::StopGradient,
            Op::Reshape { .. } => OpKind::Reshape,
            Op::Permute { .. } => OpKind::Permute,
            Op::Slice { .. } => OpKind::Slice,
            Op::Concat { .. } => OpKind::Concat,
            Op::Broadcast { .. } => OpKind::Broadcast,
            Op::Pad { .. } => OpKind::Pad,
            Op::Gather { .. } => OpKind::Gather,
            Op::ScatterAdd { .. } => OpKind::ScatterAdd,
            Op::Attention { .. } => OpKind::Attention,
            Op::Rope { .. } => OpKind::Rope,
            Op::Conv { .. } => OpKind::Conv,
            Op::ConvTranspose { .. } => OpKind::ConvTranspose,
            Op::Pool { .. } => OpKind::Pool,
            Op::Upsample { .. } => OpKind::Upsample,
            Op::TopK { .. } => OpKind::TopK,
            Op::Sort { .. } => OpKind::Sort,
            Op::Solve => OpKind::Solve,
            Op::QuantizedMatMul { .. } => OpKind::QuantizedMatMul,
            Op::Custom { .. } => OpKind::Custom,
        }
    }
}

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
            Op::Cast(_) => OpKind::Cast,
            Op::MatMul(_) => OpKind::MatMul,
            Op::FusedMatMul(_) => OpKind::FusedMatMul,
            Op::FusedElementwise(_) => OpKind::FusedElementwise,
            Op::Reduce(_) => OpKind::Reduce,
            Op::ArgReduce(_) => OpKind::ArgReduce,
            Op::Cumsum(_) => OpKind::Cumsum,
            Op::Softmax(_) => OpKind::Softmax,
            Op::LayerNorm(_) => OpKind::LayerNorm,
            Op::RmsNorm(_) => OpKind::RmsNorm,
            Op::StopGradient => OpKind::StopGradient,
            Op::Reshape(_) => OpKind::Reshape,
            Op::Permute(_) => OpKind::Permute,
            Op::Slice(_) => OpKind::Slice,
            Op::Concat(_) => OpKind::Concat,
            Op::Broadcast(_) => OpKind::Broadcast,
            Op::Pad(_) => OpKind::Pad,
            Op::Gather(_) => OpKind::Gather,
            Op::ScatterAdd(_) => OpKind::ScatterAdd,
            Op::Attention(_) => OpKind::Attention,
            Op::Rope(_) => OpKind::Rope,
            Op::Conv(_) => OpKind::Conv,
            Op::ConvTranspose(_) => OpKind::ConvTranspose,
            Op::Pool(_) => OpKind::Pool,
            Op::Upsample(_) => OpKind::Upsample,
            Op::TopK(_) => OpKind::TopK,
            Op::Sort(_) => OpKind::Sort,
            Op::Solve => OpKind::Solve,
            Op::QuantizedMatMul(_) => OpKind::QuantizedMatMul,
            Op::Custom(_) => OpKind::Custom,
        }
    }
}

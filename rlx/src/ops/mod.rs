//! Every op of the IR in one place per op family: the attribute struct each [`Op`] variant
//! holds, and the [`Primitive`] trait that states the op's meaning (name, printing, dim
//! binding, shape and dtype inference in `infer.rs`, gradient in `grad.rs`, its float64
//! value in `reference.rs`, the tolerance of a backend's values against that, random
//! instances in `sample.rs`). Backends keep their lowerings in their own trees.
//!
//! Dtype rules, chosen to avoid silent surprises:
//! - no implicit promotion: operands combined elementwise, in matmul, in concat and in norms
//!   must share one dtype; a [`Op::Cast`] says where precision changes;
//! - float-only ops (transcendental unaries, `pow`, `mean`, softmax, norms, matmul,
//!   attention, conv, solve) reject integer and `bool` operands;
//! - `bool` only flows through comparisons (result), `where` (condition), `eq`/`ne`,
//!   movement ops and casts;
//! - index results (argmax, argsort, topk indices) are `i64`; index operands are `i32` or
//!   `i64`.
//!
//! Shape rules: broadcasting is numpy's (right-aligned, size 1 stretches) and only a static
//! 1 stretches; a symbolic dim never silently broadcasts. Dims must be provably equal (see
//! [`Dim`](crate::ir::Dim)): `batch` vs `384` is an error, not a run-time check.

mod array;
mod check;
pub(crate) mod composite;
mod custom;
mod elementwise;
mod evaluate;
mod leaf;
mod linalg;
mod movement;
mod nn;
mod norm;
mod reduce;
mod sample;
mod softmax;
mod sort;
mod spatial;
mod tolerance;

pub use custom::Custom;
pub use elementwise::Cast;
pub use evaluate::{ReferenceError, evaluate_reference};
pub use linalg::{MatMul, QuantizedMatMul};
pub use movement::{Broadcast, Concat, Gather, Pad, Permute, Reshape, ScatterAdd, Slice};
pub use nn::{Attention, Rope};
pub use norm::{LayerNorm, RmsNorm};
pub use reduce::{ArgReduce, Cumsum, Reduce};
pub use sample::{Sampled, Sampler};
pub use softmax::Softmax;
pub use sort::{Sort, TopK};
pub use spatial::{Conv, ConvTranspose, Pool, Upsample};
pub use tolerance::{Judgement, Tolerance};

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, Op, TensorType};
use array::{Array, Out};
use tolerance::{Bound, Operands};

/// What every op states about itself. No method has a default, so an op whose struct lacks
/// one does not compile; [`Op::primitive`] dispatches to it with an exhaustive match.
pub(crate) trait Primitive {
    /// The name printed in graphs, without attributes (`matmul`, `log_softmax`).
    fn name(&self) -> &'static str;

    /// The attributes printed after the name (`axis=1`, `keep_dims`), defaults left out.
    fn attrs(&self, out: &mut Vec<String>);

    /// This op with the dims its attributes hold replaced by `out`, the node's output dims
    /// once the runtime dims are bound (itself when its attributes hold none).
    fn bind_dims(&self, out: &[usize]) -> Op;

    /// The type it produces from operands of types `inputs`, or why it cannot.
    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError>;

    /// The cotangent of each operand `x` of the node `y` given `g`, the cotangent of `y`
    /// (a float), emitted as nodes; see [`Grad`] for what an operand may get instead.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError>;

    /// How far a backend's value may be from the float64 value of this op on the same
    /// operands (see [`Op::tolerance`]).
    fn tolerance(&self, x: &Operands<'_>) -> Bound;

    /// Its value in float64 on the operand values `x`, a result of `out`'s dtype and dims
    /// (what [`Primitive::infer`] gave for these operands, attribute dims bound). The
    /// operands passed inference, so their shapes fit; index operands still need checks.
    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError>;

    /// A random valid node of this op over the nodes `s` has made, for the random graphs
    /// (see [`OpKind::sample`](crate::ir::OpKind::sample)); `None` for an op they meet
    /// only through another (a leaf, a fused op) or not at all (a custom op).
    fn sample(s: &mut dyn Sampler) -> Sampled
    where
        Self: Sized;

    /// For a composite, the op written with other ops on the operands `x` (added to `b`);
    /// `None` for a primitive. See `composite.rs` for what a decomposition gives.
    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>>;
}

/// `Op::Variant(Struct)` for each op with attributes: `From` and the dispatch arm.
macro_rules! op_structs {
    ($($variant:ident),+ $(,)?) => {
        $(
            impl From<$variant> for Op {
                fn from(op: $variant) -> Op {
                    Op::$variant(op)
                }
            }
        )+
    };
}

op_structs!(
    Cast,
    MatMul,
    Reduce,
    ArgReduce,
    Cumsum,
    Softmax,
    LayerNorm,
    RmsNorm,
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
    QuantizedMatMul,
    Custom,
);

/// The one list of the vocabulary: each [`Op`] variant, the pattern that matches it, the
/// definition it dispatches to, and the type whose [`Primitive::sample`] makes it. From it
/// come [`OpKind`], [`Op::kind`], [`Op::primitive`] and [`OpKind::sample`], each an
/// exhaustive match, so a new variant missing here is a compile error.
macro_rules! registry {
    ($($kind:ident: $pattern:pat => $definition:expr, $sampler:ty;)+) => {
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
            $($kind,)+
        }

        impl OpKind {
            /// Every kind, in the order of [`Op`]'s variants.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$kind),+];

            /// A random valid node of this kind over the nodes `s` has made, or `None` when
            /// none turned up (no fitting operand, say), from the op's own module. Leaves,
            /// the fused ops (made by the CPU's fusion passes, which every CPU run of a
            /// random graph applies) and custom ops (known only by their kernels) have none.
            pub fn sample(self, s: &mut dyn Sampler) -> Sampled {
                match self {
                    $(OpKind::$kind => <$sampler as Primitive>::sample(s),)+
                }
            }
        }

        impl Op {
            /// The op's definition.
            pub(crate) fn primitive(&self) -> &dyn Primitive {
                match self {
                    $($pattern => $definition,)+
                }
            }

            /// Which variant this is.
            #[allow(unused_variables)]
            pub fn kind(&self) -> OpKind {
                match self {
                    $($pattern => OpKind::$kind,)+
                }
            }
        }
    };
}

registry! {
    Input: Op::Input => &leaf::Input, leaf::Input;
    Param: Op::Param => &leaf::Param, leaf::Param;
    Constant: Op::Constant(data) => data, crate::ir::ConstantData;
    Unary: Op::Unary(kind) => kind, crate::ir::UnaryOp;
    Binary: Op::Binary(kind) => kind, crate::ir::BinaryOp;
    Compare: Op::Compare(kind) => kind, crate::ir::CompareOp;
    Where: Op::Where => &elementwise::Where, elementwise::Where;
    Cast: Op::Cast(op) => op, Cast;
    MatMul: Op::MatMul(op) => op, MatMul;
    Reduce: Op::Reduce(op) => op, Reduce;
    ArgReduce: Op::ArgReduce(op) => op, ArgReduce;
    Cumsum: Op::Cumsum(op) => op, Cumsum;
    Softmax: Op::Softmax(op) => op, Softmax;
    LayerNorm: Op::LayerNorm(op) => op, LayerNorm;
    RmsNorm: Op::RmsNorm(op) => op, RmsNorm;
    StopGradient: Op::StopGradient => &movement::StopGradient, movement::StopGradient;
    Reshape: Op::Reshape(op) => op, Reshape;
    Permute: Op::Permute(op) => op, Permute;
    Slice: Op::Slice(op) => op, Slice;
    Concat: Op::Concat(op) => op, Concat;
    Broadcast: Op::Broadcast(op) => op, Broadcast;
    Pad: Op::Pad(op) => op, Pad;
    Gather: Op::Gather(op) => op, Gather;
    ScatterAdd: Op::ScatterAdd(op) => op, ScatterAdd;
    Attention: Op::Attention(op) => op, Attention;
    Rope: Op::Rope(op) => op, Rope;
    Conv: Op::Conv(op) => op, Conv;
    ConvTranspose: Op::ConvTranspose(op) => op, ConvTranspose;
    Pool: Op::Pool(op) => op, Pool;
    Upsample: Op::Upsample(op) => op, Upsample;
    TopK: Op::TopK(op) => op, TopK;
    Sort: Op::Sort(op) => op, Sort;
    Solve: Op::Solve => &linalg::Solve, linalg::Solve;
    QuantizedMatMul: Op::QuantizedMatMul(op) => op, QuantizedMatMul;
    Custom: Op::Custom(op) => op, Custom;
}

impl Op {
    /// The op's name without attributes (`matmul`, `exp`, `custom`).
    pub fn name(&self) -> &'static str {
        self.primitive().name()
    }

    /// The type this op produces from operands of types `inputs`.
    ///
    /// ```
    /// use rlx::ir::{DType, Dim, Op, Shape, TensorType};
    /// let x = TensorType::new(DType::F32, [Dim::sym("batch"), Dim::from(384)]);
    /// let w = TensorType::new(DType::F32, [384, 1536]);
    /// let mm = Op::MatMul(rlx::ir::MatMul { transpose_a: false, transpose_b: false });
    /// assert_eq!(mm.infer(&[x.clone(), w]).unwrap().to_string(), "f32[batch,1536]");
    ///
    /// let bad = TensorType::new(DType::F32, [385, 1536]);
    /// let err = mm.infer(&[x, bad]).unwrap_err();
    /// assert_eq!(err.to_string(), "inner dims 384 and 385 differ");
    /// ```
    pub fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        self.primitive().infer(inputs)
    }
}

/// Pushes the printed attribute `name` when `on`.
pub(crate) fn flag(out: &mut Vec<String>, on: bool, name: &str) {
    if on {
        out.push(name.into());
    }
}

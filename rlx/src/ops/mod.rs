//! Every op of the IR in one place per op family: the attribute struct each [`Op`] variant
//! holds, and the [`Primitive`] trait that states the op's meaning (name, printing, dim
//! binding, shape and dtype inference in `infer.rs`, gradient in `grad.rs`, its float64
//! value in `reference.rs`, the tolerance of a backend's values against that). Backends keep their lowerings in their own trees.
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
mod custom;
mod elementwise;
mod evaluate;
mod leaf;
mod linalg;
mod movement;
mod nn;
mod norm;
mod reduce;
mod softmax;
mod sort;
mod spatial;
mod tolerance;

pub use custom::Custom;
pub use elementwise::{Cast, FusedElementwise};
pub use evaluate::{ReferenceError, evaluate_reference};
pub use linalg::{FusedMatMul, MatMul, QuantizedMatMul};
pub use movement::{Broadcast, Concat, Gather, Pad, Permute, Reshape, ScatterAdd, Slice};
pub use nn::{Attention, Rope};
pub use norm::{LayerNorm, RmsNorm};
pub use reduce::{ArgReduce, Cumsum, Reduce};
pub use softmax::Softmax;
pub use sort::{Sort, TopK};
pub use spatial::{Conv, ConvTranspose, Pool, Upsample};
pub use tolerance::{Judgement, Tolerance};

use crate::autodiff::{Emitter, Grad, GradError};
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
    FusedMatMul,
    FusedElementwise,
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

impl Op {
    /// The op's definition.
    pub(crate) fn primitive(&self) -> &dyn Primitive {
        match self {
            Op::Input => &leaf::Input,
            Op::Param => &leaf::Param,
            Op::Constant(data) => data,
            Op::Unary(kind) => kind,
            Op::Binary(kind) => kind,
            Op::Compare(kind) => kind,
            Op::Where => &elementwise::Where,
            Op::Cast(op) => op,
            Op::MatMul(op) => op,
            Op::FusedMatMul(op) => op,
            Op::FusedElementwise(op) => op,
            Op::Reduce(op) => op,
            Op::ArgReduce(op) => op,
            Op::Cumsum(op) => op,
            Op::Softmax(op) => op,
            Op::LayerNorm(op) => op,
            Op::RmsNorm(op) => op,
            Op::StopGradient => &movement::StopGradient,
            Op::Reshape(op) => op,
            Op::Permute(op) => op,
            Op::Slice(op) => op,
            Op::Concat(op) => op,
            Op::Broadcast(op) => op,
            Op::Pad(op) => op,
            Op::Gather(op) => op,
            Op::ScatterAdd(op) => op,
            Op::Attention(op) => op,
            Op::Rope(op) => op,
            Op::Conv(op) => op,
            Op::ConvTranspose(op) => op,
            Op::Pool(op) => op,
            Op::Upsample(op) => op,
            Op::TopK(op) => op,
            Op::Sort(op) => op,
            Op::Solve => &linalg::Solve,
            Op::QuantizedMatMul(op) => op,
            Op::Custom(op) => op,
        }
    }

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

//! Every op of the IR, a file per op (or per small family sharing one rule): the
//! attribute struct each [`Op`] variant holds and its [`Primitive`] impl, which states the
//! op's meaning (name, printing, dim binding, shape and dtype inference, gradient, its
//! float64 value, the tolerance of a backend's values against that, random instances, and
//! for a composite its decomposition). Backends keep their lowerings in their own trees.
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
pub(crate) mod linalg;
mod movement;
mod nn;
mod norm;
mod random;
mod reduce;
mod sample;
mod sample_token;
mod softmax;
mod sort;
mod spatial;
mod tolerance;

pub use custom::Custom;
pub use elementwise::Cast;
pub(crate) use elementwise::Where;
pub use evaluate::{ReferenceError, evaluate_reference};
pub(crate) use leaf::{Input, Param, State};
pub(crate) use linalg::Solve;
pub use linalg::{
    ActivationPrecision, BLOCK_FORMATS, BlockDequantize, BlockMatMul, Dequantize, GatherMatMul,
    MatMul, QuantizedMatMul, ScatterMatMul, block_matmul_supports,
};
pub(crate) use movement::{After, Checkpoint, StopGradient, offsets_per_row};
pub use movement::{
    Broadcast, Concat, DynamicSlice, Gather, Pad, Permute, Reshape, ScatterAdd, Slice, SliceUpdate,
};
pub use nn::{Attention, Rope};
pub use norm::{LayerNorm, RmsNorm};
pub use random::RandomUniform;
pub(crate) use random::{random_key, uniform_at};
pub use reduce::{ArgReduce, Cumsum, LinearScan, Reduce};
pub(crate) use reduce::{DeltaRule, DeltaRuleGrad};
pub use sample::{Sampled, Sampler};
pub use sample_token::SampleToken;
pub use softmax::Softmax;
pub use sort::{Sort, TopK};
pub use spatial::{Conv, ConvTranspose, Pool, Upsample};
pub use tolerance::{Judgement, Tolerance};

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{InferError, NodeId, TensorType};
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
    /// only through others (a leaf) or not at all (a custom op).
    fn sample(s: &mut dyn Sampler) -> Sampled
    where
        Self: Sized;

    /// For a composite, the op written with other ops on the operands `x` (added to `b`);
    /// `None` for a primitive. See `composite.rs` for what a decomposition gives.
    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>>;
}

/// The one list of the vocabulary: each [`Op`] variant with its doc comment, and the
/// definition it dispatches to (its payload, or the unit struct after `=`), whose
/// [`Primitive::sample`] makes it. From it come [`Op`], [`OpKind`], [`Op::kind`],
/// [`Op::primitive`], [`OpKind::sample`], `From<payload> for Op` and `lowering_of!`
/// (each backend's dispatch to its lowering of a primitive), each match exhaustive: a new op
/// is one entry here and its module, and rustc then asks each backend for its lowering.
macro_rules! registry {
    (
        // `$`, for the macros this one defines.
        ($d:tt)
        $(#[$op_doc:meta])*
        enum Op {
            primitives {
                $( $(#[$doc:meta])* $kind:ident $(($payload:ty))? $(= $unit:path)? ; )+
            }
            composites {
                $( $(#[$cdoc:meta])* $ckind:ident($cpayload:ty); )+
            }
        }
    ) => {
        $(#[$op_doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum Op {
            $( $(#[$doc])* $kind $(($payload))?, )+
            $( $(#[$cdoc])* $ckind($cpayload), )+
        }

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
            $($ckind,)+
        }

        impl OpKind {
            /// Every kind, in the order of [`Op`]'s variants.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$kind,)+ $(OpKind::$ckind,)+];

            /// A random valid node of this kind over the nodes `s` has made, or `None` when
            /// none turned up (no fitting operand, say), from the op's own module. Leaves
            /// (made by the generator itself) and custom ops (known only by their kernels)
            /// have none.
            pub fn sample(self, s: &mut dyn Sampler) -> Sampled {
                match self {
                    $(OpKind::$kind => <registry!(@type $(($payload))? $(= $unit)?) as Primitive>::sample(s),)+
                    $(OpKind::$ckind => <$cpayload as Primitive>::sample(s),)+
                }
            }
        }

        impl Op {
            /// The op's definition.
            pub(crate) fn primitive(&self) -> &dyn Primitive {
                match self {
                    $(crate::ops::op_arm!(@pattern $kind, op $(, $payload)?) => crate::ops::op_arm!(@definition op $(, $payload)? $(= $unit)?),)+
                    $(Op::$ckind(op) => op,)+
                }
            }

            /// Which variant this is.
            #[allow(unused_variables)]
            pub fn kind(&self) -> OpKind {
                match self {
                    $(crate::ops::op_arm!(@pattern $kind, op $(, $payload)?) => OpKind::$kind,)+
                    $(Op::$ckind(_) => OpKind::$ckind,)+
                }
            }

        }

        $( registry!(@from $kind $(, $payload)?); )+
        $( registry!(@from $ckind, $cpayload); )+

        /// `lowering_of!(op, Trait)`: the definition of the primitive `op` as a backend's
        /// `&dyn Trait`, or `None` for a composite. A backend that keeps each primitive's
        /// lowering in an impl of its own trait finds it so, with no list of ops of its
        /// own: a primitive without the impl is a compile error naming it.
        macro_rules! lowering_of {
            ($d op:expr, $d lowering:path) => {
                match $d op {
                    $(crate::ops::op_arm!(@pattern $kind, op $(, $payload)?) => Some(crate::ops::op_arm!(@definition op $(, $payload)? $(= $unit)?) as &dyn $d lowering),)+
                    $(crate::ir::Op::$ckind(_))|+ => None,
                }
            };
        }
        pub(crate) use lowering_of;
    };
    (@type ($payload:ty)) => { $payload };
    (@type = $unit:path) => { $unit };
    (@from $kind:ident, $payload:ty) => {
        impl From<$payload> for Op {
            fn from(op: $payload) -> Op {
                Op::$kind(op)
            }
        }
    };
    (@from $kind:ident) => {};
}

/// The two shapes of an entry of `registry!` in a match: a variant with its payload or a
/// unit variant, and the definition it dispatches to.
macro_rules! op_arm {
    (@pattern $kind:ident, $op:ident, $payload:ty) => {
        crate::ir::Op::$kind($op)
    };
    (@pattern $kind:ident, $op:ident) => {
        crate::ir::Op::$kind
    };
    (@definition $op:ident, $payload:ty) => {
        $op
    };
    (@definition $op:ident = $unit:path) => {
        &$unit
    };
}
pub(crate) use op_arm;

registry! {
    ($)
    /// One operation of the IR. Operands are listed per variant; shape and dtype rules live in
    /// [`Op::infer`](crate::ir::Op::infer).
    ///
    /// ```
    /// use rlx::ir::{DType, Op, TensorType, UnaryOp};
    /// let x = TensorType::new(DType::F32, [4, 8]);
    /// assert_eq!(Op::Unary(UnaryOp::Exp).infer(&[x.clone()]).unwrap(), x);
    /// assert_eq!(Op::Unary(UnaryOp::Exp).to_string(), "exp");
    /// ```
    enum Op {
        primitives {
            /// A graph input, supplied on every run; its node's name is unique among inputs.
            /// No operands.
            Input = crate::ops::Input;
            /// A weight, bound once per executable; its node's name (a dotted path such as
            /// `encoder.layer.0.weight`) is unique among params. No operands.
            Param = crate::ops::Param;
            /// Persistent state: read at the start of each run, replaced when the run ends
            /// by the value the graph writes to it ([`Graph::writes`](crate::ir::Graph::writes)),
            /// held between runs by a [`Context`](crate::backend::Context). Its node's name is
            /// unique among states and its shape is static. No operands.
            State = crate::ops::State;
            /// Data embedded in the graph. No operands.
            Constant(crate::ir::ConstantData);
            /// `f(x)`. Operands: `x`.
            Unary(crate::ir::UnaryOp);
            /// `f(a, b)` with broadcasting. Operands: `a`, `b` of one dtype.
            Binary(crate::ir::BinaryOp);
            /// Comparison to `bool` with broadcasting. Operands: `a`, `b` of one dtype.
            Compare(crate::ir::CompareOp);
            /// `cond ? a : b` with broadcasting of all three. Operands: `cond` (`bool`), `a`, `b`.
            Where = crate::ops::Where;
            /// See [`Cast`].
            Cast(Cast);
            /// See [`MatMul`].
            MatMul(MatMul);
            /// See [`GatherMatMul`].
            GatherMatMul(GatherMatMul);
            /// See [`ScatterMatMul`].
            ScatterMatMul(ScatterMatMul);
            /// See [`Reduce`].
            Reduce(Reduce);
            /// See [`ArgReduce`].
            ArgReduce(ArgReduce);
            /// See [`Cumsum`].
            Cumsum(Cumsum);
            /// See [`LinearScan`].
            LinearScan(LinearScan);
            /// The gated delta rule of Gated DeltaNet, along the second-to-last axis: per
            /// line a `K x V` state `S` runs `S_t = α_t S_{t-1} + k_t δ_tᵀ` with
            /// `α_t = exp(g_t)` and `δ_t = β_t (v_t − α_t S_{t-1}ᵀ k_t)`, and step `t` outputs
            /// `S_tᵀ q_t`. Operands: `q`, `k` `[.., T, K]`, `v` `[.., T, V]`, `g`, `beta`
            /// `[.., T]`, optionally the starting state `s0` `[.., K, V]` (else 0); floats of
            /// one type. Result `[.., T + K, V]`: the `T` outputs, then the final state.
            DeltaRule = crate::ops::DeltaRule;
            /// The gradient of [`Op::DeltaRule`] with respect to every operand, in one
            /// backward pass. Operands: the rule's, then the cotangent of its result.
            /// Result `[.., T + K, 2K + V + 2]`: row `t` holds `∂q_t`, `∂k_t`, `∂v_t`,
            /// `∂g_t`, `∂beta_t`; the last `K` rows hold `∂s0` in their first `V` columns
            /// (0 elsewhere).
            DeltaRuleGrad = crate::ops::DeltaRuleGrad;
            /// `x` unchanged, but the autodiff transform sends no gradient through it
            /// (`stop_gradient`, PyTorch's `detach`). Operands: `x`.
            StopGradient = crate::ops::StopGradient;
            /// `x` unchanged: a value the backward pass keeps when a training graph
            /// recomputes activations ([`autodiff::Recompute`](crate::autodiff::Recompute)).
            /// Operands: `x`.
            Checkpoint = crate::ops::Checkpoint;
            /// `x` unchanged, computed only after `token`: what recomputed values read
            /// their checkpoints through. Operands: `x`, `token` (any type).
            After = crate::ops::After;
            /// See [`Reshape`].
            Reshape(Reshape);
            /// See [`Permute`].
            Permute(Permute);
            /// See [`Slice`].
            Slice(Slice);
            /// See [`Concat`].
            Concat(Concat);
            /// See [`Broadcast`].
            Broadcast(Broadcast);
            /// See [`Pad`].
            Pad(Pad);
            /// See [`Gather`].
            Gather(Gather);
            /// See [`ScatterAdd`].
            ScatterAdd(ScatterAdd);
            /// See [`DynamicSlice`].
            DynamicSlice(DynamicSlice);
            /// See [`SliceUpdate`].
            SliceUpdate(SliceUpdate);
            /// See [`Attention`].
            Attention(Attention);
            /// See [`Conv`].
            Conv(Conv);
            /// See [`ConvTranspose`].
            ConvTranspose(ConvTranspose);
            /// See [`Pool`].
            Pool(Pool);
            /// See [`Upsample`].
            Upsample(Upsample);
            /// See [`TopK`].
            TopK(TopK);
            /// See [`Sort`].
            Sort(Sort);
            /// See [`RandomUniform`].
            RandomUniform(RandomUniform);
            /// Solves `a x = b` for square `a`. Operands: `a` `[.., N, N]`, `b` `[.., N, K]` (float,
            /// same batch dims).
            Solve = crate::ops::Solve;
            /// See [`QuantizedMatMul`].
            QuantizedMatMul(QuantizedMatMul);
            /// See [`BlockMatMul`].
            BlockMatMul(BlockMatMul);
            /// See [`BlockDequantize`].
            BlockDequantize(BlockDequantize);
            /// See [`Dequantize`].
            Dequantize(Dequantize);
            /// See [`Custom`].
            Custom(Custom);
        }
        composites {
            /// See [`Softmax`].
            Softmax(Softmax);
            /// See [`LayerNorm`].
            LayerNorm(LayerNorm);
            /// See [`RmsNorm`].
            RmsNorm(RmsNorm);
            /// See [`Rope`].
            Rope(Rope);
            /// See [`SampleToken`].
            SampleToken(SampleToken);
        }
    }
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

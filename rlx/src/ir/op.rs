//! The primitive op vocabulary of the IR.
//!
//! Kept deliberately small: composites are built from these by the frontends, and backends
//! implement exactly this list. Elementwise families are one op with a kind. Each variant
//! with attributes holds its op's struct (`rlx/src/ops/`), which documents its operands and
//! semantics.

use std::fmt;

use super::constant::ConstantData;
pub use super::kinds::{
    ArgReduceOp, BinaryOp, CompareOp, PoolKind, ReduceOp, SortOutput, UnaryOp, UpsampleMode,
};

use crate::ops::*;

/// Which keys a query may attend to.
///
/// For `Causal` and `SlidingWindow` the query and key sequences are aligned at their ends:
/// query `i` of `Sq` sits at key position `i + Sk - Sq`, which is what a decoder with a
/// key/value cache needs (and plain causal masking when `Sq == Sk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionMask {
    /// Every query sees every key.
    None,
    /// A query sees keys at its own position and before.
    Causal,
    /// Causal, and only the last `window` positions (including its own).
    SlidingWindow(usize),
    /// An extra operand: `bool` (true = may attend) or an additive float mask in the dtype
    /// of the queries, broadcastable to `[.., Sq, Sk]`.
    Tensor,
}

/// A value in a custom op's attribute map.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{v:?}"),
            AttrValue::Str(v) => write!(f, "{v:?}"),
            AttrValue::Ints(v) => write!(f, "{v:?}"),
            AttrValue::Floats(v) => write!(f, "{v:?}"),
        }
    }
}

/// One operation of the IR. Operands are listed per variant; shape and dtype rules live in
/// [`Op::infer`](crate::ir::Op::infer).
///
/// ```
/// use rlx::ir::{DType, Op, TensorType, UnaryOp};
/// let x = TensorType::new(DType::F32, [4, 8]);
/// assert_eq!(Op::Unary(UnaryOp::Exp).infer(&[x.clone()]).unwrap(), x);
/// assert_eq!(Op::Unary(UnaryOp::Exp).to_string(), "exp");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input, supplied on every run; its node's name is unique among inputs.
    /// No operands.
    Input,
    /// A weight, bound once per executable; its node's name (a dotted path such as
    /// `encoder.layer.0.weight`) is unique among params. No operands.
    Param,
    /// Data embedded in the graph. No operands.
    Constant(ConstantData),
    /// `f(x)`. Operands: `x`.
    Unary(UnaryOp),
    /// `f(a, b)` with broadcasting. Operands: `a`, `b` of one dtype.
    Binary(BinaryOp),
    /// Comparison to `bool` with broadcasting. Operands: `a`, `b` of one dtype.
    Compare(CompareOp),
    /// `cond ? a : b` with broadcasting of all three. Operands: `cond` (`bool`), `a`, `b`.
    Where,
    /// See [`Cast`].
    Cast(Cast),
    /// See [`MatMul`].
    MatMul(MatMul),
    /// See [`Reduce`].
    Reduce(Reduce),
    /// See [`ArgReduce`].
    ArgReduce(ArgReduce),
    /// See [`Cumsum`].
    Cumsum(Cumsum),
    /// See [`Softmax`].
    Softmax(Softmax),
    /// See [`LayerNorm`].
    LayerNorm(LayerNorm),
    /// See [`RmsNorm`].
    RmsNorm(RmsNorm),
    /// `x` unchanged, but the autodiff transform sends no gradient through it
    /// (`stop_gradient`, PyTorch's `detach`). Operands: `x`.
    StopGradient,
    /// See [`Reshape`].
    Reshape(Reshape),
    /// See [`Permute`].
    Permute(Permute),
    /// See [`Slice`].
    Slice(Slice),
    /// See [`Concat`].
    Concat(Concat),
    /// See [`Broadcast`].
    Broadcast(Broadcast),
    /// See [`Pad`].
    Pad(Pad),
    /// See [`Gather`].
    Gather(Gather),
    /// See [`ScatterAdd`].
    ScatterAdd(ScatterAdd),
    /// See [`Attention`].
    Attention(Attention),
    /// See [`Rope`].
    Rope(Rope),
    /// See [`Conv`].
    Conv(Conv),
    /// See [`ConvTranspose`].
    ConvTranspose(ConvTranspose),
    /// See [`Pool`].
    Pool(Pool),
    /// See [`Upsample`].
    Upsample(Upsample),
    /// See [`TopK`].
    TopK(TopK),
    /// See [`Sort`].
    Sort(Sort),
    /// Solves `a x = b` for square `a`. Operands: `a` `[.., N, N]`, `b` `[.., N, K]` (float,
    /// same batch dims).
    Solve,
    /// See [`QuantizedMatMul`].
    QuantizedMatMul(QuantizedMatMul),
    /// See [`Custom`].
    Custom(Custom),
}

impl Op {
    /// True for the leaves: inputs, params and constants.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input | Op::Param | Op::Constant(_))
    }

    /// This op with the dims its attributes hold (reshape and broadcast targets, upsampling
    /// sizes, a custom op's declared output) replaced by `out`, the node's output dims
    /// once its runtime dims are bound; ops without dims in their attributes are returned
    /// unchanged. Backends re-check each node's rules on bound shapes with it.
    ///
    /// ```
    /// use rlx::ir::{Dim, Op, Shape};
    /// let op = Op::Reshape(rlx::ir::Reshape { shape: Shape::new([Dim::sym("batch"), Dim::Static(4)]) });
    /// assert_eq!(op.bind_dims(&[2, 4]), Op::Reshape(rlx::ir::Reshape { shape: Shape::from([2, 4]) }));
    /// ```
    pub fn bind_dims(&self, out: &[usize]) -> Op {
        self.primitive().bind_dims(out)
    }
}

/// Writes `name` then the non-default attributes as `[k=v, ...]`.
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut attrs: Vec<String> = Vec::new();
        self.primitive().attrs(&mut attrs);
        if !attrs.is_empty() {
            write!(f, "[{}]", attrs.join(", "))?;
        }
        Ok(())
    }
}

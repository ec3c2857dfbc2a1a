//! What the fusion passes put into [`Op::FusedElementwise`] and [`Op::FusedMatMul`]: the
//! steps of an elementwise chain and a matmul's epilogue.

use super::kinds::{BinaryOp, UnaryOp};
#[cfg(doc)]
use super::op::Op;

/// A value one step of an [`Op::FusedElementwise`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementwiseArg {
    /// Operand `i` of the fused node.
    Operand(usize),
    /// The result of step `i`, an earlier step.
    Step(usize),
}

/// One step of an [`Op::FusedElementwise`]: an elementwise float op of earlier values.
///
/// ```
/// use rlx::ir::{BinaryOp, DType, ElementwiseArg, ElementwiseStep, Op, TensorType, UnaryOp};
/// // tanh(x * y)
/// let steps = vec![
///     ElementwiseStep::Binary(BinaryOp::Mul, ElementwiseArg::Operand(0), ElementwiseArg::Operand(1)),
///     ElementwiseStep::Unary(UnaryOp::Tanh, ElementwiseArg::Step(0)),
/// ];
/// let op = Op::FusedElementwise(rlx::ir::FusedElementwise { steps });
/// let t = TensorType::new(DType::F32, [4, 8]);
/// assert_eq!(op.infer(&[t.clone(), t.clone()]).unwrap(), t);
/// assert_eq!(op.to_string(), "fused_elementwise[mul, tanh]");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElementwiseStep {
    /// `f(x)`.
    Unary(UnaryOp, ElementwiseArg),
    /// `f(a, b)`.
    Binary(BinaryOp, ElementwiseArg, ElementwiseArg),
}

impl ElementwiseStep {
    /// Most operands plus steps one [`Op::FusedElementwise`] may have: a backend keeps a
    /// block of each in fast memory.
    pub const MAX_VALUES: usize = 24;

    /// The op's name, as printed.
    pub fn name(&self) -> &'static str {
        match self {
            ElementwiseStep::Unary(kind, _) => kind.name(),
            ElementwiseStep::Binary(kind, _, _) => kind.name(),
        }
    }

    /// The values the step reads.
    pub fn args(&self) -> Vec<ElementwiseArg> {
        match *self {
            ElementwiseStep::Unary(_, x) => vec![x],
            ElementwiseStep::Binary(_, a, b) => vec![a, b],
        }
    }
}

/// What a [`Op::FusedMatMul`] does to its product before storing it:
/// `activation(a·b + bias) + residual`, each part optional.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MatMulEpilogue {
    /// Adds a `[N]` operand to every row.
    pub bias: bool,
    /// Applies an elementwise function of floats.
    pub activation: Option<UnaryOp>,
    /// Adds an operand of the output's type (a residual connection).
    pub residual: bool,
}

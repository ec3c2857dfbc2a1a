//! Matrix products (plain, with an epilogue, quantized) and linear solves.

mod grad;
mod infer;

use super::Primitive;
use crate::autodiff::{Emitter, Grad, GradError};
use crate::ir::{InferError, MatMulEpilogue, NodeId, Op, TensorType};

/// Batched matrix product `[.., M, K] x [.., K, N] -> [.., M, N]`; batch dims broadcast.
/// Operands: `a`, `b` (float, one dtype). A transpose flag means that operand is stored
/// with its last two axes swapped, so no transposed copy is needed.
#[derive(Clone, Debug, PartialEq)]
pub struct MatMul {
    /// `a` is stored as `[.., K, M]`.
    pub transpose_a: bool,
    /// `b` is stored as `[.., N, K]` (PyTorch `Linear` weights).
    pub transpose_b: bool,
}

/// A matmul and the elementwise ops that consumed it, in one kernel:
/// `activation(a·b + bias) + residual`. Made by
/// [`fuse_matmul_epilogues`](crate::passes::fuse_matmul_epilogues), not by frontends.
/// Operands: `a`, `b`, then `bias` `[N]` if `epilogue.bias`, then `residual` (the
/// output's type) if `epilogue.residual`; one float dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedMatMul {
    /// As in [`Op::MatMul`].
    pub transpose_a: bool,
    /// As in [`Op::MatMul`].
    pub transpose_b: bool,
    /// What is applied to the product.
    pub epilogue: MatMulEpilogue,
}

/// `x · dequant(w)ᵀ` with group-wise affine dequantization
/// `w = scale * q + bias` per `group_size` consecutive inputs. Operands: `x` `[.., K]`
/// (float), `w` `[N, K*bits/8]` (`u8`, little-endian packing: for 4 bits the low nibble
/// is the first element), `scales` and `biases` `[N, K/group_size]` in the dtype of `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedMatMul {
    /// 4 or 8.
    pub bits: u8,
    /// Inputs sharing one scale and bias: 32, 64 or 128.
    pub group_size: usize,
}

/// Solves `a x = b` for square `a`. Operands: `a` `[.., N, N]`, `b` `[.., N, K]` (float,
/// same batch dims). See [`Op::Solve`].
pub(crate) struct Solve;

/// `transpose_a` and `transpose_b` as printed.
fn transposes(out: &mut Vec<String>, transpose_a: bool, transpose_b: bool) {
    if transpose_a {
        out.push("transpose_a".into());
    }
    if transpose_b {
        out.push("transpose_b".into());
    }
}

impl Primitive for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        transposes(out, self.transpose_a, self.transpose_b);
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::MatMul(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::matmul(self.transpose_a, self.transpose_b, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::matmul(e, x[0], x[1], self.transpose_a, self.transpose_b, g)
    }
}

impl Primitive for FusedMatMul {
    fn name(&self) -> &'static str {
        "fused_matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        transposes(out, self.transpose_a, self.transpose_b);
        if self.epilogue.bias {
            out.push("+bias".into());
        }
        if let Some(act) = self.epilogue.activation {
            out.push(act.name().into());
        }
        if self.epilogue.residual {
            out.push("+residual".into());
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::FusedMatMul(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::fused_matmul(self.transpose_a, self.transpose_b, &self.epilogue, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::fused_matmul(e, x, self.transpose_a, self.transpose_b, &self.epilogue, g)
    }
}

impl Primitive for QuantizedMatMul {
    fn name(&self) -> &'static str {
        "quantized_matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!(
            "bits={}, group_size={}",
            self.bits, self.group_size
        ));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::QuantizedMatMul(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::quantized_matmul(self.bits, self.group_size, inputs)
    }

    /// Quantized weights (packed integers, their scales and offsets) are not trained; the
    /// activations' gradient needs a dequantizing op the IR does not have yet.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::NotYet, Grad::None, Grad::None, Grad::None])
    }
}

impl Primitive for Solve {
    fn name(&self) -> &'static str {
        "solve"
    }

    fn attrs(&self, _: &mut Vec<String>) {}

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Solve
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        infer::solve(inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        grad::solve(e, x[0], x[1], y, g)
    }
}

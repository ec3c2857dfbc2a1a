//! Shape and dtype inference: what each op produces from its operands, or why it cannot.
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

mod elementwise;
mod linalg;
mod movement;
mod nn;
mod reduce;
mod spatial;

use super::dim::Dim;
use super::dtype::DType;
use super::error::{InferError, attr_err};
use super::kinds::Domain;
use super::op::Op;
use super::shape::{Shape, TensorType};

impl Op {
    /// The type this op produces from operands of types `inputs`.
    ///
    /// ```
    /// use rlx::ir::{DType, Dim, Op, Shape, TensorType};
    /// let x = TensorType::new(DType::F32, [Dim::sym("batch"), Dim::from(384)]);
    /// let w = TensorType::new(DType::F32, [384, 1536]);
    /// let mm = Op::MatMul { transpose_a: false, transpose_b: false };
    /// assert_eq!(mm.infer(&[x.clone(), w]).unwrap().to_string(), "f32[batch,1536]");
    ///
    /// let bad = TensorType::new(DType::F32, [385, 1536]);
    /// let err = mm.infer(&[x, bad]).unwrap_err();
    /// assert_eq!(err.to_string(), "inner dims 384 and 385 differ");
    /// ```
    pub fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        match self {
            Op::Input | Op::Param => Err(attr_err!(
                "{} nodes take their type from their declaration, not from operands",
                self.name()
            )),
            Op::Constant(data) => {
                arity(inputs, 0, "0")?;
                Ok(data.ty().clone())
            }
            Op::Unary(kind) => elementwise::unary(*kind, inputs),
            Op::Binary(kind) => elementwise::binary(*kind, inputs),
            Op::FusedElementwise { steps } => elementwise::fused(steps, inputs),
            Op::Compare(kind) => elementwise::compare(*kind, inputs),
            Op::Where => elementwise::select(inputs),
            Op::Cast { to } => elementwise::cast(*to, inputs),
            Op::MatMul {
                transpose_a,
                transpose_b,
            } => linalg::matmul(*transpose_a, *transpose_b, inputs),
            Op::FusedMatMul {
                transpose_a,
                transpose_b,
                epilogue,
            } => linalg::fused_matmul(*transpose_a, *transpose_b, epilogue, inputs),
            Op::Solve => linalg::solve(inputs),
            Op::QuantizedMatMul { bits, group_size } => {
                linalg::quantized_matmul(*bits, *group_size, inputs)
            }
            Op::Reduce {
                op,
                axes,
                keep_dims,
            } => reduce::reduce(*op, axes, *keep_dims, inputs),
            Op::ArgReduce {
                axis, keep_dims, ..
            } => reduce::arg_reduce(*axis, *keep_dims, inputs),
            Op::Cumsum { axis, .. } => reduce::cumsum(*axis, inputs),
            Op::Softmax { axis, .. } => reduce::softmax(*axis, inputs),
            Op::LayerNorm {
                eps,
                has_weight,
                has_bias,
            } => reduce::norm(*eps, *has_weight, *has_bias, inputs),
            Op::RmsNorm { eps, has_weight } => reduce::norm(*eps, *has_weight, false, inputs),
            Op::TopK { k, axis, output } => reduce::topk(*k, *axis, *output, inputs),
            Op::Sort { axis, output, .. } => reduce::sort(*axis, *output, inputs),
            Op::StopGradient => movement::identity(inputs),
            Op::Reshape { shape } => movement::reshape(shape, inputs),
            Op::Permute { perm } => movement::permute(perm, inputs),
            Op::Slice {
                axis,
                start,
                stop,
                step,
            } => movement::slice(*axis, *start, *stop, *step, inputs),
            Op::Concat { axis } => movement::concat(*axis, inputs),
            Op::Broadcast { shape } => movement::broadcast(shape, inputs),
            Op::Pad { pads, .. } => movement::pad(pads, inputs),
            Op::Gather { axis } => movement::gather(*axis, inputs),
            Op::ScatterAdd { axis } => movement::scatter_add(*axis, inputs),
            Op::Attention { scale, mask } => nn::attention(*scale, *mask, inputs),
            Op::Rope {
                dims, base, scale, ..
            } => nn::rope(*dims, *base, *scale, inputs),
            Op::Conv {
                stride,
                padding,
                dilation,
                groups,
            } => spatial::conv(stride, padding, dilation, *groups, inputs),
            Op::Pool {
                kernel,
                stride,
                padding,
                ..
            } => spatial::pool(kernel, stride, padding, inputs),
            Op::ConvTranspose {
                stride,
                padding,
                output_padding,
                dilation,
                groups,
            } => {
                spatial::conv_transpose(stride, padding, output_padding, dilation, *groups, inputs)
            }
            Op::Upsample { size, .. } => spatial::upsample(size, inputs),
            Op::Custom { name, output, .. } if !name.is_empty() => Ok(output.clone()),
            Op::Custom { .. } => Err(attr_err!("a custom op needs a non-empty name")),
        }
    }
}

fn arity(inputs: &[TensorType], n: usize, expected: &'static str) -> Result<(), InferError> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(InferError::Arity {
            expected,
            got: inputs.len(),
        })
    }
}

fn arity_range(
    inputs: &[TensorType],
    range: std::ops::RangeInclusive<usize>,
    expected: &'static str,
) -> Result<(), InferError> {
    if range.contains(&inputs.len()) {
        Ok(())
    } else {
        Err(InferError::Arity {
            expected,
            got: inputs.len(),
        })
    }
}

fn require_float(inputs: &[TensorType], operand: usize) -> Result<(), InferError> {
    require_domain(inputs, operand, Domain::Float)
}

fn require_numeric(inputs: &[TensorType], operand: usize) -> Result<(), InferError> {
    require_domain(inputs, operand, Domain::Numeric)
}

/// The operand's dtype is in the domain of an op kind.
fn require_domain(inputs: &[TensorType], operand: usize, domain: Domain) -> Result<(), InferError> {
    require(inputs, operand, |d| domain.admits(d), domain.describe())
}

fn require_index(inputs: &[TensorType], operand: usize) -> Result<(), InferError> {
    require(
        inputs,
        operand,
        |d| matches!(d, DType::I32 | DType::I64),
        "i32 or i64",
    )
}

fn require(
    inputs: &[TensorType],
    operand: usize,
    ok: impl Fn(DType) -> bool,
    expected: &'static str,
) -> Result<(), InferError> {
    let got = inputs[operand].dtype;
    if ok(got) {
        Ok(())
    } else {
        Err(InferError::DType {
            operand,
            expected,
            got,
        })
    }
}

fn same_dtype(inputs: &[TensorType], a: usize, b: usize) -> Result<(), InferError> {
    let (a_dtype, b_dtype) = (inputs[a].dtype, inputs[b].dtype);
    if a_dtype == b_dtype {
        Ok(())
    } else {
        Err(InferError::DTypeMismatch {
            a,
            a_dtype,
            b,
            b_dtype,
        })
    }
}

fn min_rank(inputs: &[TensorType], operand: usize, min: usize) -> Result<(), InferError> {
    let got = inputs[operand].rank();
    if got >= min {
        Ok(())
    } else {
        Err(InferError::Rank {
            operand,
            expected: format!("at least {min}"),
            got,
        })
    }
}

fn exact_rank(inputs: &[TensorType], operand: usize, rank: usize) -> Result<(), InferError> {
    let got = inputs[operand].rank();
    if got == rank {
        Ok(())
    } else {
        Err(InferError::Rank {
            operand,
            expected: rank.to_string(),
            got,
        })
    }
}

fn check_axis(axis: usize, rank: usize) -> Result<(), InferError> {
    if axis < rank {
        Ok(())
    } else {
        Err(InferError::Axis { axis, rank })
    }
}

fn same_dim(what: &str, a: &Dim, b: &Dim) -> Result<(), InferError> {
    if a == b {
        Ok(())
    } else {
        Err(InferError::DimMismatch {
            what: what.to_string(),
            a: a.clone(),
            b: b.clone(),
        })
    }
}

/// Numpy broadcasting of two shapes: right-aligned; a static 1 stretches; anything else
/// must be provably equal.
fn broadcast_shapes(a: &Shape, b: &Shape) -> Result<Shape, InferError> {
    let rank = a.rank().max(b.rank());
    let pad = |s: &Shape, i: usize| -> Dim {
        let offset = rank - s.rank();
        if i < offset {
            Dim::Static(1)
        } else {
            s[i - offset].clone()
        }
    };
    let mut dims = Vec::with_capacity(rank);
    for i in 0..rank {
        let (da, db) = (pad(a, i), pad(b, i));
        let d = if da == db || db.is_one() {
            da
        } else if da.is_one() {
            db
        } else {
            return Err(InferError::Broadcast {
                a: a.clone(),
                b: b.clone(),
                a_dim: da,
                b_dim: db,
            });
        };
        dims.push(d);
    }
    Ok(Shape::new(dims))
}

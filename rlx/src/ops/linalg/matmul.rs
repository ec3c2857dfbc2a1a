//! Matrix product, batched with broadcasting, either operand transposed.

use super::{matmul_op, products, split_matrix, transposes};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{Dim, InferError, NodeId, Op, Shape, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, broadcast_shapes, min_rank, require_float, same_dim, same_dtype};
use crate::ops::sample::{Sampled, Sampler, chance, dims};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

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
        matmul_type(self.transpose_a, self.transpose_b, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        matmul_vjp(e, x[0], x[1], self.transpose_a, self.transpose_b, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let (abs, growth) = product_bound(x, self.transpose_a);
        Bound::Within {
            rel: 2.0 * x.u,
            abs,
            growth,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(matmul_value(self.transpose_a, self.transpose_b, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_matmul(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn matmul_type(
    transpose_a: bool,
    transpose_b: bool,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2")?;
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    min_rank(inputs, 0, 2)?;
    min_rank(inputs, 1, 2)?;
    let (batch_a, a0, a1) = split_matrix(&inputs[0].shape);
    let (batch_b, b0, b1) = split_matrix(&inputs[1].shape);
    let (m, k_a) = if transpose_a { (a1, a0) } else { (a0, a1) };
    let (k_b, n) = if transpose_b { (b1, b0) } else { (b0, b1) };
    same_dim("inner dims", &k_a, &k_b)?;
    let mut dims = broadcast_shapes(&batch_a, &batch_b)?.dims().to_vec();
    dims.extend([m, n]);
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// `y = A'·B'` with `A' = aᵀ` if `transpose_a` (likewise `b`): `gA' = g·B'ᵀ`,
/// `gB' = A'ᵀ·g`, each expressed with transpose flags so no transposed copy is made, then
/// summed over broadcast batch dims.
fn matmul_vjp(
    e: &mut Emitter<'_>,
    a: NodeId,
    b: NodeId,
    transpose_a: bool,
    transpose_b: bool,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let ga = if transpose_a {
        // gA = (g·B'ᵀ)ᵀ = B'·gᵀ
        matmul_op(e, b, g, transpose_b, true)?
    } else {
        matmul_op(e, g, b, false, !transpose_b)?
    };
    let (a_shape, b_shape) = (e.shape(a), e.shape(b));
    let gb = if b_shape.rank() == 2 && a_shape.rank() > 2 && !transpose_a {
        // A weight shared by every batch: one GEMM over all rows, [K, (..)·M]·[(..)·M, N],
        // instead of a product per batch entry summed afterwards.
        let r = a_shape.rank();
        let rows = Dim::product(&a_shape.dims()[..r - 1]);
        let gs = e.shape(g);
        let a2 = e.reshape(a, Shape::new([rows.clone(), a_shape[r - 1].clone()]))?;
        let g2 = e.reshape(g, Shape::new([rows, gs[gs.rank() - 1].clone()]))?;
        if transpose_b {
            matmul_op(e, g2, a2, true, false)?
        } else {
            matmul_op(e, a2, g2, true, false)?
        }
    } else if transpose_b {
        // gB = (A'ᵀ·g)ᵀ = gᵀ·A'
        matmul_op(e, g, a, true, transpose_a)?
    } else {
        matmul_op(e, a, g, !transpose_a, false)?
    };
    let ga = e.unbroadcast(ga, &e.shape(a))?;
    let gb = e.unbroadcast(gb, &e.shape(b))?;
    Ok(vec![Grad::Some(ga), Grad::Some(gb)])
}

fn matmul_value(transpose_a: bool, transpose_b: bool, x: &[Array], out: &Out) -> Array {
    out.holding(products(&x[0], &x[1], transpose_a, transpose_b, out))
}

/// A float operand times a new input or param of fitting dims, either operand maybe
/// stored transposed, `b` with `a`'s batch dims or none.
fn random_matmul(s: &mut dyn Sampler) -> Sampled {
    let a = s.operand(&|t| t.dtype.is_float() && t.rank() > 0)?;
    let dtype = s.ty(a).dtype;
    let a_dims = dims(s, a);
    let rank = a_dims.len();
    let transpose_a = rank >= 2 && chance(s, 0.3);
    let k = if transpose_a {
        a_dims[rank - 2].clone()
    } else {
        a_dims[rank - 1].clone()
    };
    let n = s.dim();
    let transpose_b = chance(s, 0.4);
    let mut b_dims = if transpose_b { vec![n, k] } else { vec![k, n] };
    if rank > 2 && chance(s, 0.4) {
        let mut batch = a_dims[..rank - 2].to_vec();
        batch.extend(b_dims);
        b_dims = batch;
    }
    let fixed: Option<Vec<usize>> = b_dims.iter().map(Dim::as_static).collect();
    let b = match fixed {
        Some(fixed) if chance(s, 0.5) => s.param(dtype, &fixed, None)?,
        _ => s.input(dtype, b_dims)?,
    };
    let op = Op::MatMul(MatMul {
        transpose_a,
        transpose_b,
    });
    Some((op, vec![a, b]))
}

/// A product over `k` terms of two operands up to `scale`.
fn product_bound(x: &Operands<'_>, transpose_a: bool) -> (f64, f64) {
    let a = x.dims(0);
    let k = if transpose_a && a.len() >= 2 {
        a[a.len() - 2]
    } else {
        a.last().copied().unwrap_or(1)
    }
    .max(1) as f64;
    let abs = 2.0 * x.u * k * k * x.scale * x.scale + x.tiny;
    (abs, k * x.scale * x.scale)
}

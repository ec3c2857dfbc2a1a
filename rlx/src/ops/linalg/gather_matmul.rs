//! Products with a matrix chosen per row: the gathered product a mixture-of-experts layer
//! runs each routed token through its expert's weights with, and its transpose, which
//! sums the outer products of the rows routed to each matrix (the experts' weight gradient).
//!
//! Both work on *pairs*: `indices` has dims `[.., S]`, one matrix index per pair (a token
//! and one of its `S` routed experts). The rows they multiply are given either per pair
//! (dims `[.., S, K]`) or per token (`[.., K]`, shared by the token's `S` pairs).

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{ConstantData, DType, Dim, InferError, NodeId, Op, ReduceOp, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{
    arity, exact_rank, min_rank, require_float, require_index, same_dim, same_dtype,
};
use crate::ops::sample::{Sampled, Sampler, chance, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// `y[.., s, :] = x[.., (s,) :] · w[indices[.., s]]`: each pair's row times the matrix its
/// index picks. Operands: `x` (float, dims `[.., K]` shared by a token's pairs or
/// `[.., S, K]` per pair), `w` (`x`'s dtype, `[E, K, N]`, or `[E, N, K]` when
/// `transpose_b`, as `Linear` weights are stored), `indices` (`i32`/`i64`, dims `[.., S]`,
/// each in `0..E`). The result is `[.., S, N]`.
///
/// Only the chosen matrices are read, each once for all rows routed to it: a mixture of
/// `E` experts with `S` active costs `S/E` of running every expert densely.
///
/// ```
/// use rlx::builder::GraphBuilder;
/// use rlx::ir::{DType, GatherMatMul, Op};
/// let mut g = GraphBuilder::new();
/// let x = g.input("x", DType::F32, [5, 16])?;
/// let experts = g.input("experts", DType::F32, [8, 32, 16])?;
/// let routed = g.input("routed", DType::I64, [5, 2])?;
/// let y = g.op(Op::GatherMatMul(GatherMatMul { transpose_b: true }), &[x, experts, routed])?;
/// assert_eq!(g.ty(y).unwrap().shape, [5, 2, 32].into());
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct GatherMatMul {
    /// `w` is stored `[E, N, K]`.
    pub transpose_b: bool,
}

/// `out[e] = Σ x[p]ᵀ · g[p]` over the pairs `p` whose index is `e` (`Σ g[p]ᵀ · x[p]` when
/// `transpose`): the transpose of [`GatherMatMul`], and the gradient of its matrices.
/// Operands: `x` (float, `[.., K]` per token or `[.., S, K]` per pair), `g` (`x`'s dtype,
/// `[.., S, N]`), `indices` (`i32`/`i64`, `[.., S]`, each in `0..groups`). The result is
/// `[groups, K, N]`, or `[groups, N, K]` when `transpose`; a matrix no pair picks is zero.
///
/// ```
/// use rlx::builder::GraphBuilder;
/// use rlx::ir::{DType, Op, ScatterMatMul};
/// let mut g = GraphBuilder::new();
/// let x = g.input("x", DType::F32, [5, 16])?;
/// let dy = g.input("dy", DType::F32, [5, 2, 32])?;
/// let routed = g.input("routed", DType::I64, [5, 2])?;
/// let op = Op::ScatterMatMul(ScatterMatMul { groups: 8, transpose: true });
/// let dw = g.op(op, &[x, dy, routed])?;
/// assert_eq!(g.ty(dw).unwrap().shape, [8, 32, 16].into());
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterMatMul {
    /// Matrices in the result (`E`).
    pub groups: usize,
    /// The result is `[groups, N, K]`.
    pub transpose: bool,
}

impl Primitive for GatherMatMul {
    fn name(&self) -> &'static str {
        "gather_matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        if self.transpose_b {
            out.push("transpose_b".into());
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::GatherMatMul(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 3, "3 (x, w, indices)")?;
        let k = pair_rows(inputs, 0, 2)?;
        same_dtype(inputs, 0, 1)?;
        exact_rank(inputs, 1, 3)?;
        let w = inputs[1].shape.dims();
        if !w[0].is_static() {
            return Err(attr_err!(
                "the number of matrices (dim 0 of w, {}) must be static",
                w[0]
            ));
        }
        let (w_k, n) = if self.transpose_b {
            (&w[2], &w[1])
        } else {
            (&w[1], &w[2])
        };
        same_dim("inner dims", &k, w_k)?;
        let mut dims = inputs[2].shape.dims().to_vec();
        dims.push(n.clone());
        Ok(TensorType::new(inputs[0].dtype, dims))
    }

    /// `x`'s cotangent is the gathered product of `g` with the transposed matrices (summed
    /// over a token's pairs when `x` is shared); `w`'s is the scattered product.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let (rows, w, indices) = (x[0], x[1], x[2]);
        let back = Op::GatherMatMul(GatherMatMul {
            transpose_b: !self.transpose_b,
        });
        let per_pair = e.op(back, &[g, w, indices])?;
        let dx = per_token(e, per_pair, rows, indices)?;
        // Inference made the number of matrices static.
        let groups = e.shape(w)[0].as_static().unwrap_or_default();
        let dw = e.op(
            Op::ScatterMatMul(ScatterMatMul {
                groups,
                transpose: self.transpose_b,
            }),
            &[rows, g, indices],
        )?;
        Ok(vec![Grad::Some(dx), Grad::Some(dw), Grad::Discrete])
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let k = x.dims(0).last().copied().unwrap_or(1).max(1) as f64;
        product_sum_bound(x, k)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        gather_matmul_value(self.transpose_b, x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_gather_matmul(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for ScatterMatMul {
    fn name(&self) -> &'static str {
        "scatter_matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("groups={}", self.groups));
        if self.transpose {
            out.push("transpose".into());
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ScatterMatMul(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 3, "3 (x, g, indices)")?;
        let k = pair_rows(inputs, 0, 2)?;
        same_dtype(inputs, 0, 1)?;
        let pairs = inputs[2].shape.dims();
        exact_rank(inputs, 1, pairs.len() + 1)?;
        let g = inputs[1].shape.dims();
        for (a, b) in pairs.iter().zip(g) {
            same_dim("dims of indices and g", a, b)?;
        }
        let n = g[pairs.len()].clone();
        let (rows, cols) = if self.transpose { (n, k) } else { (k, n) };
        Ok(TensorType::new(
            inputs[0].dtype,
            vec![Dim::from(self.groups), rows, cols],
        ))
    }

    /// Each pair's `g` row meets the cotangent of its matrix: `x`'s cotangent is
    /// `g · dOᵀ` gathered per pair (summed over a token's pairs when `x` is shared) and
    /// `g`'s is `x · dO` (each read with the transposes `transpose` implies).
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        d_out: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let (rows, g, indices) = (x[0], x[1], x[2]);
        let gathered = |e: &mut Emitter<'_>, lhs, transpose_b| {
            e.op(
                Op::GatherMatMul(GatherMatMul { transpose_b }),
                &[lhs, d_out, indices],
            )
        };
        let per_pair = gathered(e, g, !self.transpose)?;
        let dx = per_token(e, per_pair, rows, indices)?;
        let dg = gathered(e, rows, self.transpose)?;
        Ok(vec![Grad::Some(dx), Grad::Some(dg), Grad::Discrete])
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let pairs = x.dims(2).iter().product::<usize>().max(1) as f64;
        product_sum_bound(x, pairs)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        scatter_matmul_value(self.transpose, x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_scatter_matmul(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

/// Checks operand `rows` (float, a row per token or per pair) against the pairs' indices
/// (operand `indices`); returns the row length `K`.
fn pair_rows(inputs: &[TensorType], rows: usize, indices: usize) -> Result<Dim, InferError> {
    require_float(inputs, rows)?;
    require_index(inputs, indices)?;
    min_rank(inputs, indices, 1)?;
    let pairs = inputs[indices].shape.dims();
    let x = inputs[rows].shape.dims();
    if x.len() != pairs.len() && x.len() != pairs.len() + 1 {
        return Err(InferError::Rank {
            operand: rows,
            expected: format!(
                "{} (a row per token) or {} (a row per pair)",
                pairs.len(),
                pairs.len() + 1
            ),
            got: x.len(),
        });
    }
    let leading = x.len() - 1;
    for (a, b) in pairs.iter().zip(&x[..leading]) {
        same_dim("dims of indices and rows", a, b)?;
    }
    Ok(x[leading].clone())
}

/// Whether rows of rank `rows_rank` are shared by a token's pairs (indices of rank
/// `pairs_rank`).
fn shared_rows(rows_rank: usize, pairs_rank: usize) -> bool {
    rows_rank == pairs_rank
}

/// A cotangent computed per pair, summed over each token's pairs when `rows` is shared.
fn per_token(
    e: &mut Emitter<'_>,
    per_pair: NodeId,
    rows: NodeId,
    indices: NodeId,
) -> Result<NodeId, GradError> {
    let pairs_rank = e.ty(indices).rank();
    if shared_rows(e.ty(rows).rank(), pairs_rank) {
        e.reduce(ReduceOp::Sum, per_pair, vec![pairs_rank - 1], false)
    } else {
        Ok(per_pair)
    }
}

/// A sum of `n` products of two operands up to `scale`.
fn product_sum_bound(x: &Operands<'_>, n: f64) -> Bound {
    let square = x.scale * x.scale;
    Bound::Within {
        rel: 2.0 * x.u,
        abs: 2.0 * x.u * n * n * square + x.tiny,
        growth: n * square,
    }
}

/// Pair `p`'s matrix index, checked against `groups`.
fn group_of(indices: &Array, p: usize, groups: usize) -> Result<usize, ReferenceError> {
    let v = indices.data[p] as i64;
    usize::try_from(v)
        .ok()
        .filter(|v| *v < groups)
        .ok_or(ReferenceError::IndexOutOfRange {
            index: v,
            size: groups,
        })
}

/// The flat offset of pair `p`'s row in `x` (`S` pairs per token).
fn row_offset(x: &Array, pairs: &Array, p: usize) -> usize {
    let k = x.shape[x.shape.len() - 1];
    let s = pairs.shape[pairs.shape.len() - 1];
    let row = if shared_rows(x.shape.len(), pairs.shape.len()) {
        p / s
    } else {
        p
    };
    row * k
}

fn gather_matmul_value(transpose_b: bool, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
    let (rows, w, indices) = (&x[0], &x[1], &x[2]);
    let (groups, k) = (w.shape[0], rows.shape[rows.shape.len() - 1]);
    let n = out.shape[out.shape.len() - 1];
    let mut data = vec![0.0; indices.data.len() * n];
    for (p, y) in data
        .chunks_exact_mut(n.max(1))
        .enumerate()
        .take(indices.data.len())
    {
        let e = group_of(indices, p, groups)?;
        let row = &rows.data[row_offset(rows, indices, p)..][..k];
        let matrix = &w.data[e * k * n..][..k * n];
        for (j, v) in y.iter_mut().enumerate() {
            *v = (0..k)
                .map(|i| {
                    let at = if transpose_b { j * k + i } else { i * n + j };
                    row[i] * matrix[at]
                })
                .sum();
        }
    }
    Ok(out.holding(data))
}

fn scatter_matmul_value(transpose: bool, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
    let (rows, g, indices) = (&x[0], &x[1], &x[2]);
    let groups = out.shape[0];
    let k = rows.shape[rows.shape.len() - 1];
    let n = g.shape[g.shape.len() - 1];
    let mut data = vec![0.0; groups * k * n];
    for p in 0..indices.data.len() {
        let e = group_of(indices, p, groups)?;
        let row = &rows.data[row_offset(rows, indices, p)..][..k];
        let grad = &g.data[p * n..][..n];
        let matrix = &mut data[e * k * n..][..k * n];
        for (i, a) in row.iter().enumerate() {
            for (j, b) in grad.iter().enumerate() {
                let at = if transpose { j * k + i } else { i * n + j };
                matrix[at] += a * b;
            }
        }
    }
    Ok(out.holding(data))
}

/// Random valid indices `[.., S]` into `groups` matrices for the pairs of `x`'s leading
/// dims (`S` given by `x` when its rows are per pair), as an `i32` or `i64` constant.
fn random_indices(s: &mut dyn Sampler, leading: &[usize], groups: usize) -> Option<NodeId> {
    let count: usize = leading.iter().product();
    let values: Vec<i64> = (0..count).map(|_| s.below(groups) as i64).collect();
    let shape: Vec<Dim> = leading.iter().map(|&d| Dim::from(d)).collect();
    let data = if pick(s, &[DType::I32, DType::I64]) == DType::I32 {
        let narrow: Vec<i32> = values.iter().map(|&i| i as i32).collect();
        ConstantData::from_slice(&narrow, shape.clone())
    } else {
        ConstantData::from_slice(&values, shape)
    };
    s.constant(data.ok()?)
}

/// A float operand of static dims as rows (per token, or per pair when its rank allows),
/// `S` from 1 to 3, and the pairs' indices.
fn random_pairs(s: &mut dyn Sampler, groups: usize) -> Option<(NodeId, Vec<usize>, NodeId)> {
    let x =
        s.operand(&|t| t.dtype.is_float() && t.rank() > 0 && t.shape.static_dims().is_some())?;
    let sizes = s.sizes(x);
    let leading = &sizes[..sizes.len() - 1];
    let pairs: Vec<usize> = if !leading.is_empty() && chance(s, 0.4) {
        leading.to_vec()
    } else {
        let mut pairs = leading.to_vec();
        pairs.push(1 + s.below(3));
        pairs
    };
    let indices = random_indices(s, &pairs, groups)?;
    Some((x, pairs, indices))
}

/// Rows times 1 to 4 new matrices, either layout.
fn random_gather_matmul(s: &mut dyn Sampler) -> Sampled {
    let groups = 1 + s.below(4);
    let (x, _, indices) = random_pairs(s, groups)?;
    let ty = s.ty(x);
    let k = ty.shape.dims()[ty.rank() - 1].clone();
    let n = s.dim();
    let transpose_b = chance(s, 0.5);
    let dims = if transpose_b {
        vec![Dim::from(groups), n, k]
    } else {
        vec![Dim::from(groups), k, n]
    };
    let w = s.input(ty.dtype, dims)?;
    Some((
        Op::GatherMatMul(GatherMatMul { transpose_b }),
        vec![x, w, indices],
    ))
}

/// Rows and new per-pair cotangents summed into 1 to 4 matrices, either layout.
fn random_scatter_matmul(s: &mut dyn Sampler) -> Sampled {
    let groups = 1 + s.below(4);
    let (x, pairs, indices) = random_pairs(s, groups)?;
    let dtype = s.ty(x).dtype;
    let mut dims: Vec<Dim> = pairs.iter().map(|d| Dim::from(*d)).collect();
    dims.push(s.dim());
    let g = s.input(dtype, dims)?;
    let transpose = chance(s, 0.5);
    Some((
        Op::ScatterMatMul(ScatterMatMul { groups, transpose }),
        vec![x, g, indices],
    ))
}

//! Matrix products (plain, quantized and in GGUF block formats) and linear solves, one file per op; the helpers
//! they share (matrix views, the product emitted in gradients) here.

mod block_dequantize;
mod block_matmul;
mod dequantize;
mod gather_matmul;
mod matmul;
mod quantized_matmul;
mod solve;

pub use block_dequantize::BlockDequantize;
pub use block_matmul::{ActivationPrecision, BLOCK_FORMATS, BlockMatMul, block_matmul_supports};
pub use dequantize::Dequantize;
pub use gather_matmul::{GatherMatMul, ScatterMatMul};
pub use matmul::MatMul;
pub use quantized_matmul::QuantizedMatMul;
pub(crate) use solve::Solve;

use crate::autodiff::{Emitter, GradError};
use crate::ir::{Dim, NodeId, Op, Shape};
use crate::ops::array::{Array, Out};

/// The batch dims and the last two dims of a rank ≥ 2 shape.
pub(super) fn split_matrix(shape: &Shape) -> (Shape, Dim, Dim) {
    let r = shape.rank();
    (
        Shape::from(&shape.dims()[..r - 2]),
        shape[r - 2].clone(),
        shape[r - 1].clone(),
    )
}

pub(super) fn matmul_op(
    e: &mut Emitter<'_>,
    a: NodeId,
    b: NodeId,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<NodeId, GradError> {
    e.op(
        Op::MatMul(MatMul {
            transpose_a,
            transpose_b,
        }),
        &[a, b],
    )
}

/// `transpose_a` and `transpose_b` as printed.
pub(super) fn transposes(out: &mut Vec<String>, transpose_a: bool, transpose_b: bool) {
    if transpose_a {
        out.push("transpose_a".into());
    }
    if transpose_b {
        out.push("transpose_b".into());
    }
}

/// `a · b` at each index of `out`, the transposes read in place.
pub(super) fn products(
    a: &Array,
    b: &Array,
    transpose_a: bool,
    transpose_b: bool,
    out: &Out,
) -> Vec<f64> {
    let r = a.shape.len();
    let k = if transpose_a {
        a.shape[r - 2]
    } else {
        a.shape[r - 1]
    };
    let rank = out.shape.len();
    out.fill(|o| {
        let (lead, i, j) = (&o[..rank - 2], o[rank - 2], o[rank - 1]);
        (0..k)
            .map(|p| matrix_at(a, lead, transpose_a, i, p) * matrix_at(b, lead, transpose_b, p, j))
            .sum()
    })
    .data
}

/// Element `(row, col)` of the matrix of `t` that the batch index `lead` of a broadcast
/// result selects, read with the matrix's last two axes swapped when `transposed`.
pub(super) fn matrix_at(
    t: &Array,
    lead: &[usize],
    transposed: bool,
    row: usize,
    col: usize,
) -> f64 {
    let r = t.shape.len();
    let offset = lead.len() - (r - 2);
    let mut flat = 0;
    for (a, d) in t.shape[..r - 2].iter().enumerate() {
        flat = flat * d + if *d == 1 { 0 } else { lead[offset + a] };
    }
    let (i, j) = if transposed { (col, row) } else { (row, col) };
    t.data[(flat * t.shape[r - 2] + i) * t.shape[r - 1] + j]
}

/// The activations' gradient of `x · denseᵀ` (a product with quantized weights, `dense`
/// their values `[N, K]`): `g · dense`, a vector `x` as a one-row matrix.
pub(super) fn activation_gradient(
    e: &mut Emitter<'_>,
    x: NodeId,
    dense: NodeId,
    g: NodeId,
) -> Result<NodeId, GradError> {
    let product = Op::MatMul(MatMul {
        transpose_a: false,
        transpose_b: false,
    });
    let x_shape = e.shape(x);
    if x_shape.rank() == 1 {
        let row = e.reshape(g, Shape::from(vec![Dim::from(1), e.shape(g)[0].clone()]))?;
        let product = e.op(product, &[row, dense])?;
        e.reshape(product, x_shape)
    } else {
        e.op(product, &[g, dense])
    }
}

//! Matrix products and solves.

use crate::ir::DType;
use crate::ir::Dim;
use crate::ir::{InferError, attr_err};
use crate::ir::{Shape, TensorType};
use crate::ops::check::{
    arity, broadcast_shapes, exact_rank, min_rank, require, require_float, same_dim, same_dtype,
};

/// The batch dims and the last two dims of a rank ≥ 2 shape.
fn split_matrix(shape: &Shape) -> (Shape, Dim, Dim) {
    let r = shape.rank();
    (
        Shape::from(&shape.dims()[..r - 2]),
        shape[r - 2].clone(),
        shape[r - 1].clone(),
    )
}

pub(crate) fn matmul(
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

pub(crate) fn solve(inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2")?;
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    min_rank(inputs, 0, 2)?;
    exact_rank(inputs, 1, inputs[0].rank())?;
    let (batch_a, rows, cols) = split_matrix(&inputs[0].shape);
    let (batch_b, b_rows, _) = split_matrix(&inputs[1].shape);
    same_dim("rows and columns of the square matrix", &rows, &cols)?;
    same_dim(
        "rows of the matrix and of the right-hand side",
        &rows,
        &b_rows,
    )?;
    if batch_a != batch_b {
        return Err(attr_err!(
            "batch dims {batch_a} and {batch_b} of the matrix and the right-hand side differ"
        ));
    }
    Ok(inputs[1].clone())
}

pub(crate) fn quantized_matmul(
    bits: u8,
    group_size: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 4, "4 (x, w, scales, biases)")?;
    if !matches!(bits, 4 | 8) {
        return Err(attr_err!("bits must be 4 or 8, got {bits}"));
    }
    if !matches!(group_size, 32 | 64 | 128) {
        return Err(attr_err!(
            "group_size must be 32, 64 or 128, got {group_size}"
        ));
    }
    require_float(inputs, 0)?;
    require(inputs, 1, |d| d == DType::U8, "u8 (packed weights)")?;
    same_dtype(inputs, 0, 2)?;
    same_dtype(inputs, 0, 3)?;
    min_rank(inputs, 0, 1)?;
    exact_rank(inputs, 1, 2)?;
    exact_rank(inputs, 2, 2)?;
    exact_rank(inputs, 3, 2)?;
    let x = &inputs[0].shape;
    let k = x[x.rank() - 1]
        .as_static()
        .ok_or_else(|| attr_err!("the input features of x must be static, got {x}"))?;
    if k % group_size != 0 {
        return Err(attr_err!(
            "input features {k} are not a multiple of group_size {group_size}"
        ));
    }
    let w = &inputs[1].shape;
    let n = w[0].clone();
    same_dim(
        "packed weight bytes per row and input features",
        &w[1],
        &Dim::Static(k * bits as usize / 8),
    )?;
    let groups = Shape::new([n.clone(), Dim::Static(k / group_size)]);
    for (operand, what) in [(2, "scales"), (3, "biases")] {
        if inputs[operand].shape != groups {
            return Err(attr_err!(
                "{what} must have shape {groups}, got {}",
                inputs[operand].shape
            ));
        }
    }
    let mut dims = x.dims()[..x.rank() - 1].to_vec();
    dims.push(n);
    Ok(TensorType::new(inputs[0].dtype, dims))
}

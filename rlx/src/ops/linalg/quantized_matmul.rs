//! The matrix product with a weight quantized to 4 or 8 bits in groups (affine: a scale and
//! a bias per group).

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, Dim, InferError, NodeId, Op, Shape, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{
    arity, exact_rank, min_rank, require, require_float, same_dim, same_dtype,
};
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

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
        quantized_matmul_type(self.bits, self.group_size, inputs)
    }

    /// The activations take `g · dequant(w)` (a [`Dequantize`](super::Dequantize) and a
    /// product); quantized weights (packed integers, their scales and offsets) are not
    /// trained.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let dequantize = Op::Dequantize(super::Dequantize {
            bits: self.bits,
            group_size: self.group_size,
        });
        let dense = e.op(dequantize, &x[1..])?;
        let dx = super::activation_gradient(e, x[0], dense, g)?;
        Ok(vec![Grad::Some(dx), Grad::None, Grad::None, Grad::None])
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // A sum over `k` products of an activation and a dequantized weight
        // `scale * q + bias`, with `q` below `2^bits`.
        let k = x.dims(0).last().copied().unwrap_or(1).max(1) as f64;
        let weight = x.largest(2) * f64::from((1u32 << self.bits) - 1) + x.largest(3);
        let terms = k * x.largest(0).max(1.0) * weight.max(1.0);
        Bound::Within {
            rel: 2.0 * x.u,
            abs: 4.0 * x.u * k * terms + x.tiny,
            growth: terms,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(quantized_matmul_value(self.bits, self.group_size, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_quantized_matmul(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn quantized_matmul_type(
    bits: u8,
    group_size: usize,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 4, "4 (x, w, scales, biases)")?;
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 2)?;
    min_rank(inputs, 0, 1)?;
    let x = &inputs[0].shape;
    let k = x[x.rank() - 1]
        .as_static()
        .ok_or_else(|| attr_err!("the input features of x must be static, got {x}"))?;
    let (n, _) = affine_groups_type(bits, group_size, Some(k), inputs, 1)?;
    let mut dims = x.dims()[..x.rank() - 1].to_vec();
    dims.push(n);
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// Checks the packed weight, scales and biases (operands `w`, `w + 1`, `w + 2`) of rows
/// of `k` values in groups of `group_size` (`k` read from the packed rows when `None`);
/// gives the rows `N` and `k`.
pub(super) fn affine_groups_type(
    bits: u8,
    group_size: usize,
    k: Option<usize>,
    inputs: &[TensorType],
    w: usize,
) -> Result<(Dim, usize), InferError> {
    if !matches!(bits, 4 | 8) {
        return Err(attr_err!("bits must be 4 or 8, got {bits}"));
    }
    if !matches!(group_size, 32 | 64 | 128) {
        return Err(attr_err!(
            "group_size must be 32, 64 or 128, got {group_size}"
        ));
    }
    let (scales, biases) = (w + 1, w + 2);
    require(inputs, w, |d| d == DType::U8, "u8 (packed weights)")?;
    require_float(inputs, scales)?;
    same_dtype(inputs, scales, biases)?;
    for operand in [w, scales, biases] {
        exact_rank(inputs, operand, 2)?;
    }
    let packed = &inputs[w].shape;
    let k = match k {
        Some(k) => k,
        None => {
            let bytes = packed[1]
                .as_static()
                .ok_or_else(|| attr_err!("the bytes per row of w must be static, got {packed}"))?;
            bytes * 8 / usize::from(bits)
        }
    };
    if k % group_size != 0 {
        return Err(attr_err!(
            "input features {k} are not a multiple of group_size {group_size}"
        ));
    }
    let n = packed[0].clone();
    same_dim(
        "packed weight bytes per row and input features",
        &packed[1],
        &Dim::Static(k * bits as usize / 8),
    )?;
    let groups = Shape::new([n.clone(), Dim::Static(k / group_size)]);
    for (operand, what) in [(scales, "scales"), (biases, "biases")] {
        if inputs[operand].shape != groups {
            return Err(attr_err!(
                "{what} must have shape {groups}, got {}",
                inputs[operand].shape
            ));
        }
    }
    Ok((n, k))
}

/// `x · dequant(w)ᵀ`, each weight `scale · q + bias` of its group.
fn quantized_matmul_value(bits: u8, group_size: usize, x: &[Array], out: &Out) -> Array {
    let k = *x[0].shape.last().expect("x has rank 1 or more");
    let n = x[1].shape[0];
    let dense = dequantized(bits, group_size, &x[1], &x[2], &x[3]);
    let rows = x[0].data.len() / k.max(1);
    let mut data = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let xs = &x[0].data[r * k..(r + 1) * k];
        for col in 0..n {
            let ws = &dense[col * k..(col + 1) * k];
            data.push(xs.iter().zip(ws).map(|(v, w)| v * w).sum());
        }
    }
    out.holding(data)
}

/// The weights `[N, K]` of packed rows `w` (`bits` wide, low bits first), each
/// `scale · q + bias` of its group of `group_size`, in f64.
pub(super) fn dequantized(
    bits: u8,
    group_size: usize,
    w: &Array,
    scales: &Array,
    biases: &Array,
) -> Vec<f64> {
    let (n, row_bytes) = (w.shape[0], w.shape[1]);
    let per_byte = 8 / usize::from(bits);
    let k = row_bytes * per_byte;
    let groups = k / group_size;
    let mut dense = Vec::with_capacity(n * k);
    for row in 0..n {
        for col in 0..k {
            let byte = w.data[row * row_bytes + col / per_byte] as u32;
            let q = (byte >> (u32::from(bits) * (col % per_byte) as u32)) & ((1u32 << bits) - 1);
            let g = row * groups + col / group_size;
            dense.push(scales.data[g] * f64::from(q) + biases.data[g]);
        }
    }
    dense
}

/// A new float input whose last axis is a multiple of the group size, times a new packed
/// weight with its scales and biases.
fn random_quantized_matmul(s: &mut dyn Sampler) -> Sampled {
    let dtype = pick(s, &[DType::F32, DType::F32, DType::F16, DType::BF16]);
    let bits = pick(s, &[4u8, 8]);
    let group_size = pick(s, &[32, 64, 128]);
    let k = group_size * (1 + s.below(2));
    let n = 1 + s.below(5);
    let mut x_dims: Vec<Dim> = (0..s.below(3)).map(|_| s.dim()).collect();
    x_dims.push(Dim::from(k));
    let x = s.input(dtype, x_dims)?;
    let [w, scales, biases] = random_affine_weight(s, dtype, bits, group_size, n, k)?;
    let op = Op::QuantizedMatMul(QuantizedMatMul { bits, group_size });
    Some((op, vec![x, w, scales, biases]))
}

/// A new packed weight of `n` rows of `k` values with its scales and biases (params).
pub(super) fn random_affine_weight(
    s: &mut dyn Sampler,
    dtype: DType,
    bits: u8,
    group_size: usize,
    n: usize,
    k: usize,
) -> Option<[NodeId; 3]> {
    let bytes = k * usize::from(bits) / 8;
    let packed: Vec<f64> = (0..n * bytes).map(|_| s.below(256) as f64).collect();
    let w = s.param(DType::U8, &[n, bytes], Some(&packed))?;
    let groups = k / group_size;
    let scales: Vec<f64> = (0..n * groups).map(|_| s.uniform(-0.1, 0.1)).collect();
    let biases: Vec<f64> = (0..n * groups).map(|_| s.uniform(-1.0, 1.0)).collect();
    let scales = s.param(dtype, &[n, groups], Some(&scales))?;
    let biases = s.param(dtype, &[n, groups], Some(&biases))?;
    Some([w, scales, biases])
}

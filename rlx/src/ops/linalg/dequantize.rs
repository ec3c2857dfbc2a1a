//! Group-affine quantized weights turned into their values: what the activations'
//! gradient of a [`QuantizedMatMul`](super::QuantizedMatMul) multiplies by.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::arity;
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

use super::quantized_matmul::{affine_groups_type, dequantized, random_affine_weight};

/// `dequant(w)`: packed rows `w` `[N, K*bits/8]` (`u8`, low bits first, as
/// [`QuantizedMatMul`](super::QuantizedMatMul) reads them) with `scales` and `biases`
/// `[N, K/group_size]` become `[N, K]` in the scales' dtype, each value
/// `scale · q + bias` of its group.
///
/// ```
/// use rlx::ir::{DType, Dequantize, Op};
/// let mut b = rlx::GraphBuilder::new();
/// let w = b.input("w", DType::U8, [3, 32])?; // 64 values a row, 4 bits each
/// let s = b.input("s", DType::F32, [3, 2])?;
/// let z = b.input("z", DType::F32, [3, 2])?;
/// let op = Op::Dequantize(Dequantize { bits: 4, group_size: 32 });
/// let y = b.op(op, &[w, s, z])?;
/// assert_eq!(b.ty(y).unwrap().shape.static_dims(), Some(vec![3, 64]));
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dequantize {
    /// 4 or 8.
    pub bits: u8,
    /// Values sharing one scale and bias: 32, 64 or 128.
    pub group_size: usize,
}

impl Primitive for Dequantize {
    fn name(&self) -> &'static str {
        "dequantize"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!(
            "bits={}, group_size={}",
            self.bits, self.group_size
        ));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Dequantize(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 3, "3 (w, scales, biases)")?;
        let (n, k) = affine_groups_type(self.bits, self.group_size, None, inputs, 0)?;
        Ok(TensorType::new(inputs[1].dtype, [n, k.into()]))
    }

    /// Quantized weights are not trained.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::None; 3])
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // One product and one sum, each rounded once.
        Bound::Within {
            rel: 2.0 * x.u,
            abs: 2.0 * x.u * x.largest(2) + x.tiny,
            growth: 1.0,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(out.holding(dequantized(self.bits, self.group_size, &x[0], &x[1], &x[2])))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let dtype = pick(s, &[DType::F32, DType::F32, DType::F16, DType::BF16]);
        let bits = pick(s, &[4u8, 8]);
        let group_size = pick(s, &[32, 64, 128]);
        let k = group_size * (1 + s.below(2));
        let n = 1 + s.below(5);
        let weight = random_affine_weight(s, dtype, bits, group_size, n, k)?;
        let op = Op::Dequantize(Dequantize { bits, group_size });
        Some((op, weight.to_vec()))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

//! Rows of GGUF blocks turned into their float32 values, exactly as llama.cpp dequantizes
//! them: what an embedding table kept in a block format gives for the rows a step gathers.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::gguf::{GgmlType, dequantize_f64, random_blocks};
use crate::ir::{DType, Dim, InferError, NodeId, Op, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, min_rank, require};
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

use super::block_matmul::{BLOCK_FORMATS, check_block_format};

/// `dequant(w)`: `w` `[.., B]` (`u8`, each row whole blocks of `format`) becomes `[.., K]`
/// `f32`, `K = B / block_bytes * block_values`. Formats: those [`BlockMatMul`](super::BlockMatMul)
/// takes. Gathering rows of a table kept in blocks and dequantizing them is an embedding
/// lookup that reads the table's bytes as the file stores them.
///
/// ```
/// use rlx::gguf::GgmlType;
/// use rlx::ir::{BlockDequantize, DType, Op};
/// let mut b = rlx::GraphBuilder::new();
/// let w = b.input("w", DType::U8, [5, 2 * 34])?; // two Q8_0 blocks a row
/// let y = b.op(Op::BlockDequantize(BlockDequantize { format: GgmlType::Q8_0 }), &[w])?;
/// assert_eq!(b.ty(y).unwrap().shape.static_dims(), Some(vec![5, 64]));
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockDequantize {
    /// The block format of `w`.
    pub format: GgmlType,
}

impl Primitive for BlockDequantize {
    fn name(&self) -> &'static str {
        "block_dequantize"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("format={}", self.format.name()));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::BlockDequantize(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 1, "1 (w)")?;
        check_block_format(self.name(), self.format)?;
        require(inputs, 0, |d| d == DType::U8, "u8 (blocks)")?;
        min_rank(inputs, 0, 1)?;
        let w = &inputs[0].shape;
        let bytes = w[w.rank() - 1]
            .as_static()
            .ok_or_else(|| attr_err!("the bytes per row of w must be static, got {w}"))?;
        let block = self.format.block_bytes();
        if !bytes.is_multiple_of(block) {
            return Err(attr_err!(
                "rows of {bytes} bytes are not whole {} blocks of {block} bytes",
                self.format.name()
            ));
        }
        let mut dims = w.dims()[..w.rank() - 1].to_vec();
        dims.push(Dim::from(bytes / block * self.format.block_values()));
        Ok(TensorType::new(DType::F32, dims))
    }

    /// Blocks are not trained.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::None])
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // An f16 scale times a small integer (plus an f16 minimum): float32 holds each
        // product exactly, and the one addition rounds once.
        Bound::Within {
            rel: 2.0 * x.u,
            abs: 0.0,
            growth: 1.0,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let bytes: Vec<u8> = x[0].data.iter().map(|b| *b as u8).collect();
        let row_bytes = *x[0].shape.last().expect("w has rank 1 or more");
        let k = row_bytes / self.format.block_bytes() * self.format.block_values();
        let mut data = vec![0f64; bytes.len() / row_bytes.max(1) * k];
        dequantize_f64(self.format, &bytes, &mut data)
            .map_err(|e| ReferenceError::Infer(attr_err!("{e}")))?;
        Ok(out.holding(data))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let format = pick(s, &BLOCK_FORMATS);
        let rows = 1 + s.below(4);
        let blocks = 1 + s.below(3);
        let bytes = random_blocks(format, rows * blocks, || s.uniform(0.0, 1.0));
        let values: Vec<f64> = bytes.iter().map(|b| f64::from(*b)).collect();
        let row_bytes = blocks * format.block_bytes();
        let w = s.param(DType::U8, &[rows, row_bytes], Some(&values))?;
        Some((Op::BlockDequantize(BlockDequantize { format }), vec![w]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

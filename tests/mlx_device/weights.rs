//! Products by weights stored each way the MLX lowering reads them (float32 either way
//! round, GGUF blocks), for the kernels' device tests.

use rlx::builder::GraphBuilder;
use rlx::ir::DType;
use rlx::tensor::HostTensor;

use super::values;

/// How a product's weight is stored.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Weights {
    /// Float32 `[out, in]`, read transposed (PyTorch's `Linear`).
    OutIn,
    /// Float32 `[in, out]`.
    InOut,
    /// GGUF blocks, `[out, row bytes]`.
    Blocks(rlx::gguf::GgmlType),
}

/// Every way [`product`] stores a weight.
pub(crate) const WEIGHT_LAYOUTS: [Weights; 4] = [
    Weights::OutIn,
    Weights::InOut,
    Weights::Blocks(rlx::gguf::GgmlType::Q4_1),
    Weights::Blocks(rlx::gguf::GgmlType::Q8_0),
];

/// `x` (`k` features) times the weight `name` of `width` columns stored as `weights` says.
pub(crate) fn product(
    b: &mut GraphBuilder,
    x: rlx::ir::NodeId,
    name: &str,
    weights: Weights,
    k: usize,
    width: usize,
) -> rlx::ir::NodeId {
    use rlx::ir::{BlockMatMul, MatMul, Op};
    match weights {
        Weights::OutIn => {
            let w = b.param(name, DType::F32, [width, k]).unwrap();
            let op = Op::MatMul(MatMul {
                transpose_a: false,
                transpose_b: true,
            });
            b.op(op, &[x, w]).unwrap()
        }
        Weights::InOut => {
            let w = b.param(name, DType::F32, [k, width]).unwrap();
            b.matmul(x, w).unwrap()
        }
        Weights::Blocks(format) => {
            let row_bytes = k / format.block_values() * format.block_bytes();
            let w = b.param(name, DType::U8, [width, row_bytes]).unwrap();
            b.op(Op::BlockMatMul(BlockMatMul::exact(format)), &[x, w])
                .unwrap()
        }
    }
}

/// A weight of `width` columns and `k` rows for [`product`], its values from `seed`.
pub(crate) fn weight(weights: Weights, width: usize, k: usize, seed: usize) -> HostTensor {
    match weights {
        Weights::OutIn => HostTensor::from_vec(values(width * k, seed), [width, k]),
        Weights::InOut => HostTensor::from_vec(values(width * k, seed), [k, width]),
        Weights::Blocks(format) => {
            let mut bytes = Vec::new();
            rlx::gguf::quantize(format, &values(width * k, seed), &mut bytes).unwrap();
            let row_bytes = bytes.len() / width;
            HostTensor::from_vec(bytes, [width, row_bytes])
        }
    }
    .unwrap()
}

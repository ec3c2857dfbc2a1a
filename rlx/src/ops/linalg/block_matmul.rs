//! The matrix product with a weight kept in a GGUF block format (`Q8_0`, `Q4_0`, `Q4_1`,
//! `Q5_0`, `Q5_1` of 32 values a block; the K-quants `Q2_K` to `Q6_K` of 256): rows of
//! blocks exactly as the file stores them, each block its scales (and minimums) and its
//! quantized values, dequantized as llama.cpp does ([`crate::gguf::dequantize`]).

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::gguf::{GgmlType, dequantize_f64, random_blocks};
use crate::ir::{DType, Dim, InferError, NodeId, Op, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, exact_rank, min_rank, require};
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// `x · dequant(w)ᵀ` with `w` in a GGUF block format. Operands: `x` `[.., K]` (`f32`),
/// `w` `[N, K / block_values * block_bytes]` (`u8`: row `n` is output feature `n`'s `K`
/// weights as consecutive blocks, a GGUF `[K, N]` tensor's bytes as they are). `K` is a
/// multiple of the format's block (32 values, 256 for the K-quants). Formats: `Q8_0`,
/// `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q2_K`, `Q3_K`, `Q4_K`, `Q5_K`, `Q6_K`.
///
/// ```
/// use rlx::gguf::GgmlType;
/// use rlx::ir::{BlockMatMul, DType, Op};
/// let mut b = rlx::GraphBuilder::new();
/// let x = b.input("x", DType::F32, [2, 64])?;
/// let w = b.param("w", DType::U8, [3, 2 * 34])?; // two Q8_0 blocks of 34 bytes per row
/// let y = b.op(Op::BlockMatMul(BlockMatMul::exact(GgmlType::Q8_0)), &[x, w])?;
/// assert_eq!(b.ty(y).unwrap().shape.static_dims(), Some(vec![2, 3]));
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockMatMul {
    /// The block format of `w`.
    pub format: GgmlType,
    /// How the activations enter the products.
    pub activations: ActivationPrecision,
}

/// How [`BlockMatMul`] multiplies the activations with the weight's blocks.
///
/// `Int8` is llama.cpp's recipe for decoding: each row of `x` is quantized per block of
/// 32 values to int8 with the scale `max|x| / 127` (rounded to nearest, ties to even, in
/// f32), and the products are integer dot products (AVX-512 VNNI `vpdpbusd`, AVX2
/// `vpmaddubsw`) scaled once per block. Each activation then carries an error of at most
/// half its block's step, so an output differs from the exact product by at most
/// `Σ_blocks max|x_block| / 254 · Σ |w|` over its blocks (bounded by
/// `k · max|x| · max|w| / 254`); in SmolLM2 that moves the logits by about 1e-2 and keeps
/// the greedy tokens. Backends without an integer path (MLX, and the CPU's prompt-sized
/// products of 28 rows or more) compute the exact product, which meets the same bound.
///
/// ```
/// use rlx::gguf::GgmlType;
/// use rlx::ir::{ActivationPrecision, BlockMatMul};
/// let op = BlockMatMul::exact(GgmlType::Q4_1).with_activations(ActivationPrecision::Int8);
/// assert_eq!(op.activations, ActivationPrecision::Int8);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ActivationPrecision {
    /// float32 activations times the dequantized weights: the product up to the order of
    /// its sums.
    #[default]
    Exact,
    /// Activations quantized to int8 per block of 32, integer dot products.
    Int8,
}

impl ActivationPrecision {
    /// The name the IR prints (`exact`, `int8`).
    pub fn name(self) -> &'static str {
        match self {
            ActivationPrecision::Exact => "exact",
            ActivationPrecision::Int8 => "int8",
        }
    }
}

impl BlockMatMul {
    /// The product with float32 activations.
    pub fn exact(format: GgmlType) -> BlockMatMul {
        BlockMatMul {
            format,
            activations: ActivationPrecision::Exact,
        }
    }

    /// This product with the activations entering as `activations` says.
    pub fn with_activations(self, activations: ActivationPrecision) -> BlockMatMul {
        BlockMatMul {
            activations,
            ..self
        }
    }
}

/// The GGUF formats [`BlockMatMul`] and [`BlockDequantize`](super::BlockDequantize) take.
///
/// ```
/// use rlx::gguf::GgmlType;
/// use rlx::ir::{BLOCK_FORMATS, block_matmul_supports};
///
/// assert!(BLOCK_FORMATS.contains(&GgmlType::Q4K));
/// assert!(BLOCK_FORMATS.iter().all(|&f| block_matmul_supports(f)));
/// ```
pub const BLOCK_FORMATS: [GgmlType; 10] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// Whether [`BlockMatMul`] takes weights in `format`.
pub fn block_matmul_supports(format: GgmlType) -> bool {
    BLOCK_FORMATS.contains(&format)
}

/// `format` is one of [`BLOCK_FORMATS`], or the error `op` reports.
pub(super) fn check_block_format(op: &str, format: GgmlType) -> Result<(), InferError> {
    if block_matmul_supports(format) {
        return Ok(());
    }
    let names: Vec<&str> = BLOCK_FORMATS.iter().map(|f| f.name()).collect();
    Err(attr_err!(
        "format {} is not one {op} takes ({})",
        format.name(),
        names.join(", ")
    ))
}

impl Primitive for BlockMatMul {
    fn name(&self) -> &'static str {
        "block_matmul"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("format={}", self.format.name()));
        if self.activations != ActivationPrecision::Exact {
            out.push(format!("activations={}", self.activations.name()));
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::BlockMatMul(*self)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 2, "2 (x, w)")?;
        check_block_format(self.name(), self.format)?;
        require(inputs, 0, |d| d == DType::F32, "f32")?;
        require(inputs, 1, |d| d == DType::U8, "u8 (blocks)")?;
        min_rank(inputs, 0, 1)?;
        exact_rank(inputs, 1, 2)?;
        let x = &inputs[0].shape;
        let k = x[x.rank() - 1]
            .as_static()
            .ok_or_else(|| attr_err!("the input features of x must be static, got {x}"))?;
        let block = self.format.block_values();
        if !k.is_multiple_of(block) {
            return Err(attr_err!(
                "input features {k} are not a multiple of the {}-value block",
                block
            ));
        }
        let w = &inputs[1].shape;
        let row_bytes = k / block * self.format.block_bytes();
        if w[1].as_static() != Some(row_bytes) {
            return Err(attr_err!(
                "w must have {row_bytes} bytes per row ({k} {} values), got {w}",
                self.format.name()
            ));
        }
        let mut dims = x.dims()[..x.rank() - 1].to_vec();
        dims.push(w[0].clone());
        Ok(TensorType::new(DType::F32, dims))
    }

    /// Weights kept in a file's block format are not trained (their bytes have no
    /// derivative); the activations' gradient is `g · dequant(w)`, the exact product's
    /// whatever the activations' precision (int8 rounding is taken as the identity, as in
    /// quantization-aware training).
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let dense = e.op(
            Op::BlockDequantize(super::BlockDequantize {
                format: self.format,
            }),
            &[x[1]],
        )?;
        let dx = super::activation_gradient(e, x[0], dense, g)?;
        Ok(vec![Grad::Some(dx), Grad::None])
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // A sum over `k` products of an activation and a dequantized weight, each block's
        // partial sum rounded in f32 before its scale applies.
        let k = x.dims(0).last().copied().unwrap_or(1).max(1) as f64;
        let terms = k * x.largest(0).max(1.0) * 4.0;
        // Int8 activations: each off by at most half its block's step, max|x| / 254.
        let quantized = match self.activations {
            ActivationPrecision::Exact => 0.0,
            ActivationPrecision::Int8 => {
                let w = largest_weight(self.format, x.values.get(1)).unwrap_or(f64::INFINITY);
                k * x.largest(0) * w / 254.0
            }
        };
        Bound::Within {
            rel: 2.0 * x.u,
            abs: 4.0 * x.u * k * terms + quantized + x.tiny,
            growth: terms,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let k = *x[0].shape.last().expect("x has rank 1 or more");
        let (n, row_bytes) = (x[1].shape[0], x[1].shape[1]);
        let bytes: Vec<u8> = x[1].data.iter().map(|b| *b as u8).collect();
        let mut weights = vec![0f64; n * k];
        for (row, dense) in bytes.chunks(row_bytes).zip(weights.chunks_mut(k)) {
            dequantize_f64(self.format, row, dense)
                .map_err(|e| ReferenceError::Infer(attr_err!("{e}")))?;
        }
        let rows = x[0].data.len() / k.max(1);
        let mut data = Vec::with_capacity(rows * n);
        for r in 0..rows {
            let xs = &x[0].data[r * k..(r + 1) * k];
            for w in weights.chunks(k) {
                data.push(xs.iter().zip(w).map(|(a, b)| a * b).sum());
            }
        }
        Ok(out.holding(data))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_block_matmul(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

/// The largest dequantized magnitude of the blocks `w` (`None` if they do not parse).
fn largest_weight(format: GgmlType, w: Option<&crate::tensor::HostTensor>) -> Option<f64> {
    let bytes: Vec<u8> = w?.to_f64_vec().iter().map(|b| *b as u8).collect();
    let mut dense = vec![0f64; bytes.len() / format.block_bytes() * format.block_values()];
    dequantize_f64(format, &bytes, &mut dense).ok()?;
    Some(dense.iter().fold(0.0f64, |m, v| m.max(v.abs())))
}

/// A new f32 input whose last axis is a multiple of the format's block, times a new weight of random
/// blocks.
fn random_block_matmul(s: &mut dyn Sampler) -> Sampled {
    let format = pick(s, &BLOCK_FORMATS);
    let k = format.block_values() * (1 + s.below(3));
    let n = 1 + s.below(5);
    let mut x_dims: Vec<Dim> = (0..s.below(3)).map(|_| s.dim()).collect();
    x_dims.push(Dim::from(k));
    let x = s.input(DType::F32, x_dims)?;
    let blocks = k / format.block_values();
    let bytes = random_blocks(format, n * blocks, || s.uniform(0.0, 1.0));
    let row_bytes = blocks * format.block_bytes();
    let values: Vec<f64> = bytes.iter().map(|b| f64::from(*b)).collect();
    let w = s.param(DType::U8, &[n, row_bytes], Some(&values))?;
    let activations = pick(s, &[ActivationPrecision::Exact, ActivationPrecision::Int8]);
    let op = BlockMatMul::exact(format).with_activations(activations);
    Some((Op::BlockMatMul(op), vec![x, w]))
}

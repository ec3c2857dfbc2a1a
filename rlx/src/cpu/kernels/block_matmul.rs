//! `x · dequant(w)ᵀ` for a weight in a GGUF block format, read in place: the bytes a
//! token's step reads are the file's, a quarter to an eighth of float32 weights.
//!
//! Few rows of `x` (decoding): each output feature's blocks are dequantized into registers
//! one at a time and multiplied with every row, the features spread over the workers.
//! Many rows (a prompt): tiles of features are dequantized into a float32 panel and
//! multiplied by the GEMM, which then does the arithmetic at its full rate. Activations
//! stay float32 throughout, so the result is the float32 product with the dequantized
//! weights up to the order of the sums.

use std::cell::RefCell;

use rayon::prelude::*;

use super::gemm::{GemmAcc, GemmDims, GemmPlan, gemm, kernel_shape};
use super::layout::{SharedMut, parallel};
use super::simd::vectorized;
use crate::gguf::{Block, GgmlType, Q4_0Block, Q4_1Block, Q8_0Block};
use crate::ir::DType;

/// Values per block of every format the product takes.
const VALUES: usize = 32;
/// Rows of `x` from which tiles of the weight go through the GEMM.
const GEMM_ROWS: usize = 8;
/// Output features per dequantized tile.
const TILE: usize = 64;
/// Output features one decoding task computes, at least.
const FEATURES_PER_TASK: usize = 16;
/// Partial sums per block dot product: one vector of the widest instruction set.
const LANES: usize = 16;

/// The sizes of one product: `rows` rows of `x`, `n` output features, `k` inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockDims {
    pub format: GgmlType,
    pub rows: usize,
    pub n: usize,
    pub k: usize,
}

/// `out` (`rows x n`) = `x` (`rows x k`) · dequant(`w`)ᵀ, `w` `n` rows of blocks.
pub(crate) fn block_matmul(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    match d.format {
        GgmlType::Q8_0 => product::<Q8_0Block>(d, x, w, out),
        GgmlType::Q4_0 => product::<Q4_0Block>(d, x, w, out),
        GgmlType::Q4_1 => product::<Q4_1Block>(d, x, w, out),
        // The op's type check admits no other format.
        _ => out.fill(f32::NAN),
    }
}

fn product<F: Block>(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    if d.rows == 0 || d.n == 0 {
        return;
    }
    if d.rows >= GEMM_ROWS {
        tiled::<F>(d, x, w, out);
    } else {
        decode::<F>(d, x, w, out);
    }
}

/// The dot product of 32 values, in `LANES` partial sums.
#[inline(always)]
fn dot(x: &[f32], w: &[f32; VALUES]) -> f32 {
    let mut lanes = [0f32; LANES];
    for (xs, ws) in x[..VALUES].chunks_exact(LANES).zip(w.chunks_exact(LANES)) {
        for ((lane, a), b) in lanes.iter_mut().zip(xs).zip(ws) {
            *lane = a.mul_add(*b, *lane);
        }
    }
    lanes.iter().sum()
}

/// Features `features` of every row, into `out` (row stride `d.n`).
#[inline(always)]
fn features<F: Block>(
    d: &BlockDims,
    x: &[f32],
    w: &[u8],
    features: std::ops::Range<usize>,
    out: SharedMut<f32>,
) {
    let row_bytes = d.k / VALUES * F::BYTES;
    let mut values = [0f32; VALUES];
    for f in features {
        let blocks = &w[f * row_bytes..(f + 1) * row_bytes];
        let mut sums = [0f32; GEMM_ROWS];
        for (b, block) in blocks.chunks_exact(F::BYTES).enumerate() {
            F::values(block, &mut values);
            for (r, sum) in sums.iter_mut().enumerate().take(d.rows) {
                *sum += dot(&x[r * d.k + b * VALUES..], &values);
            }
        }
        for (r, sum) in sums.iter().enumerate().take(d.rows) {
            // SAFETY: (r, f) lies inside the rows x n output, and feature f belongs to
            // this task alone.
            unsafe { *out.ptr().add(r * d.n + f) = *sum };
        }
    }
}

/// Few rows: features in parallel, each feature's blocks dequantized once for all rows.
fn decode<F: Block>(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    let shared = SharedMut::new(out);
    let run = |range: std::ops::Range<usize>| {
        vectorized(|| features::<F>(d, x, w, range, shared));
    };
    if parallel(d.rows * d.n * d.k) {
        let tasks = d.n.div_ceil(FEATURES_PER_TASK);
        (0..tasks).into_par_iter().for_each(|t| {
            let start = t * FEATURES_PER_TASK;
            run(start..d.n.min(start + FEATURES_PER_TASK));
        });
    } else {
        run(0..d.n);
    }
}

thread_local! {
    /// A worker's dequantized tile, product tile and GEMM scratch, kept between runs.
    static TILE_BUFFERS: RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// Many rows: tiles of `TILE` features dequantized to float32 and multiplied by the GEMM,
/// the tiles spread over the workers.
fn tiled<F: Block>(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    let row_bytes = d.k / VALUES * F::BYTES;
    let shared = SharedMut::new(out);
    let tile = |t: usize| {
        let first = t * TILE;
        let cols = TILE.min(d.n - first);
        TILE_BUFFERS.with(|buffers| {
            let (dense, product, scratch) = &mut *buffers.borrow_mut();
            dense.resize(cols * d.k, 0.0);
            product.resize(d.rows * cols, 0.0);
            vectorized(|| {
                let mut values = [0f32; VALUES];
                for (c, row) in dense.chunks_exact_mut(d.k).enumerate() {
                    let blocks = &w[(first + c) * row_bytes..(first + c + 1) * row_bytes];
                    for (block, dst) in blocks
                        .chunks_exact(F::BYTES)
                        .zip(row.chunks_exact_mut(VALUES))
                    {
                        F::values(block, &mut values);
                        dst.copy_from_slice(&values);
                    }
                }
            });
            // product = x · denseᵀ: B's element (p, j) is dense[j][p].
            let dims = GemmDims {
                m: d.rows,
                n: cols,
                k: d.k,
                a_rs: d.k,
                a_cs: 1,
                b_rs: 1,
                b_cs: d.k,
            };
            let plan = GemmPlan::new(dims, 1, kernel_shape(DType::F32));
            scratch.resize(plan.scratch_len(), 0.0);
            gemm::<f32, f32>(
                &plan,
                f32::micro_kernels(),
                x,
                dense,
                product,
                scratch,
                None,
                None,
            );
            for (r, row) in product.chunks_exact(cols).enumerate() {
                // SAFETY: row r's features first..first + cols lie inside the rows x n
                // output and belong to this tile alone; `row` does not overlap it.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        row.as_ptr(),
                        shared.ptr().add(r * d.n + first),
                        cols,
                    );
                }
            }
        });
    };
    let tiles = d.n.div_ceil(TILE);
    if parallel(d.rows * d.n * d.k) {
        (0..tiles).into_par_iter().for_each(tile);
    } else {
        (0..tiles).for_each(tile);
    }
}

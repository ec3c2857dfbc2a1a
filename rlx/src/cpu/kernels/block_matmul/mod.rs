//! `x · dequant(w)ᵀ` for a weight in a GGUF block format, read in place: the bytes a
//! token's step reads are the file's, a quarter to an eighth of float32 weights.
//!
//! Few rows of `x` (decoding): each output feature's blocks are dequantized into registers
//! one at a time and multiplied with every row, the features spread over the workers.
//! Many rows (a prompt): tiles of features are dequantized into a float32 panel and
//! multiplied by the GEMM, which then does the arithmetic at its full rate. Activations
//! stay float32 on these paths, so the result is the float32 product with the dequantized
//! weights up to the order of the sums; with int8 activations asked for, few rows take
//! the integer kernels of [`int8`] instead.

mod int8;

use std::cell::RefCell;

use super::gemm::{GemmAcc, GemmDims, GemmPlan, gemm, kernel_shape};
use super::layout::{SharedMut, parallel};
use super::simd::{Isa, VectorKernel, isa, vectorized};
use crate::gguf::{
    Block, GgmlType, Q2KBlock, Q3KBlock, Q4_0Block, Q4_1Block, Q4KBlock, Q5_0Block, Q5_1Block,
    Q5KBlock, Q6KBlock, Q8_0Block,
};
use crate::ir::{ActivationPrecision, DType};

/// Values the kernels dequantize or multiply at a time: a block of the 32-value formats, an
/// eighth of a K-quant's.
const VALUES: usize = 32;
/// Rows of `x` from which tiles of the weight go through the GEMM.
const GEMM_ROWS: usize = 16;
/// Output features per dequantized tile.
const TILE: usize = 64;
/// Output features a decoding thread's share is a multiple of.
const FEATURES_PER_TASK: usize = 16;
/// Partial sums per block dot product: one vector of the widest instruction set.
const LANES: usize = 16;

/// The sizes of one product: `rows` rows of `x`, `n` output features, `k` inputs; and,
/// for products of many rows, the GEMM plans of a whole tile and of the last one, made
/// once when the thunk is lowered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockDims {
    pub format: GgmlType,
    pub activations: ActivationPrecision,
    pub rows: usize,
    pub n: usize,
    pub k: usize,
    tiles: Option<[GemmPlan; 2]>,
}

impl BlockDims {
    pub(crate) fn new(
        format: GgmlType,
        activations: ActivationPrecision,
        rows: usize,
        n: usize,
        k: usize,
    ) -> BlockDims {
        // product = x · denseᵀ: B's element (p, j) is a tile's dense[j][p].
        let plan = |cols: usize| {
            let dims = GemmDims {
                m: rows,
                n: cols,
                k,
                a_rs: k,
                a_cs: 1,
                b_rs: 1,
                b_cs: k,
            };
            GemmPlan::new(dims, 1, kernel_shape(DType::F32))
        };
        let tiles =
            (rows >= GEMM_ROWS && n > 0).then(|| [plan(TILE), plan(n - (n - 1) / TILE * TILE)]);
        BlockDims {
            format,
            activations,
            rows,
            n,
            k,
            tiles,
        }
    }
}

/// `out` (`rows x n`) = `x` (`rows x k`) · dequant(`w`)ᵀ, `w` `n` rows of blocks.
pub(crate) fn block_matmul(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    match d.format {
        GgmlType::Q8_0 => product::<Q8_0Block>(d, x, w, out),
        GgmlType::Q4_0 => product::<Q4_0Block>(d, x, w, out),
        GgmlType::Q4_1 => product::<Q4_1Block>(d, x, w, out),
        GgmlType::Q5_0 => product::<Q5_0Block>(d, x, w, out),
        GgmlType::Q5_1 => product::<Q5_1Block>(d, x, w, out),
        GgmlType::Q2K => product::<Q2KBlock>(d, x, w, out),
        GgmlType::Q3K => product::<Q3KBlock>(d, x, w, out),
        GgmlType::Q4K => product::<Q4KBlock>(d, x, w, out),
        GgmlType::Q5K => product::<Q5KBlock>(d, x, w, out),
        GgmlType::Q6K => product::<Q6KBlock>(d, x, w, out),
        // The op's type check admits no other format.
        _ => out.fill(f32::NAN),
    }
}

/// `out` = the values of the blocks `w` of `format`, in order (`out.len()` values, whole
/// blocks).
pub(crate) fn block_dequantize(format: GgmlType, w: &[u8], out: &mut [f32]) {
    match format {
        GgmlType::Q8_0 => dequantize_blocks::<Q8_0Block>(w, out),
        GgmlType::Q4_0 => dequantize_blocks::<Q4_0Block>(w, out),
        GgmlType::Q4_1 => dequantize_blocks::<Q4_1Block>(w, out),
        GgmlType::Q5_0 => dequantize_blocks::<Q5_0Block>(w, out),
        GgmlType::Q5_1 => dequantize_blocks::<Q5_1Block>(w, out),
        GgmlType::Q2K => dequantize_blocks::<Q2KBlock>(w, out),
        GgmlType::Q3K => dequantize_blocks::<Q3KBlock>(w, out),
        GgmlType::Q4K => dequantize_blocks::<Q4KBlock>(w, out),
        GgmlType::Q5K => dequantize_blocks::<Q5KBlock>(w, out),
        GgmlType::Q6K => dequantize_blocks::<Q6KBlock>(w, out),
        // The op's type check admits no other format.
        _ => out.fill(f32::NAN),
    }
}

/// Every block of `w` into `out`, each block one "feature" of the tile kernels.
fn dequantize_blocks<F: wide::Wide>(w: &[u8], out: &mut [f32]) {
    let range = 0..out.len() / F::VALUES;
    match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL.
        Isa::Avx512 => unsafe { wide::dequantize_avx512::<F>(F::VALUES, w, range, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
        Isa::Avx2 => unsafe { wide::dequantize_avx2::<F>(F::VALUES, w, range, out) },
        _ => vectorized(Dequantize::<F> {
            k: F::VALUES,
            w,
            range,
            dense: out,
            format: std::marker::PhantomData,
        }),
    }
}

fn product<F: wide::Wide + int8::IntBlock>(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    if d.rows == 0 || d.n == 0 {
        return;
    }
    match (d.tiles, d.activations) {
        (Some(plans), _) => tiled::<F>(d, plans, x, w, out),
        (None, ActivationPrecision::Int8) => int8::decode::<F>(d, x, w, out),
        (None, ActivationPrecision::Exact) => decode::<F>(d, x, w, out),
    }
}

/// Features `features` of every row, into `out` (row stride `d.n`). Each row's products
/// gather in `LANES` partial sums over the whole feature (the blocks' values carry their
/// scales), summed once at the end.
#[inline(always)]
fn features<F: Block>(
    d: &BlockDims,
    x: &[f32],
    w: &[u8],
    features: std::ops::Range<usize>,
    out: SharedMut<f32>,
) {
    let row_bytes = d.k / F::VALUES * F::BYTES;
    let mut values = [0f32; VALUES];
    for f in features {
        let blocks = &w[f * row_bytes..(f + 1) * row_bytes];
        let mut lanes = [[0f32; LANES]; GEMM_ROWS];
        for b in 0..d.k / VALUES {
            let (at, chunk) = chunk_at::<F>(b);
            F::values(&blocks[at..at + F::BYTES], chunk, &mut values);
            for (r, lanes) in lanes.iter_mut().enumerate().take(d.rows) {
                let xs = &x[r * d.k + b * VALUES..][..VALUES];
                for (xs, ws) in xs.chunks_exact(LANES).zip(values.chunks_exact(LANES)) {
                    for ((lane, a), w) in lanes.iter_mut().zip(xs).zip(ws) {
                        *lane = a.mul_add(*w, *lane);
                    }
                }
            }
        }
        for (r, lanes) in lanes.iter().enumerate().take(d.rows) {
            // SAFETY: (r, f) lies inside the rows x n output, and feature f belongs to
            // this task alone.
            unsafe { *out.ptr().add(r * d.n + f) = lanes.iter().sum() };
        }
    }
}

/// Where the `b`-th run of 32 values of a row of `F` blocks lies: the byte offset of its
/// block in the row, and which 32 of the block's values it is.
#[inline(always)]
fn chunk_at<F: Block>(b: usize) -> (usize, usize) {
    let per_block = F::VALUES / VALUES;
    (b / per_block * F::BYTES, b % per_block)
}

/// A range of features as a kernel compiled per instruction set (a struct, so that its body
/// is inlined into each instruction set's copy and `mul_add` becomes an FMA instruction).
struct Features<'a, F> {
    d: &'a BlockDims,
    x: &'a [f32],
    w: &'a [u8],
    range: std::ops::Range<usize>,
    out: SharedMut<f32>,
    format: std::marker::PhantomData<F>,
}

impl<F: Block> VectorKernel for Features<'_, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        features::<F>(self.d, self.x, self.w, self.range, self.out);
    }
}

/// Dequantizes features `range` of `w` into `dense` (one row of `k` values each).
struct Dequantize<'a, F> {
    k: usize,
    w: &'a [u8],
    range: std::ops::Range<usize>,
    dense: &'a mut [f32],
    format: std::marker::PhantomData<F>,
}

impl<F: Block> VectorKernel for Dequantize<'_, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let row_bytes = self.k / F::VALUES * F::BYTES;
        let mut values = [0f32; VALUES];
        for (f, row) in self.range.zip(self.dense.chunks_exact_mut(self.k)) {
            let blocks = &self.w[f * row_bytes..(f + 1) * row_bytes];
            for (b, dst) in row.chunks_exact_mut(VALUES).enumerate() {
                let (at, chunk) = chunk_at::<F>(b);
                F::values(&blocks[at..at + F::BYTES], chunk, &mut values);
                dst.copy_from_slice(&values);
            }
        }
    }
}

/// Few rows: features in parallel, each feature's blocks dequantized once for all rows.
fn decode<F: wide::Wide>(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    let shared = SharedMut::new(out);
    let run = |range: std::ops::Range<usize>| match isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL and FMA.
        Isa::Avx512 => unsafe { wide::features_avx512::<F>(d, x, w, range, shared) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
        Isa::Avx2 => unsafe { wide::features_avx2::<F>(d, x, w, range, shared) },
        _ => vectorized(Features::<F> {
            d,
            x,
            w,
            range,
            out: shared,
            format: std::marker::PhantomData,
        }),
    };
    spread_features(d, run);
}

/// Runs `run` over all features of a few-row product: one contiguous range per thread, so
/// that each thread streams its part of the weight front to back (ranges interleaved finely
/// between threads defeat the hardware prefetchers, and a product of many features then
/// runs at half the memory bandwidth).
fn spread_features(d: &BlockDims, run: impl Fn(std::ops::Range<usize>) + Sync) {
    let threads = crate::cpu::workers::threads();
    if threads > 1 && parallel(d.rows * d.n * d.k) {
        let share = d.n.div_ceil(threads).next_multiple_of(FEATURES_PER_TASK);
        crate::cpu::workers::for_each(d.n.div_ceil(share), |t| {
            run(t * share..d.n.min((t + 1) * share));
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
fn tiled<F: wide::Wide>(d: &BlockDims, plans: [GemmPlan; 2], x: &[f32], w: &[u8], out: &mut [f32]) {
    let shared = SharedMut::new(out);
    let tile = |t: usize| {
        let first = t * TILE;
        let cols = TILE.min(d.n - first);
        TILE_BUFFERS.with(|buffers| {
            let (dense, product, scratch) = &mut *buffers.borrow_mut();
            dense.resize(cols * d.k, 0.0);
            product.resize(d.rows * cols, 0.0);
            let range = first..first + cols;
            match isa() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL.
                Isa::Avx512 => unsafe { wide::dequantize_avx512::<F>(d.k, w, range, dense) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
                Isa::Avx2 => unsafe { wide::dequantize_avx2::<F>(d.k, w, range, dense) },
                _ => vectorized(Dequantize::<F> {
                    k: d.k,
                    w,
                    range,
                    dense,
                    format: std::marker::PhantomData,
                }),
            }
            let plan = if cols == TILE { plans[0] } else { plans[1] };
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
        crate::cpu::workers::for_each(tiles, tile);
    } else {
        (0..tiles).for_each(tile);
    }
}

/// The decode kernels written with AVX-512 and AVX2 intrinsics: each block's values are
/// widened from bytes to float vectors and multiplied into per-row vector accumulators,
/// summed across lanes once per feature.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::*;

    use super::{BlockDims, GEMM_ROWS, SharedMut, VALUES, chunk_at};
    use crate::gguf::{
        Block, Q2KBlock, Q3KBlock, Q4_0Block, Q4_1Block, Q4KBlock, Q5_0Block, Q5_1Block, Q5KBlock,
        Q6KBlock, Q8_0Block, half_f32,
    };

    /// 32 of a block's values (`chunk` says which, as in [`Block::values`]) as vectors: two
    /// of 16 lanes, or four of 8. Implementations read `BYTES` bytes at `block`, which the
    /// caller guarantees.
    pub(super) trait Wide: Block {
        /// # Safety
        /// AVX-512 F/BW must be available; `block` points at `BYTES` readable bytes.
        unsafe fn avx512(block: *const u8, chunk: usize) -> [__m512; 2];
        /// # Safety
        /// AVX2 and FMA must be available; `block` points at `BYTES` readable bytes.
        unsafe fn avx2(block: *const u8, chunk: usize) -> [__m256; 4];
    }

    impl Wide for Q8_0Block {
        #[inline(always)]
        unsafe fn avx512(block: *const u8, _: usize) -> [__m512; 2] {
            // SAFETY: 34 readable bytes at `block` (the trait's contract).
            unsafe {
                let d = _mm512_set1_ps(half_f32(std::slice::from_raw_parts(block, 2), 0));
                let q = _mm256_loadu_si256(block.add(2).cast());
                let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
                let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256::<1>(q)));
                [_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d)]
            }
        }

        #[inline(always)]
        unsafe fn avx2(block: *const u8, _: usize) -> [__m256; 4] {
            // SAFETY: 34 readable bytes at `block` (the trait's contract).
            unsafe {
                let d = _mm256_set1_ps(half_f32(std::slice::from_raw_parts(block, 2), 0));
                std::array::from_fn(|i| {
                    let q = _mm_loadl_epi64(block.add(2 + 8 * i).cast());
                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d)
                })
            }
        }
    }

    /// The 16 bytes of nibbles at `qs`: values 0..15 (low nibbles) and 16..31 (high).
    #[inline(always)]
    unsafe fn nibbles(qs: *const u8) -> (__m128i, __m128i) {
        // SAFETY: 16 readable bytes at `qs` (the callers' contract).
        unsafe {
            let q = _mm_loadu_si128(qs.cast());
            let mask = _mm_set1_epi8(0x0F);
            (
                _mm_and_si128(q, mask),
                _mm_and_si128(_mm_srli_epi16::<4>(q), mask),
            )
        }
    }

    /// Nibbles at `qs` as 32 floats `q * d + m` (two vectors of 16).
    #[inline(always)]
    unsafe fn affine_avx512(qs: *const u8, d: f32, m: f32) -> [__m512; 2] {
        // SAFETY: 16 readable bytes at `qs` (the callers' contract); AVX-512 F enabled by
        // the caller.
        unsafe {
            let (lo, hi) = nibbles(qs);
            let (d, m) = (_mm512_set1_ps(d), _mm512_set1_ps(m));
            let widen = |v| _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
            [
                _mm512_add_ps(_mm512_mul_ps(widen(lo), d), m),
                _mm512_add_ps(_mm512_mul_ps(widen(hi), d), m),
            ]
        }
    }

    /// Nibbles at `qs` as 32 floats `q * d + m` (four vectors of 8).
    #[inline(always)]
    unsafe fn affine_avx2(qs: *const u8, d: f32, m: f32) -> [__m256; 4] {
        // SAFETY: 16 readable bytes at `qs` (the callers' contract); AVX2 enabled by the
        // caller.
        unsafe {
            let (lo, hi) = nibbles(qs);
            let (d, m) = (_mm256_set1_ps(d), _mm256_set1_ps(m));
            let widen = |v| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
            [
                _mm256_add_ps(_mm256_mul_ps(widen(lo), d), m),
                _mm256_add_ps(_mm256_mul_ps(widen(_mm_srli_si128::<8>(lo)), d), m),
                _mm256_add_ps(_mm256_mul_ps(widen(hi), d), m),
                _mm256_add_ps(_mm256_mul_ps(widen(_mm_srli_si128::<8>(hi)), d), m),
            ]
        }
    }

    impl Wide for Q4_0Block {
        #[inline(always)]
        unsafe fn avx512(block: *const u8, _: usize) -> [__m512; 2] {
            // SAFETY: 18 readable bytes at `block` (the trait's contract).
            unsafe {
                let d = half_f32(std::slice::from_raw_parts(block, 2), 0);
                // (q - 8) * d == q * d + (-8 d), both exact.
                affine_avx512(block.add(2), d, -8.0 * d)
            }
        }

        #[inline(always)]
        unsafe fn avx2(block: *const u8, _: usize) -> [__m256; 4] {
            // SAFETY: 18 readable bytes at `block` (the trait's contract).
            unsafe {
                let d = half_f32(std::slice::from_raw_parts(block, 2), 0);
                affine_avx2(block.add(2), d, -8.0 * d)
            }
        }
    }

    /// The 5-bit formats and the K-quants through their scalar values (the exact path only;
    /// the int8 path unpacks their integers in registers).
    macro_rules! through_values {
        ($($format:ty),*) => {$(
            impl Wide for $format {
                #[inline(always)]
                unsafe fn avx512(block: *const u8, chunk: usize) -> [__m512; 2] {
                    let mut values = [0f32; VALUES];
                    // SAFETY: `BYTES` readable bytes at `block` (the trait's contract).
                    unsafe {
                        let block = std::slice::from_raw_parts(block, Self::BYTES);
                        Self::values(block, chunk, &mut values);
                        [_mm512_loadu_ps(values.as_ptr()), _mm512_loadu_ps(values.as_ptr().add(16))]
                    }
                }

                #[inline(always)]
                unsafe fn avx2(block: *const u8, chunk: usize) -> [__m256; 4] {
                    let mut values = [0f32; VALUES];
                    // SAFETY: as above.
                    unsafe {
                        let block = std::slice::from_raw_parts(block, Self::BYTES);
                        Self::values(block, chunk, &mut values);
                        std::array::from_fn(|i| _mm256_loadu_ps(values.as_ptr().add(8 * i)))
                    }
                }
            }
        )*};
    }

    through_values!(
        Q5_0Block, Q5_1Block, Q2KBlock, Q3KBlock, Q4KBlock, Q5KBlock, Q6KBlock
    );

    impl Wide for Q4_1Block {
        #[inline(always)]
        unsafe fn avx512(block: *const u8, _: usize) -> [__m512; 2] {
            // SAFETY: 20 readable bytes at `block` (the trait's contract).
            unsafe {
                let head = std::slice::from_raw_parts(block, 4);
                affine_avx512(block.add(4), half_f32(head, 0), half_f32(head, 2))
            }
        }

        #[inline(always)]
        unsafe fn avx2(block: *const u8, _: usize) -> [__m256; 4] {
            // SAFETY: 20 readable bytes at `block` (the trait's contract).
            unsafe {
                let head = std::slice::from_raw_parts(block, 4);
                affine_avx2(block.add(4), half_f32(head, 0), half_f32(head, 2))
            }
        }
    }

    /// Features `features` of every row (fewer than `GEMM_ROWS`), into `out`.
    ///
    /// # Safety
    /// AVX-512 F/BW/DQ/VL and FMA must be available; `x` holds `rows x k`, `w` `n` rows of
    /// blocks, `out` `rows x n`, and no other task writes these features.
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")]
    pub(super) unsafe fn features_avx512<F: Wide>(
        d: &BlockDims,
        x: &[f32],
        w: &[u8],
        features: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        let row_bytes = d.k / F::VALUES * F::BYTES;
        let rows = d.rows.min(GEMM_ROWS);
        assert!(x.len() >= rows * d.k && w.len() >= features.end * row_bytes);
        for f in features {
            let mut sums = [_mm512_setzero_ps(); GEMM_ROWS];
            for b in 0..d.k / VALUES {
                let (at, chunk) = chunk_at::<F>(b);
                // SAFETY: the block of run b of feature f lies inside `w` (asserted above),
                // and the caller guarantees AVX-512.
                let [lo, hi] = unsafe { F::avx512(w.as_ptr().add(f * row_bytes + at), chunk) };
                for (r, sum) in sums.iter_mut().enumerate().take(rows) {
                    // SAFETY: values b*32..b*32+32 of row r lie inside `x` (asserted).
                    unsafe {
                        let at = x.as_ptr().add(r * d.k + b * VALUES);
                        *sum = _mm512_fmadd_ps(_mm512_loadu_ps(at), lo, *sum);
                        *sum = _mm512_fmadd_ps(_mm512_loadu_ps(at.add(16)), hi, *sum);
                    }
                }
            }
            for (r, sum) in sums.iter().enumerate().take(rows) {
                // SAFETY: (r, f) lies inside the rows x n output, and feature f belongs to
                // this task alone.
                unsafe { *out.ptr().add(r * d.n + f) = _mm512_reduce_add_ps(*sum) };
            }
        }
    }

    /// Features `range` of `w` dequantized into `dense`, `k` values a feature.
    ///
    /// # Safety
    /// AVX-512 F/BW/DQ/VL must be available.
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")]
    pub(super) unsafe fn dequantize_avx512<F: Wide>(
        k: usize,
        w: &[u8],
        range: std::ops::Range<usize>,
        dense: &mut [f32],
    ) {
        let row_bytes = k / F::VALUES * F::BYTES;
        assert!(w.len() >= range.end * row_bytes && dense.len() >= range.len() * k);
        for (c, f) in range.enumerate() {
            for b in 0..k / VALUES {
                // SAFETY: block b of feature f lies inside `w`, values b*32..+32 of row c
                // inside `dense` (asserted above).
                unsafe {
                    let (at, chunk) = chunk_at::<F>(b);
                    let [lo, hi] = F::avx512(w.as_ptr().add(f * row_bytes + at), chunk);
                    let at = dense.as_mut_ptr().add(c * k + b * VALUES);
                    _mm512_storeu_ps(at, lo);
                    _mm512_storeu_ps(at.add(16), hi);
                }
            }
        }
    }

    /// [`dequantize_avx512`] with 8-lane vectors.
    ///
    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dequantize_avx2<F: Wide>(
        k: usize,
        w: &[u8],
        range: std::ops::Range<usize>,
        dense: &mut [f32],
    ) {
        let row_bytes = k / F::VALUES * F::BYTES;
        assert!(w.len() >= range.end * row_bytes && dense.len() >= range.len() * k);
        for (c, f) in range.enumerate() {
            for b in 0..k / VALUES {
                // SAFETY: as in `dequantize_avx512`.
                unsafe {
                    let (at, chunk) = chunk_at::<F>(b);
                    let values = F::avx2(w.as_ptr().add(f * row_bytes + at), chunk);
                    let at = dense.as_mut_ptr().add(c * k + b * VALUES);
                    for (i, v) in values.iter().enumerate() {
                        _mm256_storeu_ps(at.add(8 * i), *v);
                    }
                }
            }
        }
    }

    /// [`features_avx512`] with 8-lane vectors.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; otherwise as [`features_avx512`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn features_avx2<F: Wide>(
        d: &BlockDims,
        x: &[f32],
        w: &[u8],
        features: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        let row_bytes = d.k / F::VALUES * F::BYTES;
        let rows = d.rows.min(GEMM_ROWS);
        assert!(x.len() >= rows * d.k && w.len() >= features.end * row_bytes);
        for f in features {
            let mut sums = [_mm256_setzero_ps(); GEMM_ROWS];
            for b in 0..d.k / VALUES {
                let (at, chunk) = chunk_at::<F>(b);
                // SAFETY: the block of run b of feature f lies inside `w` (asserted above),
                // and the caller guarantees AVX2.
                let values = unsafe { F::avx2(w.as_ptr().add(f * row_bytes + at), chunk) };
                for (r, sum) in sums.iter_mut().enumerate().take(rows) {
                    for (i, v) in values.iter().enumerate() {
                        // SAFETY: values b*32+8i..+8 of row r lie inside `x` (asserted).
                        unsafe {
                            let at = x.as_ptr().add(r * d.k + b * VALUES + 8 * i);
                            *sum = _mm256_fmadd_ps(_mm256_loadu_ps(at), *v, *sum);
                        }
                    }
                }
            }
            for (r, sum) in sums.iter().enumerate().take(rows) {
                // SAFETY: as in `features_avx512`; the lanes are summed by halves.
                unsafe {
                    let half = _mm_add_ps(
                        _mm256_castps256_ps128(*sum),
                        _mm256_extractf128_ps::<1>(*sum),
                    );
                    let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
                    let one = _mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair));
                    *out.ptr().add(r * d.n + f) = _mm_cvtss_f32(one);
                }
            }
        }
    }
}

/// Without x86-64 intrinsics every format runs the portable loop.
#[cfg(not(target_arch = "x86_64"))]
mod wide {
    pub(super) trait Wide: crate::gguf::Block {}
    impl<T: crate::gguf::Block> Wide for T {}
}

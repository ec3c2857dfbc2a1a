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

mod formats;
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

/// One weight of a product: its sizes (`n` its features), its blocks and its output
/// (`rows x n`).
#[derive(Clone, Copy)]
pub(crate) struct Part<'a> {
    pub dims: BlockDims,
    pub w: &'a [u8],
    out: SharedMut<f32>,
}

impl<'a> Part<'a> {
    /// A part writing `out`, which stays borrowed, by this part alone, for `'a`.
    pub(crate) fn new(dims: BlockDims, w: &'a [u8], out: &'a mut [f32]) -> Part<'a> {
        assert!(
            out.len() >= dims.rows * dims.n,
            "block product output too small"
        );
        Part {
            dims,
            w,
            out: SharedMut::new(out),
        }
    }

    /// A part of no features, reading and writing nothing (filler for fixed arrays).
    pub(crate) fn unused() -> Part<'static> {
        let dims = BlockDims::new(GgmlType::Q8_0, ActivationPrecision::Exact, 0, 0, 0);
        Part {
            dims,
            w: &[],
            out: SharedMut::new(&mut []),
        }
    }

    /// The output as a slice, for the paths that write it whole, one part at a time.
    ///
    /// # Safety
    /// No other reference to this part's output is live while the slice is.
    unsafe fn out_slice(self) -> &'a mut [f32] {
        // SAFETY: `new` took the output mutably borrowed for `'a`, with at least `rows x n`
        // elements; the caller's contract makes this the only reference to it.
        unsafe { std::slice::from_raw_parts_mut(self.out.ptr(), self.dims.rows * self.dims.n) }
    }
}

/// `out` (`rows x n`) = `x` (`rows x k`) · dequant(`w`)ᵀ, `w` `n` rows of blocks.
pub(crate) fn block_matmul(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    block_matmuls(x, &[Part::new(*d, w, out)]);
}

/// Each part's `out` = `x` · dequant(`w`)ᵀ, for parts of one format and activation precision
/// that share `x` (as many rows and inputs). Few rows go as one product over every part's
/// features: `x` quantized once, one parallel section, each thread streaming its share of
/// the weights part after part (a decoding step's small products are otherwise bound by
/// their fixed costs, not by the bytes they read). Many rows go part by part.
pub(crate) fn block_matmuls(x: &[f32], parts: &[Part<'_>]) {
    let Some(first) = parts.first() else { return };
    debug_assert!(parts.iter().all(|p| {
        let d = &p.dims;
        let f = &first.dims;
        (d.format, d.activations, d.rows, d.k) == (f.format, f.activations, f.rows, f.k)
    }));
    match first.dims.format {
        GgmlType::Q8_0 => product::<Q8_0Block>(x, parts),
        GgmlType::Q4_0 => product::<Q4_0Block>(x, parts),
        GgmlType::Q4_1 => product::<Q4_1Block>(x, parts),
        GgmlType::Q5_0 => product::<Q5_0Block>(x, parts),
        GgmlType::Q5_1 => product::<Q5_1Block>(x, parts),
        GgmlType::Q2K => product::<Q2KBlock>(x, parts),
        GgmlType::Q3K => product::<Q3KBlock>(x, parts),
        GgmlType::Q4K => product::<Q4KBlock>(x, parts),
        GgmlType::Q5K => product::<Q5KBlock>(x, parts),
        GgmlType::Q6K => product::<Q6KBlock>(x, parts),
        // The op's type check admits no other format.
        // SAFETY: each part's output is taken once, and dropped before the next.
        _ => parts
            .iter()
            .for_each(|p| unsafe { p.out_slice() }.fill(f32::NAN)),
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
fn dequantize_blocks<F: formats::IntBlock>(w: &[u8], out: &mut [f32]) {
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

fn product<F: formats::IntBlock>(x: &[f32], parts: &[Part<'_>]) {
    let d = parts[0].dims;
    if d.rows == 0 {
        return;
    }
    if parts.iter().any(|p| p.dims.tiles.is_some()) {
        for p in parts {
            if let Some(plans) = p.dims.tiles {
                // SAFETY: each part's output is taken once, for this call alone.
                tiled::<F>(&p.dims, plans, x, p.w, unsafe { p.out_slice() });
            }
        }
        return;
    }
    match d.activations {
        ActivationPrecision::Int8 => int8::decode::<F>(x, parts),
        ActivationPrecision::Exact => decode::<F>(x, parts),
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
fn decode<F: formats::IntBlock>(x: &[f32], parts: &[Part<'_>]) {
    let run = |p: &Part<'_>, range: std::ops::Range<usize>| {
        let (d, w, out) = (&p.dims, p.w, p.out);
        match isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL and FMA.
            Isa::Avx512 => unsafe { wide::features_avx512::<F>(d, x, w, range, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
            Isa::Avx2 => unsafe { wide::features_avx2::<F>(d, x, w, range, out) },
            _ => vectorized(Features::<F> {
                d,
                x,
                w,
                range,
                out,
                format: std::marker::PhantomData,
            }),
        }
    };
    spread_features(parts, run);
}

/// Runs `run` over all features of the parts of a few-row product: one contiguous range of
/// the parts' features in turn per thread, so that each thread streams its share of the
/// weights front to back (ranges interleaved finely between threads defeat the hardware
/// prefetchers, and a product of many features then runs at half the memory bandwidth).
fn spread_features(parts: &[Part<'_>], run: impl Fn(&Part<'_>, std::ops::Range<usize>) + Sync) {
    let total: usize = parts.iter().map(|p| p.dims.n).sum();
    let d = &parts[0].dims;
    let threads = crate::cpu::workers::threads();
    // A thread's features `range` of all parts, part by part.
    let run_range = |range: std::ops::Range<usize>| {
        let mut first = 0;
        for p in parts {
            let (start, end) = (range.start.max(first), range.end.min(first + p.dims.n));
            if start < end {
                run(p, start - first..end - first);
            }
            first += p.dims.n;
        }
    };
    if threads > 1 && parallel(d.rows * total * d.k) {
        let share = total.div_ceil(threads).next_multiple_of(FEATURES_PER_TASK);
        crate::cpu::workers::for_each(total.div_ceil(share), |t| {
            run_range(t * share..total.min((t + 1) * share));
        });
    } else {
        run_range(0..total);
    }
}

thread_local! {
    /// A worker's dequantized tile, product tile and GEMM scratch, kept between runs.
    static TILE_BUFFERS: RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// Many rows: tiles of `TILE` features dequantized to float32 and multiplied by the GEMM,
/// the tiles spread over the workers.
fn tiled<F: formats::IntBlock>(
    d: &BlockDims,
    plans: [GemmPlan; 2],
    x: &[f32],
    w: &[u8],
    out: &mut [f32],
) {
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

/// The exact path's kernels written with AVX-512 and AVX2 intrinsics: 32 values of a block
/// at a time, their integers (as [`formats`] reads them) widened to float vectors and
/// scaled, then multiplied into per-row vector accumulators (summed across lanes once per
/// feature) or stored.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::*;

    use super::formats::{IntBlock, Sums, half_f16c};
    use super::{BlockDims, GEMM_ROWS, SharedMut, VALUES};

    /// The scale and offset of half `h` (of 16 values) of a run.
    #[inline(always)]
    fn factors<F: IntBlock>(chunk: &super::formats::Chunk, h: usize) -> (f32, f32) {
        let scale = if F::HALVES {
            chunk.scale * chunk.halves[h] as f32
        } else {
            chunk.scale
        };
        let offset = match F::SUMS {
            Sums::None => 0.0,
            Sums::Whole => chunk.offsets[0],
            Sums::Halves => chunk.offsets[h],
        };
        (scale, offset)
    }

    /// Run `c` of the block at `block` as two vectors of 16 values.
    ///
    /// # Safety
    /// AVX-512 F/BW and F16C must be available; `block` points at `F::BYTES` readable bytes.
    #[inline(always)]
    unsafe fn values_avx512<F: IntBlock>(
        head: &F::Head,
        block: *const u8,
        c: usize,
    ) -> [__m512; 2] {
        // SAFETY: the caller's contract.
        unsafe {
            let chunk = F::chunk(head, std::slice::from_raw_parts(block, F::BYTES), c);
            let ints = F::integers_x86::<true>(block, c);
            let parts = [
                _mm256_castsi256_si128(ints),
                _mm256_extracti128_si256::<1>(ints),
            ];
            // A loop, not `array::from_fn`: its closure would be compiled without the
            // caller's vector features, every intrinsic in it a call.
            let mut values = [_mm512_setzero_ps(); 2];
            for (h, v) in values.iter_mut().enumerate() {
                let wide = if F::SIGNED {
                    _mm512_cvtepi8_epi32(parts[h])
                } else {
                    _mm512_cvtepu8_epi32(parts[h])
                };
                let (scale, offset) = factors::<F>(&chunk, h);
                *v = _mm512_mul_ps(_mm512_cvtepi32_ps(wide), _mm512_set1_ps(scale));
                if F::SUMS != Sums::None {
                    *v = _mm512_add_ps(*v, _mm512_set1_ps(offset));
                }
            }
            values
        }
    }

    /// Run `c` of the block at `block` as four vectors of 8 values.
    ///
    /// # Safety
    /// AVX2 and F16C must be available; `block` points at `F::BYTES` readable bytes.
    #[inline(always)]
    unsafe fn values_avx2<F: IntBlock>(head: &F::Head, block: *const u8, c: usize) -> [__m256; 4] {
        // SAFETY: the caller's contract.
        unsafe {
            let chunk = F::chunk(head, std::slice::from_raw_parts(block, F::BYTES), c);
            let ints = F::integers_x86::<false>(block, c);
            let (low, high) = (
                _mm256_castsi256_si128(ints),
                _mm256_extracti128_si256::<1>(ints),
            );
            let parts = [
                low,
                _mm_srli_si128::<8>(low),
                high,
                _mm_srli_si128::<8>(high),
            ];
            // A loop, as in `values_avx512`.
            let mut values = [_mm256_setzero_ps(); 4];
            for (i, v) in values.iter_mut().enumerate() {
                let wide = if F::SIGNED {
                    _mm256_cvtepi8_epi32(parts[i])
                } else {
                    _mm256_cvtepu8_epi32(parts[i])
                };
                let (scale, offset) = factors::<F>(&chunk, i / 2);
                *v = _mm256_mul_ps(_mm256_cvtepi32_ps(wide), _mm256_set1_ps(scale));
                if F::SUMS != Sums::None {
                    *v = _mm256_add_ps(*v, _mm256_set1_ps(offset));
                }
            }
            values
        }
    }

    /// Calls `each(b, values)` for every run `b` of 32 values of feature `f`'s blocks, the
    /// values made by `values` from the block's head.
    ///
    /// # Safety
    /// `w` holds at least `f + 1` rows of `k` values' blocks; `values` may read `F::BYTES`
    /// bytes at the pointer it is given.
    #[inline(always)]
    unsafe fn runs<F: IntBlock, V>(
        k: usize,
        w: &[u8],
        f: usize,
        values: impl Fn(&F::Head, *const u8, usize) -> V,
        mut each: impl FnMut(usize, V),
    ) {
        let per_block = F::VALUES / VALUES;
        let row_bytes = k / F::VALUES * F::BYTES;
        for at_block in 0..k / F::VALUES {
            // SAFETY: block `at_block` of feature f lies inside `w` (the caller's contract).
            unsafe {
                let block = w.as_ptr().add(f * row_bytes + at_block * F::BYTES);
                let bytes = std::slice::from_raw_parts(block, F::BYTES);
                let head = F::head(bytes, |at| half_f16c(block.add(at)));
                for c in 0..per_block {
                    each(at_block * per_block + c, values(&head, block, c));
                }
            }
        }
    }

    /// Features `features` of every row (fewer than `GEMM_ROWS`), into `out`: rows two at a
    /// time, each feature's runs dequantized once per pair.
    ///
    /// # Safety
    /// AVX-512 F/BW/DQ/VL, FMA and F16C must be available; `x` holds `rows x k`, `w` `n`
    /// rows of blocks, `out` `rows x n`, and no other task writes these features.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
    pub(super) unsafe fn features_avx512<F: IntBlock>(
        d: &BlockDims,
        x: &[f32],
        w: &[u8],
        features: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        let rows = d.rows.min(GEMM_ROWS);
        assert!(x.len() >= rows * d.k && w.len() >= features.end * (d.k / F::VALUES) * F::BYTES);
        for first in (0..rows).step_by(2) {
            // SAFETY: the caller's contract; rows first.. lie inside the rows asserted.
            unsafe {
                if rows - first == 1 {
                    pair_avx512::<F, 1>(d, x, w, first, features.clone(), out);
                } else {
                    pair_avx512::<F, 2>(d, x, w, first, features.clone(), out);
                }
            }
        }
    }

    /// Rows `first..first + R` of [`features_avx512`]. Each row keeps four accumulators
    /// (the two halves of even and of odd runs): one would chain every multiply-add on the
    /// last, and the kernel would wait on their latency rather than the memory.
    ///
    /// # Safety
    /// As [`features_avx512`], with rows `first..first + R` inside `x` and `out`.
    #[inline(always)]
    unsafe fn pair_avx512<F: IntBlock, const R: usize>(
        d: &BlockDims,
        x: &[f32],
        w: &[u8],
        first: usize,
        features: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        for f in features {
            // SAFETY: the caller guarantees AVX-512 F.
            let mut sums = [[unsafe { _mm512_setzero_ps() }; 4]; R];
            // SAFETY: `w` holds feature f's blocks, and rows first..first + R of `x` every
            // run (the caller's contract); the caller guarantees the instructions.
            unsafe {
                runs::<F, _>(
                    d.k,
                    w,
                    f,
                    |h, b, c| values_avx512::<F>(h, b, c),
                    |b, [lo, hi]| {
                        let parity = 2 * (b % 2);
                        for (r, sums) in sums.iter_mut().enumerate() {
                            let at = x.as_ptr().add((first + r) * d.k + b * VALUES);
                            sums[parity] = _mm512_fmadd_ps(_mm512_loadu_ps(at), lo, sums[parity]);
                            sums[parity + 1] =
                                _mm512_fmadd_ps(_mm512_loadu_ps(at.add(16)), hi, sums[parity + 1]);
                        }
                    },
                );
            }
            for (r, [a, b, c, e]) in sums.iter().enumerate() {
                // SAFETY: (first + r, f) lies inside the rows x n output, and feature f
                // belongs to this task alone.
                unsafe {
                    let sum = _mm512_add_ps(_mm512_add_ps(*a, *b), _mm512_add_ps(*c, *e));
                    *out.ptr().add((first + r) * d.n + f) = _mm512_reduce_add_ps(sum);
                }
            }
        }
    }

    /// Features `range` of `w` dequantized into `dense`, `k` values a feature: each run's
    /// values made by `values` and written by `store` at the run's first value.
    ///
    /// # Safety
    /// `values` and `store` may use what the caller enables; `store` writes 32 values.
    #[inline(always)]
    unsafe fn dequantize_rows<F: IntBlock, V>(
        k: usize,
        w: &[u8],
        range: std::ops::Range<usize>,
        dense: &mut [f32],
        values: impl Fn(&F::Head, *const u8, usize) -> V + Copy,
        store: impl Fn(*mut f32, V) + Copy,
    ) {
        assert!(w.len() >= range.end * (k / F::VALUES) * F::BYTES);
        assert!(dense.len() >= range.len() * k);
        for (row, f) in range.enumerate() {
            // SAFETY: `w` holds feature f's blocks, and `dense` row `row`'s values b*32..+32
            // (asserted above); the caller guarantees the instructions.
            unsafe {
                let base = dense.as_mut_ptr().add(row * k);
                runs::<F, _>(k, w, f, values, |b, v| store(base.add(b * VALUES), v));
            }
        }
    }

    /// Features `range` of `w` dequantized into `dense`, `k` values a feature.
    ///
    /// # Safety
    /// AVX-512 F/BW/DQ/VL and F16C must be available.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
    pub(super) unsafe fn dequantize_avx512<F: IntBlock>(
        k: usize,
        w: &[u8],
        range: std::ops::Range<usize>,
        dense: &mut [f32],
    ) {
        // SAFETY: `runs` passes a pointer to a whole block; the caller enables the
        // instructions.
        let values = |h: &F::Head, b, c| unsafe { values_avx512::<F>(h, b, c) };
        // SAFETY: the caller enables the instructions; each store writes 32 values.
        unsafe {
            dequantize_rows::<F, _>(k, w, range, dense, values, |at, [lo, hi]| {
                _mm512_storeu_ps(at, lo);
                _mm512_storeu_ps(at.add(16), hi);
            })
        }
    }

    /// [`dequantize_avx512`] with 8-lane vectors.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dequantize_avx2<F: IntBlock>(
        k: usize,
        w: &[u8],
        range: std::ops::Range<usize>,
        dense: &mut [f32],
    ) {
        // SAFETY: `runs` passes a pointer to a whole block; the caller enables the
        // instructions.
        let values = |h: &F::Head, b, c| unsafe { values_avx2::<F>(h, b, c) };
        // SAFETY: the caller enables the instructions; each store writes 32 values.
        unsafe {
            dequantize_rows::<F, _>(k, w, range, dense, values, |at, v: [__m256; 4]| {
                for (i, v) in v.iter().enumerate() {
                    _mm256_storeu_ps(at.add(8 * i), *v);
                }
            })
        }
    }

    /// [`features_avx512`] with 8-lane vectors.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available; otherwise as [`features_avx512`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn features_avx2<F: IntBlock>(
        d: &BlockDims,
        x: &[f32],
        w: &[u8],
        features: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        let rows = d.rows.min(GEMM_ROWS);
        assert!(x.len() >= rows * d.k && w.len() >= features.end * (d.k / F::VALUES) * F::BYTES);
        for first in (0..rows).step_by(2) {
            // SAFETY: as in `features_avx512`.
            unsafe {
                if rows - first == 1 {
                    pair_avx2::<F, 1>(d, x, w, first, features.clone(), out);
                } else {
                    pair_avx2::<F, 2>(d, x, w, first, features.clone(), out);
                }
            }
        }
    }

    /// [`pair_avx512`] with 8-lane vectors: a row's four accumulators take a run's four
    /// vectors.
    ///
    /// # Safety
    /// As [`features_avx2`], with rows `first..first + R` inside `x` and `out`.
    #[inline(always)]
    unsafe fn pair_avx2<F: IntBlock, const R: usize>(
        d: &BlockDims,
        x: &[f32],
        w: &[u8],
        first: usize,
        features: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        for f in features {
            // SAFETY: the caller guarantees AVX.
            let mut sums = [[unsafe { _mm256_setzero_ps() }; 4]; R];
            // SAFETY: as in `pair_avx512`.
            unsafe {
                runs::<F, _>(
                    d.k,
                    w,
                    f,
                    |h, b, c| values_avx2::<F>(h, b, c),
                    |b, values| {
                        for (r, sums) in sums.iter_mut().enumerate() {
                            let at = x.as_ptr().add((first + r) * d.k + b * VALUES);
                            for (i, (sum, v)) in sums.iter_mut().zip(&values).enumerate() {
                                *sum = _mm256_fmadd_ps(_mm256_loadu_ps(at.add(8 * i)), *v, *sum);
                            }
                        }
                    },
                );
            }
            for (r, [a, b, c, e]) in sums.iter().enumerate() {
                // SAFETY: as in `pair_avx512`; the lanes are summed by halves.
                unsafe {
                    let sum = _mm256_add_ps(_mm256_add_ps(*a, *b), _mm256_add_ps(*c, *e));
                    let half =
                        _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps::<1>(sum));
                    let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
                    let one = _mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair));
                    *out.ptr().add((first + r) * d.n + f) = _mm_cvtss_f32(one);
                }
            }
        }
    }
}

/// Without x86-64 intrinsics every format runs the portable loop.
#[cfg(not(target_arch = "x86_64"))]
mod wide {}

#[cfg(test)]
mod tests;

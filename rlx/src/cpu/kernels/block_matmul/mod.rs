//! `x · dequant(w)ᵀ` for a weight in a GGUF block format, read in place: the bytes a
//! token's step reads are the file's, a quarter to an eighth of float32 weights.
//!
//! Few rows of `x` (decoding): each output feature's blocks are dequantized into registers
//! one at a time and multiplied with every row, the features spread over the workers.
//! Many rows (a prompt): tiles of features are dequantized into a float32 panel and
//! multiplied by the GEMM, which then does the arithmetic at its full rate: the tile is
//! the GEMM's A, read in place, and `x` its B, packed once for every tile. Activations
//! stay float32 on these paths, so the result is the float32 product with the dequantized
//! weights up to the order of the sums; with int8 activations asked for, up to 27 rows
//! take the integer kernels of [`int8`] instead.

#[cfg(target_arch = "x86_64")]
mod exact;
mod formats;
mod int8;

use std::cell::RefCell;

use super::gemm::{GemmAcc, GemmDims, GemmPlan, gemm, kernel_shape, pack_b_shared, packed_b_len};
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
/// The same with int8 activations (decision 043): the integer kernels of [`int8`] run at
/// about the same rate from a few rows to many, while the GEMM's tiles of 32 rows run
/// part empty below 32 (half at 16); at 28 rows the two are about even.
const INT8_GEMM_ROWS: usize = 28;
/// Rows of `x` up to which a tile's product is computed transposed (see [`tiled`]).
const TRANSPOSED_ROWS: usize = 256;
/// Output features a decoding thread's share is a multiple of.
const FEATURES_PER_TASK: usize = 16;
/// Partial sums per block dot product: one vector of the widest instruction set.
const LANES: usize = 16;

/// The sizes of one product: `rows` rows of `x`, `n` output features, `k` inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockDims {
    pub format: GgmlType,
    pub activations: ActivationPrecision,
    pub rows: usize,
    pub n: usize,
    pub k: usize,
}

impl BlockDims {
    pub(crate) fn new(
        format: GgmlType,
        activations: ActivationPrecision,
        rows: usize,
        n: usize,
        k: usize,
    ) -> BlockDims {
        BlockDims {
            format,
            activations,
            rows,
            n,
            k,
        }
    }

    /// Whether the product goes through the GEMM in dequantized tiles (many rows).
    fn tiled(&self) -> bool {
        self.rows
            >= match self.activations {
                ActivationPrecision::Exact => GEMM_ROWS,
                ActivationPrecision::Int8 => INT8_GEMM_ROWS,
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
/// their fixed costs, not by the bytes they read). Many rows go as one list of tiles over
/// every part.
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
        Isa::Avx512 => unsafe { exact::dequantize_avx512::<F>(F::VALUES, w, range, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
        Isa::Avx2 => unsafe { exact::dequantize_avx2::<F>(F::VALUES, w, range, out) },
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
    if d.tiled() {
        tiled::<F>(x, parts);
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
            Isa::Avx512 => unsafe { exact::features_avx512::<F>(d, x, w, range, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
            Isa::Avx2 => unsafe { exact::features_avx2::<F>(d, x, w, range, out) },
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

/// How a tile's product is computed, and how wide its tiles are: a width and its half are
/// multiples of the GEMM kernels' side along the features (columns: 32 with AVX-512, 16
/// with AVX2; rows: 12 and 6), so no kernel call computes padding.
#[derive(Clone, Copy)]
enum Orientation {
    /// `x · denseᵀ`: `x` read in place as A, each tile packed as B; tiles of 64 features.
    Plain,
    /// `dense · xᵀ`: each tile read in place as A, `x` packed as B once for every tile;
    /// tiles of 72 features (in which the GEMM takes its regular kernel, which reads A in
    /// place: its tall one, taken for some products of 48 rows or fewer, packs A).
    Transposed,
}

impl Orientation {
    fn tile(self) -> usize {
        match self {
            Orientation::Plain => 64,
            Orientation::Transposed => 72,
        }
    }
}

/// Many rows: tiles of features over every part in one task list, each tile dequantized
/// to float32 and multiplied by the GEMM. Tiles are as wide as their orientation takes,
/// or half that when the wide tiles would leave a thread idle at the end (three tiles on
/// two threads keep one waiting a quarter of the product): a narrower tile dequantizes no
/// value twice, where cutting the rows would.
///
/// Up to `TRANSPOSED_ROWS` rows, a tile computes the transposed product: packing each
/// tile and copying its rows out took a seventh of a 128-row product, where `x` is packed
/// once for all tiles. With more rows the plain product measured faster (5-10% at 512
/// rows, even at 256): a tile's packing weighs less the more rows share it.
fn tiled<F: formats::IntBlock>(x: &[f32], parts: &[Part<'_>]) {
    let d = &parts[0].dims;
    let orientation = if d.rows <= TRANSPOSED_ROWS {
        Orientation::Transposed
    } else {
        Orientation::Plain
    };
    let tiles_of = |width: usize| -> usize { parts.iter().map(|p| p.dims.n.div_ceil(width)).sum() };
    let features: usize = parts.iter().map(|p| p.dims.n).sum();
    let threads = crate::cpu::workers::threads();
    let spread = threads > 1 && parallel(d.rows * features * d.k);
    // Whether the last round of tasks is at least 95% full.
    let balanced = |tasks: usize| tasks * 20 >= tasks.div_ceil(threads) * threads * 19;
    let tile = orientation.tile();
    let width = if spread && !balanced(tiles_of(tile)) {
        tile / 2
    } else {
        tile
    };
    let shape = kernel_shape(DType::F32);
    PACKED_X.with(|packed| {
        let packed = &mut *packed.borrow_mut();
        let packed_x = match orientation {
            Orientation::Plain => None,
            Orientation::Transposed => {
                packed.resize(packed_b_len(d.k, d.rows, shape), 0.0);
                // B = xᵀ: element (p, i) is x[i][p]; packed by every thread, blocks of k.
                let plan = GemmPlan::new(rows_by_rows(tile, d.rows, d.k), threads, shape);
                pack_b_shared(&plan, x, packed);
                Some(&packed[..])
            }
        };
        let task = |t: usize| {
            let mut tile = t;
            for p in parts {
                let count = p.dims.n.div_ceil(width);
                if tile < count {
                    let first = tile * width;
                    tile_product::<F>(p, x, packed_x, first..p.dims.n.min(first + width));
                    return;
                }
                tile -= count;
            }
        };
        let tasks = tiles_of(width);
        if spread {
            crate::cpu::workers::for_each(tasks, task);
        } else {
            (0..tasks).for_each(task);
        }
    });
}

thread_local! {
    /// The calling thread's `x` packed as the GEMM's B, kept between runs.
    static PACKED_X: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// A worker's dequantized tile, product tile and GEMM scratch, kept between runs.
    static TILE_BUFFERS: RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// `a · bᵀ` for `a` (`m x k`) and `b` (`n x k`), both row-major: the GEMM of either
/// orientation of a tile's product (`x · denseᵀ` or `dense · xᵀ`).
fn rows_by_rows(m: usize, n: usize, k: usize) -> GemmDims {
    GemmDims {
        m,
        n,
        k,
        a_rs: k,
        a_cs: 1,
        b_rs: 1,
        b_cs: k,
    }
}

/// Part `p`'s features `range` for every row of `x`, through a dequantized tile and the
/// GEMM: transposed when `packed_x` (`x` packed as the GEMM's B) is given.
fn tile_product<F: formats::IntBlock>(
    p: &Part<'_>,
    x: &[f32],
    packed_x: Option<&[f32]>,
    range: std::ops::Range<usize>,
) {
    let d = &p.dims;
    let (first, cols, rows) = (range.start, range.len(), d.rows);
    TILE_BUFFERS.with(|buffers| {
        let (dense, product, scratch) = &mut *buffers.borrow_mut();
        dense.resize(cols * d.k, 0.0);
        product.resize(cols * rows, 0.0);
        match isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL.
            Isa::Avx512 => unsafe { exact::dequantize_avx512::<F>(d.k, p.w, range, dense) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
            Isa::Avx2 => unsafe { exact::dequantize_avx2::<F>(d.k, p.w, range, dense) },
            _ => vectorized(Dequantize::<F> {
                k: d.k,
                w: p.w,
                range,
                dense,
                format: std::marker::PhantomData,
            }),
        }
        // Row r of the output, features first..first + cols.
        let out_row = |r: usize| {
            // SAFETY: row r's features first..first + cols lie inside the rows x n output
            // and belong to this task alone; `product` does not overlap them.
            unsafe { std::slice::from_raw_parts_mut(p.out.ptr().add(r * d.n + first), cols) }
        };
        // Transposed: product (cols x rows) = dense · xᵀ; plain: (rows x cols) = x · denseᵀ.
        let (dims, a, b) = match packed_x {
            Some(_) => (rows_by_rows(cols, rows, d.k), &dense[..], x),
            None => (rows_by_rows(rows, cols, d.k), x, &dense[..]),
        };
        let plan = GemmPlan::new(dims, 1, kernel_shape(DType::F32));
        scratch.resize(plan.scratch_len(), 0.0);
        gemm::<f32, f32>(
            &plan,
            f32::micro_kernels(),
            a,
            b,
            product,
            scratch,
            packed_x,
            None,
        );
        if packed_x.is_some() {
            for r in 0..rows {
                for (j, o) in out_row(r).iter_mut().enumerate() {
                    *o = product[j * rows + r];
                }
            }
        } else {
            for (r, row) in product.chunks_exact(cols).enumerate() {
                out_row(r).copy_from_slice(row);
            }
        }
    });
}

#[cfg(test)]
mod tests;

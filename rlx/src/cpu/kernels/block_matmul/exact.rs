//! The exact path's kernels written with AVX-512 and AVX2 intrinsics: 32 values of a block
//! at a time, their integers (as [`super::formats`] reads them) widened to float vectors and
//! scaled, then multiplied into per-row vector accumulators (summed across lanes once per
//! feature) or stored.

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
unsafe fn values_avx512<F: IntBlock>(head: &F::Head, block: *const u8, c: usize) -> [__m512; 2] {
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
    // SAFETY: the caller's contract; `row_pairs` hands out rows inside the ones it checked.
    row_pairs::<F>(d, x, w, &features, |first, two| unsafe {
        if two {
            pair_avx512::<F, 2>(d, x, w, first, features.clone(), out);
        } else {
            pair_avx512::<F, 1>(d, x, w, first, features.clone(), out);
        }
    });
}

/// Calls `pair(first, two)` for the rows of `d` (at most `GEMM_ROWS`) two at a time, `two`
/// false for a last odd row, after checking that `x` holds those rows and `w` the
/// features' blocks.
#[inline(always)]
fn row_pairs<F: IntBlock>(
    d: &BlockDims,
    x: &[f32],
    w: &[u8],
    features: &std::ops::Range<usize>,
    mut pair: impl FnMut(usize, bool),
) {
    let rows = d.rows.min(GEMM_ROWS);
    assert!(x.len() >= rows * d.k && w.len() >= features.end * (d.k / F::VALUES) * F::BYTES);
    for first in (0..rows).step_by(2) {
        pair(first, rows - first > 1);
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
    // SAFETY: as in `features_avx512`.
    row_pairs::<F>(d, x, w, &features, |first, two| unsafe {
        if two {
            pair_avx2::<F, 2>(d, x, w, first, features.clone(), out);
        } else {
            pair_avx2::<F, 1>(d, x, w, first, features.clone(), out);
        }
    });
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
                let half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps::<1>(sum));
                let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
                let one = _mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair));
                *out.ptr().add((first + r) * d.n + f) = _mm_cvtss_f32(one);
            }
        }
    }
}

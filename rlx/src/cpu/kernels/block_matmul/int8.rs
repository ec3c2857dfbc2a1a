//! Products of up to 27 rows with int8 activations (`ActivationPrecision::Int8`; decoding,
//! a batch of sequences, a short prompt; decision 043): each row of `x`
//! is quantized once per run, block by block of 32, to int8 values and a float scale; a
//! feature's output is then a sum over its runs of 32 weights of an integer dot product of
//! 32 weight and 32 activation integers, times the two scales, plus the weights' offset
//! times the activations' sum. The K-quants' groups of 16 with their own integer scales
//! multiply each half's integer sum by its scale before the float scales apply. The
//! integer products are exact; floats round only per 32 values.
//!
//! On AVX-512 VNNI one `vpdpbusd` multiplies 32 values (unsigned by signed bytes, summed
//! into 8 lanes of 4 products: lanes 0–3 the first 16 values, 4–7 the last); AVX2 takes
//! `vpmaddubsw` + `vpmaddwd`, which sum the same products into the same lanes. Both need
//! the first operand unsigned: the formats with an offset store unsigned integers, and the
//! signed ones (`Q8_0`, `Q3_K`, `Q6_K`) enter as their magnitudes with their signs moved
//! onto the activations (`vpsignb`).

use std::cell::RefCell;

use super::formats::{Chunk, IntBlock, Sums};
use super::{BlockDims, INT8_GEMM_ROWS, Part, VALUES};
use crate::cpu::kernels::layout::SharedMut;
#[cfg(target_arch = "x86_64")]
use crate::cpu::kernels::simd::intel_cpu;
use crate::cpu::kernels::simd::{Isa, VectorKernel, isa, vectorized};
use crate::gguf::half_f32;

/// How far ahead of the block being multiplied a decode kernel fetches the weight, in
/// bytes: the hardware prefetchers alone keep too few lines in flight to stream a weight at
/// the memory's rate. The best distance depends on the CPU: on Zen 4, 256–512 bytes ahead
/// doubled a decode step's products' speed and 2 KiB was slower again; on an Intel Xeon
/// with AMX, 2 KiB decoded faster than 512 bytes in 22 of 25 rounds (up to 1.5x).
/// `RLX_PREFETCH_AHEAD=BYTES` (at most 64 KiB) overrides the choice, for measuring a CPU
/// not yet measured.
#[cfg(target_arch = "x86_64")]
fn prefetch_ahead() -> usize {
    static AHEAD: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *AHEAD.get_or_init(|| {
        std::env::var("RLX_PREFETCH_AHEAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&bytes: &usize| bytes <= 64 << 10)
            .unwrap_or_else(|| if intel_cpu() { 2048 } else { 512 })
    })
}

/// Rows of `x` quantized per block of 32: `values` (row-major, as `x`), and per block its
/// `scale`, `sum` (the scale times the sum of its integers) and the same sum of each half
/// of 16, row-major `rows x blocks`.
#[derive(Default)]
pub(super) struct QuantizedRows {
    pub values: Vec<i8>,
    pub scales: Vec<f32>,
    pub sums: Vec<f32>,
    pub half_sums: Vec<[f32; 2]>,
}

impl QuantizedRows {
    /// Quantizes `x` (`len` a multiple of 32) into `self`: per block the scale is
    /// `max|x| / 127` and each value `x / scale` rounded to nearest, ties to even (a NaN in
    /// a block makes its scale NaN, so the products it enters are NaN).
    pub(super) fn quantize(&mut self, x: &[f32]) {
        let blocks = x.len() / VALUES;
        self.values.resize(x.len(), 0);
        self.scales.resize(blocks, 0.0);
        self.sums.resize(blocks, 0.0);
        self.half_sums.resize(blocks, [0.0; 2]);
        vectorized(Quantize { x, rows: self });
    }
}

/// [`QuantizedRows::quantize`]'s loop (a struct, so that it is compiled inside each
/// instruction set's copy).
struct Quantize<'a> {
    x: &'a [f32],
    rows: &'a mut QuantizedRows,
}

impl VectorKernel for Quantize<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let q = self.rows;
        for ((((xs, qs), scale), sum), halves) in self
            .x
            .chunks_exact(VALUES)
            .zip(q.values.chunks_exact_mut(VALUES))
            .zip(q.scales.iter_mut())
            .zip(q.sums.iter_mut())
            .zip(q.half_sums.iter_mut())
        {
            let (d, totals) = quantize_block(xs.try_into().expect("32 values"), qs);
            *scale = d;
            *sum = d * (totals[0] + totals[1]) as f32;
            *halves = [d * totals[0] as f32, d * totals[1] as f32];
        }
    }
}

/// One block's scale and the sums of the integers of its halves, the integers written to
/// `q`.
#[inline(always)]
pub(super) fn quantize_block(x: &[f32; VALUES], q: &mut [i8]) -> (f32, [i32; 2]) {
    let mut amax = 0f32;
    for v in x {
        // NaN sticks: `a > NaN` and `NaN > a` are both false, so test it explicitly.
        if v.abs() > amax || v.is_nan() {
            amax = if amax.is_nan() { amax } else { v.abs() };
        }
    }
    let d = amax / 127.0;
    let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut totals = [0i32; 2];
    for (j, (q, v)) in q.iter_mut().zip(x).enumerate() {
        // |v · inverse| ≤ 127 up to rounding, so the cast never saturates a finite value.
        let r = (v * inverse).round_ties_even() as i8;
        *q = r;
        totals[j / 16] += i32::from(r);
    }
    (d, totals)
}

thread_local! {
    /// The calling thread's quantized rows, kept between runs.
    static QUANTIZED: RefCell<QuantizedRows> = RefCell::new(QuantizedRows::default());
}

/// Each part's `out` (`rows x n`, `rows` < [`INT8_GEMM_ROWS`]) = `x` · dequant(`w`)ᵀ with
/// `x` quantized to int8 once for every part.
pub(super) fn decode<F: IntBlock>(x: &[f32], parts: &[Part<'_>]) {
    let d = &parts[0].dims;
    // The scalar kernel's sums hold that many rows.
    debug_assert!(d.rows < INT8_GEMM_ROWS);
    QUANTIZED.with(|cell| {
        let q = &mut *cell.borrow_mut();
        q.quantize(&x[..d.rows * d.k]);
        let q = &*q;
        let run = |p: &Part<'_>, range: std::ops::Range<usize>| {
            let (d, w, out) = (&p.dims, p.w, p.out);
            match isa() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL (and
                // so AVX2); `has_vnni` adds VNNI.
                Isa::Avx512 if wide::has_vnni() => unsafe {
                    wide::features_vnni::<F>(d, q, w, range, out)
                },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `isa` returns Avx512 or Avx2 only when the CPU has AVX2 and FMA.
                Isa::Avx512 | Isa::Avx2 => unsafe { wide::features_avx2::<F>(d, q, w, range, out) },
                _ => features_scalar::<F>(d, q, w, range, out),
            }
        };
        super::spread_features(parts, run);
    });
}

/// The factor of the activations' sums a run of 32 adds: its offsets times the sums of
/// block `at`, read without bounds checks (the kernels assert the sizes once).
///
/// # Safety
/// `at` is below `q.sums.len()` and `q.half_sums.len()`.
#[inline(always)]
unsafe fn offset_term<F: IntBlock>(chunk: &Chunk, q: &QuantizedRows, at: usize) -> f32 {
    debug_assert!(at < q.sums.len() && at < q.half_sums.len());
    match F::SUMS {
        Sums::None => 0.0,
        // SAFETY: the caller's contract.
        Sums::Whole => chunk.offsets[0] * unsafe { *q.sums.get_unchecked(at) },
        Sums::Halves => {
            // SAFETY: the caller's contract.
            let [a, b] = unsafe { *q.half_sums.get_unchecked(at) };
            chunk.offsets[0] * a + chunk.offsets[1] * b
        }
    }
}

/// The integer kernel without vector instructions: features `range` of every row.
fn features_scalar<F: IntBlock>(
    d: &BlockDims,
    q: &QuantizedRows,
    w: &[u8],
    range: std::ops::Range<usize>,
    out: SharedMut<f32>,
) {
    let runs = d.k / VALUES;
    let per_block = F::VALUES / VALUES;
    let row_bytes = d.k / F::VALUES * F::BYTES;
    assert!(q.sums.len() >= d.rows * runs && q.half_sums.len() >= d.rows * runs);
    let mut ints = [0i32; VALUES];
    for f in range {
        let mut sums = [0f32; INT8_GEMM_ROWS];
        for (at_block, block) in w[f * row_bytes..][..row_bytes]
            .chunks_exact(F::BYTES)
            .enumerate()
        {
            let head = F::head(block, |at| half_f32(block, at));
            for c in 0..per_block {
                let b = at_block * per_block + c;
                F::integers(block, c, &mut ints);
                let chunk = F::chunk(&head, block, c);
                for (r, sum) in sums.iter_mut().enumerate().take(d.rows) {
                    let at = r * runs + b;
                    let xs = &q.values[at * VALUES..][..VALUES];
                    let dot = |half: usize| -> i32 {
                        let (ws, xs) = (&ints[half * 16..][..16], &xs[half * 16..][..16]);
                        ws.iter().zip(xs).map(|(a, b)| a * i32::from(*b)).sum()
                    };
                    let dot = dot(0) * chunk.halves[0] + dot(1) * chunk.halves[1];
                    // SAFETY: `at` is below `d.rows * runs`, inside both sums (asserted).
                    let offset = unsafe { offset_term::<F>(&chunk, q, at) };
                    *sum += chunk.scale * q.scales[at] * dot as f32 + offset;
                }
            }
        }
        for (r, sum) in sums.iter().enumerate().take(d.rows) {
            // SAFETY: (r, f) lies inside the rows x n output, and feature f belongs to
            // this task alone.
            unsafe { *out.ptr().add(r * d.n + f) = *sum };
        }
    }
}

/// The integer kernels in AVX2 and AVX-512 VNNI intrinsics, on 256-bit vectors: 32 values
/// per instruction.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::*;

    use super::{IntBlock, QuantizedRows, Sums, offset_term, prefetch_ahead};
    use crate::cpu::kernels::block_matmul::formats::half_f16c as half;
    use crate::cpu::kernels::block_matmul::{BlockDims, VALUES};
    use crate::cpu::kernels::layout::SharedMut;

    /// Features a group of [`features`] holds while every row goes over it: 32 rows of
    /// blocks (about 20–52 KB of Q8_0 for SmolLM2's products) stay in the L2 cache.
    const FEATURE_GROUP: usize = 32;
    /// Rows from which [`features`] goes over the features in groups.
    const GROUPED_ROWS: usize = 16;

    /// Whether the CPU has AVX-512 VNNI (with VL, for the 256-bit form).
    pub(super) fn has_vnni() -> bool {
        static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *VNNI.get_or_init(|| {
            is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
        })
    }

    /// Lane `j` the sum of the eight lanes of `sums[j]`, in the order [`block_sums`] adds
    /// integers: pairs, then pairs of pairs, then the two halves. A lane's sum depends on
    /// its own vector alone, so a feature's output is the same whichever group of eight it
    /// is reduced in (a thread's share of the features starts anywhere).
    #[inline(always)]
    unsafe fn lane_sums(sums: &[__m256; 8]) -> __m256 {
        // SAFETY: register-only AVX arithmetic, enabled by the callers.
        unsafe {
            let low = _mm256_hadd_ps(
                _mm256_hadd_ps(sums[0], sums[1]),
                _mm256_hadd_ps(sums[2], sums[3]),
            );
            let high = _mm256_hadd_ps(
                _mm256_hadd_ps(sums[4], sums[5]),
                _mm256_hadd_ps(sums[6], sums[7]),
            );
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(low, high),
                _mm256_permute2f128_ps::<0x31>(low, high),
            )
        }
    }

    /// Lane `j` the sum of the eight lanes of `dots[j]`: four levels of pairwise sums
    /// within each 128-bit half, then the halves added.
    #[inline(always)]
    unsafe fn block_sums(dots: [__m256i; 8]) -> __m256i {
        // SAFETY: register-only AVX2 arithmetic, enabled by the callers.
        unsafe {
            // No closure here: it would be compiled without the callers' vector features.
            // Lanes of each half: blocks 0-3 (then 4-7), their first or last four lanes.
            let low = _mm256_hadd_epi32(
                _mm256_hadd_epi32(dots[0], dots[1]),
                _mm256_hadd_epi32(dots[2], dots[3]),
            );
            let high = _mm256_hadd_epi32(
                _mm256_hadd_epi32(dots[4], dots[5]),
                _mm256_hadd_epi32(dots[6], dots[7]),
            );
            _mm256_add_epi32(
                _mm256_permute2x128_si256::<0x20>(low, high),
                _mm256_permute2x128_si256::<0x31>(low, high),
            )
        }
    }

    /// The body of both kernels: `dot(u, s)` is the 8-lane integer dot product of
    /// unsigned bytes `u` and signed bytes `s`. Features go one at a time, each read front
    /// to back (one sequential stream per thread is what the memory system serves fastest),
    /// and rows four at a time, so that each row's sum stays in a register.
    ///
    /// # Safety
    /// AVX2, FMA and F16C enabled, plus what `dot` needs; `q` holds `rows x k` quantized
    /// values, `w` at least `range.end` rows of blocks, and no other task writes these
    /// features of `out` (`rows x n`).
    #[inline(always)]
    unsafe fn features<F: IntBlock, const MASKS: bool>(
        d: &BlockDims,
        q: &QuantizedRows,
        w: &[u8],
        range: std::ops::Range<usize>,
        out: SharedMut<f32>,
        dot: impl Fn(__m256i, __m256i) -> __m256i + Copy,
    ) {
        let runs = d.k / VALUES;
        let rows = d.rows;
        assert!(w.len() >= range.end * (d.k / F::VALUES) * F::BYTES);
        assert!(q.values.len() >= rows * d.k && q.scales.len() >= rows * runs);
        assert!(q.sums.len() >= rows * runs && q.half_sums.len() >= rows * runs);
        let ahead = prefetch_ahead();
        // Rows go over each feature four at a time. From `GROUPED_ROWS` rows on (four
        // passes or more), in groups of features small enough to stay in the core's cache
        // meanwhile, so a weight larger than the caches is read from memory once, not once a
        // pass (a feature's output does not depend on where the groups start, see
        // `lane_sums`). Fewer rows go over the whole range: one stream per thread, which
        // the prefetch keeps ahead of.
        let group = if rows >= GROUPED_ROWS {
            FEATURE_GROUP
        } else {
            range.len().max(1)
        };
        for start in range.clone().step_by(group) {
            let features = start..range.end.min(start + group);
            for first in (0..rows).step_by(4) {
                let tile = Tile {
                    d,
                    q,
                    w,
                    first,
                    out,
                    ahead,
                };
                // SAFETY: the caller's contract, and rows first.. lie inside the `rows`
                // asserted.
                unsafe {
                    match rows - first {
                        1 => tile.run::<F, 1, MASKS>(features.clone(), dot),
                        2 => tile.run::<F, 2, MASKS>(features.clone(), dot),
                        3 => tile.run::<F, 3, MASKS>(features.clone(), dot),
                        _ => tile.run::<F, 4, MASKS>(features.clone(), dot),
                    }
                }
            }
        }
    }

    /// Rows `first..first + R` of a product.
    struct Tile<'a> {
        d: &'a BlockDims,
        q: &'a QuantizedRows,
        w: &'a [u8],
        first: usize,
        out: SharedMut<f32>,
        /// [`prefetch_ahead`]'s distance.
        ahead: usize,
    }

    impl Tile<'_> {
        /// # Safety
        /// As [`features`], with rows `first..first + R` inside the product.
        #[inline(always)]
        unsafe fn run<F: IntBlock, const R: usize, const MASKS: bool>(
            &self,
            range: std::ops::Range<usize>,
            dot: impl Fn(__m256i, __m256i) -> __m256i + Copy,
        ) {
            let (d, q) = (self.d, self.q);
            let runs = d.k / VALUES;
            let per_block = F::VALUES / VALUES;
            let row_bytes = d.k / F::VALUES * F::BYTES;
            let blocks = d.k / F::VALUES;
            // Formats of one run a block go eight blocks at a time where they can: their
            // factors read as vectors (`IntBlock::factors_of_eight`), each row's eight
            // integer sums reduced into one vector and scaled at once (a broadcast, a
            // conversion and a multiply-add a block otherwise).
            let grouped = if per_block == 1 { blocks / 8 * 8 } else { 0 };
            // K-quants (eight runs a block) likewise take a block's eight runs at once: their
            // factors read run by run, then each row's eight sums scaled as one vector.
            let whole = if per_block == 8 { blocks } else { 0 };
            // Each row's last (up to) eight features' lane vectors and offsets, reduced
            // together: one horizontal sum a feature costs as much as a block's products.
            // SAFETY: AVX is enabled by the callers.
            let mut pending = [[unsafe { _mm256_setzero_ps() }; 8]; R];
            let mut pending_offsets = [[0f32; 8]; R];
            let start = range.start;
            let end = range.end;
            for f in range {
                // SAFETY: AVX is enabled by the callers.
                let mut sums = [unsafe { _mm256_setzero_ps() }; R];
                let mut offsets = [0f32; R];
                for at_block in (0..grouped).step_by(8) {
                    // SAFETY: blocks at_block..at_block + 8 of feature f lie inside `w`, and
                    // runs at_block.. of rows first..first + R inside `q` (the callers'
                    // asserts); a prefetch of any address is harmless; the vector
                    // instructions are enabled by the callers.
                    unsafe {
                        let first = self.w.as_ptr().add(f * row_bytes + at_block * F::BYTES);
                        for line in (0..8 * F::BYTES).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T0>(
                                first.wrapping_add(self.ahead + line).cast(),
                            );
                        }
                        let (scales, offs) = F::factors_of_eight(first);
                        // Loops, not closures: a closure is compiled without the callers' vector
                        // features, and the intrinsics in it would not be inlined.
                        let mut ints = [_mm256_setzero_si256(); 8];
                        let mut magnitudes = ints;
                        for (j, (v, m)) in ints.iter_mut().zip(&mut magnitudes).enumerate() {
                            *v = F::integers_x86::<MASKS>(first.add(j * F::BYTES), 0);
                            *m = if F::SIGNED {
                                _mm256_sign_epi8(*v, *v)
                            } else {
                                *v
                            };
                        }
                        for (r, sum) in sums.iter_mut().enumerate() {
                            let at = (self.first + r) * runs + at_block;
                            let dots = eight_dots::<F>(q, at, &ints, &magnitudes, dot);
                            let integers = _mm256_cvtepi32_ps(block_sums(dots));
                            let x_scales = _mm256_loadu_ps(q.scales.as_ptr().add(at));
                            let factors = _mm256_mul_ps(scales, x_scales);
                            *sum = _mm256_fmadd_ps(integers, factors, *sum);
                            if F::SUMS != Sums::None {
                                let x_sums = _mm256_loadu_ps(q.sums.as_ptr().add(at));
                                *sum = _mm256_fmadd_ps(offs, x_sums, *sum);
                            }
                        }
                    }
                }
                for at_block in 0..whole {
                    // SAFETY: block `at_block` of feature f lies inside `w`, and its runs of
                    // rows first..first + R inside `q` (the callers' asserts); a prefetch of
                    // any address is harmless; the vector instructions and F16C are enabled by
                    // the callers.
                    unsafe {
                        let block = self.w.as_ptr().add(f * row_bytes + at_block * F::BYTES);
                        for line in (0..F::BYTES).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T0>(
                                block.wrapping_add(self.ahead + line).cast(),
                            );
                        }
                        let bytes = std::slice::from_raw_parts(block, F::BYTES);
                        let head = F::head(bytes, |at| half(block.add(at)));
                        let mut scales = [0f32; 8];
                        let mut wholes = [0f32; 8];
                        // Interleaved as the activations' half sums are: run c's two at 2c.
                        let mut halves_offsets = [0f32; 16];
                        let mut halves = [_mm256_setzero_si256(); 8];
                        let mut ints = halves;
                        let mut magnitudes = halves;
                        for c in 0..8 {
                            let chunk = F::chunk(&head, bytes, c);
                            scales[c] = chunk.scale;
                            wholes[c] = chunk.offsets[0];
                            halves_offsets[2 * c] = chunk.offsets[0];
                            halves_offsets[2 * c + 1] = chunk.offsets[1];
                            let [low, high] = chunk.halves;
                            halves[c] =
                                _mm256_setr_epi32(low, low, low, low, high, high, high, high);
                            ints[c] = F::integers_x86::<MASKS>(block, c);
                            magnitudes[c] = if F::SIGNED {
                                _mm256_sign_epi8(ints[c], ints[c])
                            } else {
                                ints[c]
                            };
                        }
                        let scales = _mm256_loadu_ps(scales.as_ptr());
                        for (r, sum) in sums.iter_mut().enumerate() {
                            let at = (self.first + r) * runs + at_block * 8;
                            let mut dots = eight_dots::<F>(q, at, &ints, &magnitudes, dot);
                            if F::HALVES {
                                for (lanes, halves) in dots.iter_mut().zip(&halves) {
                                    *lanes = _mm256_mullo_epi32(*lanes, *halves);
                                }
                            }
                            let integers = _mm256_cvtepi32_ps(block_sums(dots));
                            let x_scales = _mm256_loadu_ps(q.scales.as_ptr().add(at));
                            *sum = _mm256_fmadd_ps(integers, _mm256_mul_ps(scales, x_scales), *sum);
                            match F::SUMS {
                                Sums::None => {}
                                Sums::Whole => {
                                    let x_sums = _mm256_loadu_ps(q.sums.as_ptr().add(at));
                                    let offs = _mm256_loadu_ps(wholes.as_ptr());
                                    *sum = _mm256_fmadd_ps(offs, x_sums, *sum);
                                }
                                Sums::Halves => {
                                    let x_sums = q.half_sums.as_ptr().add(at).cast::<f32>();
                                    for part in 0..2 {
                                        let offs =
                                            _mm256_loadu_ps(halves_offsets.as_ptr().add(8 * part));
                                        let x = _mm256_loadu_ps(x_sums.add(8 * part));
                                        *sum = _mm256_fmadd_ps(offs, x, *sum);
                                    }
                                }
                            }
                        }
                    }
                }
                for at_block in grouped.max(whole)..blocks {
                    // SAFETY: block `at_block` of feature f lies inside `w` (the callers'
                    // asserts).
                    let block = unsafe { self.w.as_ptr().add(f * row_bytes + at_block * F::BYTES) };
                    // SAFETY: as above, `F::BYTES` bytes.
                    let bytes = unsafe { std::slice::from_raw_parts(block, F::BYTES) };
                    // SAFETY: bytes at..at + 2 lie in the block; F16C is enabled by the callers.
                    let head = F::head(bytes, |at| unsafe { half(block.add(at)) });
                    for c in 0..per_block {
                        let b = at_block * per_block + c;
                        // SAFETY: rows first..first + R's run b lies inside `q` (the callers'
                        // asserts); a prefetch of any address is harmless; the vector
                        // instructions are enabled by the callers.
                        unsafe {
                            let ahead = self.ahead + c * F::BYTES / per_block;
                            _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(ahead).cast());
                            let chunk = F::chunk(&head, bytes, c);
                            let ints = F::integers_x86::<MASKS>(block, c);
                            let magnitudes = if F::SIGNED {
                                _mm256_sign_epi8(ints, ints)
                            } else {
                                ints
                            };
                            let [low, high] = chunk.halves;
                            let halves =
                                _mm256_setr_epi32(low, low, low, low, high, high, high, high);
                            for r in 0..R {
                                let at = (self.first + r) * runs + b;
                                let xs =
                                    _mm256_loadu_si256(q.values.as_ptr().add(at * VALUES).cast());
                                let xs = if F::SIGNED {
                                    _mm256_sign_epi8(xs, ints)
                                } else {
                                    xs
                                };
                                let mut lanes = dot(magnitudes, xs);
                                if F::HALVES {
                                    lanes = _mm256_mullo_epi32(lanes, halves);
                                }
                                let products = _mm256_cvtepi32_ps(lanes);
                                let scale = chunk.scale * *q.scales.get_unchecked(at);
                                sums[r] = _mm256_fmadd_ps(products, _mm256_set1_ps(scale), sums[r]);
                                if F::SUMS != Sums::None {
                                    offsets[r] += offset_term::<F>(&chunk, q, at);
                                }
                            }
                        }
                    }
                }
                let slot = (f - start) % 8;
                for r in 0..R {
                    pending[r][slot] = sums[r];
                    pending_offsets[r][slot] = offsets[r];
                }
                if slot == 7 || f + 1 == end {
                    let group = f - slot;
                    for r in 0..R {
                        // SAFETY: features group..=f of row first + r lie inside the rows x n
                        // output and belong to this task alone; AVX is enabled by the callers.
                        unsafe {
                            let totals = _mm256_add_ps(
                                lane_sums(&pending[r]),
                                _mm256_loadu_ps(pending_offsets[r].as_ptr()),
                            );
                            let at = self.out.ptr().add((self.first + r) * d.n + group);
                            if slot == 7 {
                                _mm256_storeu_ps(at, totals);
                            } else {
                                let mut lanes = [0f32; 8];
                                _mm256_storeu_ps(lanes.as_mut_ptr(), totals);
                                std::ptr::copy_nonoverlapping(lanes.as_ptr(), at, slot + 1);
                            }
                        }
                    }
                }
            }
        }
    }

    /// One row's integer dot products with eight runs of a block: runs `at..at + 8` of `q`'s
    /// activations against `ints` (`magnitudes`: their absolute values for signed formats,
    /// the activations taking their signs), one vector of lane sums per run.
    ///
    /// # Safety
    /// Runs `at..at + 8` lie inside `q`; AVX2 is enabled by the callers.
    #[inline(always)]
    unsafe fn eight_dots<F: IntBlock>(
        q: &QuantizedRows,
        at: usize,
        ints: &[__m256i; 8],
        magnitudes: &[__m256i; 8],
        dot: impl Fn(__m256i, __m256i) -> __m256i,
    ) -> [__m256i; 8] {
        // SAFETY: AVX is enabled by the callers.
        let mut dots = [unsafe { _mm256_setzero_si256() }; 8];
        for (j, lanes) in dots.iter_mut().enumerate() {
            // SAFETY: the caller's contract.
            unsafe {
                let xs = _mm256_loadu_si256(q.values.as_ptr().add((at + j) * VALUES).cast());
                let xs = if F::SIGNED {
                    _mm256_sign_epi8(xs, ints[j])
                } else {
                    xs
                };
                *lanes = dot(magnitudes[j], xs);
            }
        }
        dots
    }

    /// Features `range` of every row with AVX-512 VNNI's `vpdpbusd`.
    ///
    /// # Safety
    /// AVX2, FMA, F16C, AVX-512 F/BW/VL and VNNI must be available; otherwise as
    /// [`features`].
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn features_vnni<F: IntBlock>(
        d: &BlockDims,
        q: &QuantizedRows,
        w: &[u8],
        range: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        // SAFETY: the features `features` needs are enabled here.
        unsafe {
            features::<F, true>(d, q, w, range, out, |u, s| {
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
            })
        }
    }

    /// Features `range` of every row with AVX2's `vpmaddubsw` (pairs of products summed to
    /// 16 bits: at most 2 · 128 · 127, no saturation) and `vpmaddwd`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available; otherwise as [`features`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn features_avx2<F: IntBlock>(
        d: &BlockDims,
        q: &QuantizedRows,
        w: &[u8],
        range: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        // SAFETY: the features `features` needs are enabled here.
        unsafe {
            features::<F, false>(d, q, w, range, out, |u, s| {
                _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
            })
        }
    }
}

#[cfg(test)]
mod tests;

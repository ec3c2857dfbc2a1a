//! Few-row products with int8 activations (`ActivationPrecision::Int8`): each row of `x`
//! is quantized once per run, block by block, to int8 values and a float scale; a
//! feature's output is then a sum over its blocks of an integer dot product of 32 weight
//! and 32 activation integers, times the two scales, plus the weight's offset times the
//! activations' sum. The integer products are exact; floats round only per block.
//!
//! On AVX-512 VNNI one `vpdpbusd` multiplies a block (unsigned by signed bytes, summed
//! into 8 lanes); AVX2 takes `vpmaddubsw` + `vpmaddwd`. Both need the first operand
//! unsigned: 4-bit values are (0..=15), and `Q8_0`'s signed weights enter as their
//! magnitudes with their signs moved onto the activations (`vpsignb`).

use std::cell::RefCell;

use super::{BlockDims, GEMM_ROWS, VALUES};
use crate::cpu::kernels::layout::SharedMut;
use crate::cpu::kernels::simd::{Isa, isa, vectorized};
use crate::gguf::{Block, Q4_0Block, Q4_1Block, Q5_0Block, Q5_1Block, Q8_0Block, half_f32};

/// How far ahead of the block being multiplied a decode kernel fetches the weight, in
/// bytes: the hardware prefetchers alone keep too few lines in flight to stream a weight at
/// the memory's rate (measured on Zen 4: 256–512 bytes ahead doubles a decode step's
/// products' speed; 2 KiB ahead is slower again).
const AHEAD: usize = 512;

/// How a format's 32 stored integers become its values, besides the scale.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Offset {
    /// `d · q` with `q` a signed byte (`Q8_0`).
    None,
    /// `d · (q − 8)` with `q` a nibble (`Q4_0`).
    Eight,
    /// `d · (q − 16)` with `q` five bits (`Q5_0`).
    Sixteen,
    /// `d · q + m` with `q` a nibble or five bits and `m` the block's minimum (`Q4_1`,
    /// `Q5_1`).
    Minimum,
}

impl Offset {
    /// The factor of the activations' sum: `−8 d`, `−16 d`, `m` or 0, `m` read by `minimum`.
    #[inline(always)]
    fn factor(self, scale: f32, minimum: impl FnOnce() -> f32) -> f32 {
        match self {
            Offset::None => 0.0,
            Offset::Eight => -8.0 * scale,
            Offset::Sixteen => -16.0 * scale,
            Offset::Minimum => minimum(),
        }
    }
}

/// A block format as the integer kernels read it: an f16 scale at byte 0 (and the minimum
/// at byte 2), then the values.
pub(super) trait IntBlock: Block {
    const OFFSET: Offset;
    /// Where the 32 signed bytes or 16 bytes of nibbles start.
    const VALUES_AT: usize;
    /// Where the 32 fifth bits (one little-endian word) are, in the 5-bit formats.
    const FIFTH_BITS_AT: Option<usize>;
}

impl IntBlock for Q8_0Block {
    const OFFSET: Offset = Offset::None;
    const VALUES_AT: usize = 2;
    const FIFTH_BITS_AT: Option<usize> = None;
}

impl IntBlock for Q4_0Block {
    const OFFSET: Offset = Offset::Eight;
    const VALUES_AT: usize = 2;
    const FIFTH_BITS_AT: Option<usize> = None;
}

impl IntBlock for Q4_1Block {
    const OFFSET: Offset = Offset::Minimum;
    const VALUES_AT: usize = 4;
    const FIFTH_BITS_AT: Option<usize> = None;
}

impl IntBlock for Q5_0Block {
    const OFFSET: Offset = Offset::Sixteen;
    const VALUES_AT: usize = 6;
    const FIFTH_BITS_AT: Option<usize> = Some(2);
}

impl IntBlock for Q5_1Block {
    const OFFSET: Offset = Offset::Minimum;
    const VALUES_AT: usize = 8;
    const FIFTH_BITS_AT: Option<usize> = Some(4);
}

/// Rows of `x` quantized per block of 32: `values` (row-major, as `x`), and per block its
/// `scale` and `sum` (the scale times the sum of its integers), row-major `rows x blocks`.
#[derive(Default)]
pub(super) struct QuantizedRows {
    pub values: Vec<i8>,
    pub scales: Vec<f32>,
    pub sums: Vec<f32>,
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
        vectorized(|| {
            for (((xs, qs), scale), sum) in x
                .chunks_exact(VALUES)
                .zip(self.values.chunks_exact_mut(VALUES))
                .zip(self.scales.iter_mut())
                .zip(self.sums.iter_mut())
            {
                let (d, total) = quantize_block(xs.try_into().expect("32 values"), qs);
                *scale = d;
                *sum = d * total as f32;
            }
        });
    }
}

/// One block's scale and the sum of its integers, the integers written to `q`.
#[inline(always)]
pub(super) fn quantize_block(x: &[f32; VALUES], q: &mut [i8]) -> (f32, i32) {
    let mut amax = 0f32;
    for v in x {
        // NaN sticks: `a > NaN` and `NaN > a` are both false, so test it explicitly.
        if v.abs() > amax || v.is_nan() {
            amax = if amax.is_nan() { amax } else { v.abs() };
        }
    }
    let d = amax / 127.0;
    let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
    let mut total = 0i32;
    for (q, v) in q.iter_mut().zip(x) {
        // |v · inverse| ≤ 127 up to rounding, so the cast never saturates a finite value.
        let r = (v * inverse).round_ties_even() as i8;
        *q = r;
        total += i32::from(r);
    }
    (d, total)
}

thread_local! {
    /// The calling thread's quantized rows, kept between runs.
    static QUANTIZED: RefCell<QuantizedRows> = RefCell::new(QuantizedRows::default());
}

/// `out` (`rows x n`, `rows` < 16) = `x` · dequant(`w`)ᵀ with `x` quantized to int8.
pub(super) fn decode<F: IntBlock>(d: &BlockDims, x: &[f32], w: &[u8], out: &mut [f32]) {
    QUANTIZED.with(|cell| {
        let q = &mut *cell.borrow_mut();
        q.quantize(&x[..d.rows * d.k]);
        let q = &*q;
        let shared = SharedMut::new(out);
        let run = |range: std::ops::Range<usize>| match isa() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL (and
            // so AVX2); `has_vnni` adds VNNI.
            Isa::Avx512 if wide::has_vnni() => unsafe {
                wide::features_vnni::<F>(d, q, w, range, shared)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` returns Avx512 or Avx2 only when the CPU has AVX2 and FMA.
            Isa::Avx512 | Isa::Avx2 => unsafe { wide::features_avx2::<F>(d, q, w, range, shared) },
            _ => features_scalar::<F>(d, q, w, range, shared),
        };
        super::spread_features(d, run);
    });
}

/// The integer kernel without vector instructions: features `range` of every row.
fn features_scalar<F: IntBlock>(
    d: &BlockDims,
    q: &QuantizedRows,
    w: &[u8],
    range: std::ops::Range<usize>,
    out: SharedMut<f32>,
) {
    let blocks = d.k / VALUES;
    let row_bytes = blocks * F::BYTES;
    let mut ints = [0i32; VALUES];
    for f in range {
        let mut sums = [0f32; GEMM_ROWS];
        for b in 0..blocks {
            let block = &w[f * row_bytes + b * F::BYTES..][..F::BYTES];
            let (scale, offset) = block_integers::<F>(block, &mut ints);
            for (r, sum) in sums.iter_mut().enumerate().take(d.rows) {
                let at = r * blocks + b;
                let xs = &q.values[at * VALUES..][..VALUES];
                let dot: i32 = ints.iter().zip(xs).map(|(a, b)| a * i32::from(*b)).sum();
                *sum += scale * q.scales[at] * dot as f32 + offset * q.sums[at];
            }
        }
        for (r, sum) in sums.iter().enumerate().take(d.rows) {
            // SAFETY: (r, f) lies inside the rows x n output, and feature f belongs to
            // this task alone.
            unsafe { *out.ptr().add(r * d.n + f) = *sum };
        }
    }
}

/// A block's 32 integers into `ints`, its scale, and the factor of the activations' sum
/// (`−8 d`, `−16 d`, `m` or 0).
#[inline(always)]
pub(super) fn block_integers<F: IntBlock>(block: &[u8], ints: &mut [i32; VALUES]) -> (f32, f32) {
    let scale = half_f32(block, 0);
    let values = &block[F::VALUES_AT..F::BYTES];
    if F::OFFSET == Offset::None {
        for (i, v) in ints.iter_mut().zip(values) {
            *i = i32::from(*v as i8);
        }
    } else {
        let fifth = F::FIFTH_BITS_AT.map_or(0, |at| {
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        });
        for (j, v) in values.iter().enumerate() {
            ints[j] = i32::from(v & 0xF) | (((fifth >> j) & 1) << 4) as i32;
            ints[j + 16] = i32::from(v >> 4) | (((fifth >> (j + 16)) & 1) << 4) as i32;
        }
    }
    (scale, F::OFFSET.factor(scale, || half_f32(block, 2)))
}

/// The integer kernels in AVX2 and AVX-512 VNNI intrinsics, on 256-bit vectors: one block
/// of 32 bytes per instruction.
#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::*;

    use super::{AHEAD, IntBlock, Offset, QuantizedRows};
    use crate::cpu::kernels::block_matmul::{BlockDims, GEMM_ROWS, VALUES};
    use crate::cpu::kernels::layout::SharedMut;

    /// Whether the CPU has AVX-512 VNNI (with VL, for the 256-bit form).
    pub(super) fn has_vnni() -> bool {
        static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *VNNI.get_or_init(|| {
            is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
        })
    }

    /// The f16 at `at` as an f32, by F16C.
    #[inline(always)]
    unsafe fn half(at: *const u8) -> f32 {
        // SAFETY: two readable bytes at `at` (the callers' contract); F16C comes with the
        // callers' AVX2 (every AVX2 CPU has it) and is enabled on them.
        unsafe {
            let bits = i32::from(at.cast::<u16>().read_unaligned());
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
        }
    }

    /// A block's 32 integers as bytes, in value order: nibbles (0..=15, low ones first,
    /// with their fifth bits in the 5-bit formats) or signed bytes.
    #[inline(always)]
    unsafe fn integers<F: IntBlock>(block: *const u8) -> __m256i {
        // SAFETY: `F::BYTES` readable bytes at `block` (the callers' contract).
        unsafe {
            let values = block.add(F::VALUES_AT);
            if F::OFFSET == Offset::None {
                return _mm256_loadu_si256(values.cast());
            }
            let q = _mm_loadu_si128(values.cast());
            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
            let nibbles = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
            let Some(at) = F::FIFTH_BITS_AT else {
                return nibbles;
            };
            // Bit j of the word to 0x10 in byte j: each byte takes the word's byte j / 8,
            // ORs in every bit but j % 8, and is all ones exactly when bit j % 8 was set.
            let word = block.add(at).cast::<i32>().read_unaligned();
            let spread = _mm256_shuffle_epi8(
                _mm256_set1_epi32(word),
                _mm256_setr_epi64x(
                    0,
                    0x0101_0101_0101_0101,
                    0x0202_0202_0202_0202,
                    0x0303_0303_0303_0303,
                ),
            );
            let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
            let set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
            _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
        }
    }

    /// The sum of the 8 lanes of `v`.
    #[inline(always)]
    unsafe fn lanes_sum(v: __m256) -> f32 {
        // SAFETY: register-only AVX arithmetic, enabled by the callers.
        unsafe {
            let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let pair = _mm_add_ps(half, _mm_movehl_ps(half, half));
            _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
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
    unsafe fn features<F: IntBlock>(
        d: &BlockDims,
        q: &QuantizedRows,
        w: &[u8],
        range: std::ops::Range<usize>,
        out: SharedMut<f32>,
        dot: impl Fn(__m256i, __m256i) -> __m256i + Copy,
    ) {
        let blocks = d.k / VALUES;
        let rows = d.rows.min(GEMM_ROWS);
        assert!(w.len() >= range.end * blocks * F::BYTES);
        assert!(q.values.len() >= rows * d.k && q.scales.len() >= rows * blocks);
        assert!(q.sums.len() >= rows * blocks);
        for first in (0..rows).step_by(4) {
            let tile = Tile {
                d,
                q,
                w,
                first,
                out,
            };
            // SAFETY: the caller's contract, and rows first.. lie inside the `rows` asserted.
            unsafe {
                match rows - first {
                    1 => tile.run::<F, 1>(range.clone(), dot),
                    2 => tile.run::<F, 2>(range.clone(), dot),
                    3 => tile.run::<F, 3>(range.clone(), dot),
                    _ => tile.run::<F, 4>(range.clone(), dot),
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
    }

    impl Tile<'_> {
        /// # Safety
        /// As [`features`], with rows `first..first + R` inside the product.
        #[inline(always)]
        unsafe fn run<F: IntBlock, const R: usize>(
            &self,
            range: std::ops::Range<usize>,
            dot: impl Fn(__m256i, __m256i) -> __m256i + Copy,
        ) {
            let (d, q) = (self.d, self.q);
            let blocks = d.k / VALUES;
            let row_bytes = blocks * F::BYTES;
            for f in range {
                // SAFETY: AVX is enabled by the callers.
                let mut sums = [unsafe { _mm256_setzero_ps() }; R];
                let mut offsets = [0f32; R];
                for b in 0..blocks {
                    // SAFETY: block b of feature f lies inside `w`, and rows first..first + R's
                    // block b inside `q` (the callers' asserts); a prefetch of any address is
                    // harmless.
                    unsafe {
                        let block = self.w.as_ptr().add(f * row_bytes + b * F::BYTES);
                        _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(AHEAD).cast());
                        let scale = half(block);
                        let offset = F::OFFSET.factor(scale, || half(block.add(2)));
                        let ints = integers::<F>(block);
                        let magnitudes = match F::OFFSET {
                            Offset::None => _mm256_sign_epi8(ints, ints),
                            _ => ints,
                        };
                        for r in 0..R {
                            let at = (self.first + r) * blocks + b;
                            let xs = _mm256_loadu_si256(q.values.as_ptr().add(at * VALUES).cast());
                            let xs = match F::OFFSET {
                                Offset::None => _mm256_sign_epi8(xs, ints),
                                _ => xs,
                            };
                            let products = _mm256_cvtepi32_ps(dot(magnitudes, xs));
                            let factor = _mm256_set1_ps(scale * *q.scales.get_unchecked(at));
                            sums[r] = _mm256_fmadd_ps(products, factor, sums[r]);
                            if F::OFFSET != Offset::None {
                                offsets[r] += offset * *q.sums.get_unchecked(at);
                            }
                        }
                    }
                }
                for r in 0..R {
                    // SAFETY: (first + r, f) lies inside the rows x n output, and feature f
                    // belongs to this task alone.
                    unsafe {
                        let at = (self.first + r) * d.n + f;
                        *self.out.ptr().add(at) = lanes_sum(sums[r]) + offsets[r];
                    }
                }
            }
        }
    }

    /// Features `range` of every row with AVX-512 VNNI's `vpdpbusd`.
    ///
    /// # Safety
    /// AVX2, FMA, F16C, AVX-512 VNNI and VL must be available; otherwise as [`features`].
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    pub(super) unsafe fn features_vnni<F: IntBlock>(
        d: &BlockDims,
        q: &QuantizedRows,
        w: &[u8],
        range: std::ops::Range<usize>,
        out: SharedMut<f32>,
    ) {
        // SAFETY: the features `features` needs are enabled here.
        unsafe {
            features::<F>(d, q, w, range, out, |u, s| {
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
            features::<F>(d, q, w, range, out, |u, s| {
                _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgmlType, dequantize_f64};

    /// A little generator of reproducible numbers in `[0, 1)`.
    struct Numbers(u64);

    impl Numbers {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn blocks(format: GgmlType, count: usize, rng: &mut Numbers) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..count {
            out.extend(half::f16::from_f64(0.001 + 0.05 * rng.next()).to_le_bytes());
            let with_minimum = matches!(format, GgmlType::Q4_1 | GgmlType::Q5_1);
            if with_minimum {
                out.extend(half::f16::from_f64(-0.3 * rng.next()).to_le_bytes());
            }
            let head = if with_minimum { 4 } else { 2 };
            out.extend((head..format.block_bytes()).map(|_| (rng.next() * 256.0) as u8));
        }
        out
    }

    /// Every path (scalar, AVX2, VNNI where the CPU has them) against float64 sums of the
    /// same integers, and against the exact product within the documented bound.
    #[test]
    fn int8_products_are_the_integer_sums_and_within_the_bound() {
        let mut rng = Numbers(7);
        let formats = [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ];
        for format in formats {
            for rows in [1usize, 3, 15] {
                let (n, k) = (37, 96);
                let w = blocks(format, n * k / VALUES, &mut rng);
                let mut x: Vec<f32> = (0..rows * k)
                    .map(|_| (rng.next() * 4.0 - 2.0) as f32)
                    .collect();
                x[5] = 0.0; // a block's values of mixed magnitude, one of them zero
                x[..VALUES].iter_mut().skip(8).for_each(|v| *v *= 1e-3);
                let d = BlockDims::new(format, crate::ir::ActivationPrecision::Int8, rows, n, k);
                let mut q = QuantizedRows::default();
                q.quantize(&x);
                let row_bytes = k / VALUES * format.block_bytes();
                let mut dense = vec![0f64; n * k];
                for (row, out) in w.chunks(row_bytes).zip(dense.chunks_mut(k)) {
                    dequantize_f64(format, row, out).unwrap();
                }
                // float64 sums of the integers the kernels multiply.
                let mut want = vec![0f64; rows * n];
                let mut magnitude = vec![0f64; rows * n];
                let mut bound = vec![0f64; rows * n];
                for r in 0..rows {
                    for f in 0..n {
                        let (mut sum, mut size, mut err) = (0f64, 0f64, 0f64);
                        for b in 0..k / VALUES {
                            let at = r * (k / VALUES) + b;
                            let xs = &q.values[at * VALUES..][..VALUES];
                            let ws = &dense[f * k + b * VALUES..][..VALUES];
                            let step = f64::from(q.scales[at]);
                            for (xq, wv) in xs.iter().zip(ws) {
                                sum += f64::from(*xq) * step * wv;
                                size += (f64::from(*xq) * step * wv).abs();
                            }
                            let amax = x[r * k + b * VALUES..][..VALUES]
                                .iter()
                                .fold(0f64, |m, v| m.max(f64::from(v.abs())));
                            err += amax / 254.0 * ws.iter().map(|v| v.abs()).sum::<f64>();
                        }
                        want[r * n + f] = sum;
                        magnitude[r * n + f] = size;
                        bound[r * n + f] = err * 1.0001 + 1e-6 * size;
                    }
                }
                let mut paths: Vec<(&str, Vec<f32>)> = Vec::new();
                let mut run = |name, path: &dyn Fn(SharedMut<f32>)| {
                    let mut out = vec![f32::NAN; rows * n];
                    path(SharedMut::new(&mut out));
                    paths.push((name, out));
                };
                macro_rules! each_format {
                    ($f:ident) => {
                        match format {
                            GgmlType::Q8_0 => $f::<Q8_0Block>,
                            GgmlType::Q4_0 => $f::<Q4_0Block>,
                            GgmlType::Q4_1 => $f::<Q4_1Block>,
                            GgmlType::Q5_0 => $f::<Q5_0Block>,
                            _ => $f::<Q5_1Block>,
                        }
                    };
                }
                let scalar = each_format!(features_scalar);
                run("scalar", &|out| scalar(&d, &q, &w, 0..n, out));
                #[cfg(target_arch = "x86_64")]
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    let avx2 = each_format!(wide_avx2);
                    // SAFETY: the CPU has AVX2 and FMA (checked), and so F16C.
                    run("avx2", &|out| unsafe { avx2(&d, &q, &w, 0..n, out) });
                    if wide::has_vnni() {
                        let vnni = each_format!(wide_vnni);
                        // SAFETY: the CPU has AVX-512 VNNI and VL (checked).
                        run("vnni", &|out| unsafe { vnni(&d, &q, &w, 0..n, out) });
                    }
                }
                for (name, have) in &paths {
                    for i in 0..rows * n {
                        let h = f64::from(have[i]);
                        assert!(
                            (h - want[i]).abs() <= 1e-6 * magnitude[i] + 1e-9,
                            "{} {name} rows={rows} [{i}]: {h} against {}",
                            format.name(),
                            want[i]
                        );
                        let exact: f64 = (0..k)
                            .map(|j| f64::from(x[(i / n) * k + j]) * dense[(i % n) * k + j])
                            .sum();
                        assert!(
                            (h - exact).abs() <= bound[i],
                            "{} {name} [{i}]: {h} is {} from the exact {exact}, bound {}",
                            format.name(),
                            (h - exact).abs(),
                            bound[i]
                        );
                    }
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    use wide::{features_avx2 as wide_avx2, features_vnni as wide_vnni};

    /// Blocks of zeros quantize to zero with a zero scale; a NaN makes its block's scale NaN.
    #[test]
    fn quantizing_zeros_and_nan() {
        let mut q = QuantizedRows::default();
        let mut x = vec![0f32; 64];
        x[40] = f32::NAN;
        x[41] = 3.0;
        q.quantize(&x);
        assert_eq!(q.scales[0], 0.0);
        assert!(q.values[..32].iter().all(|v| *v == 0));
        assert!(q.scales[1].is_nan());
        let mut x = vec![1.0f32; 32];
        x[3] = -2.54;
        q.quantize(&x);
        assert_eq!(q.values[3], -127);
        assert_eq!(q.values[0], 50); // 1 / (2.54 / 127) = 50
    }
}

//! Few-row products with int8 activations (`ActivationPrecision::Int8`): each row of `x`
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

use super::{BlockDims, GEMM_ROWS, VALUES};
use crate::cpu::kernels::layout::SharedMut;
use crate::cpu::kernels::simd::{Isa, isa, vectorized};
use crate::gguf::{
    Block, Q2KBlock, Q3KBlock, Q4_0Block, Q4_1Block, Q4KBlock, Q5_0Block, Q5_1Block, Q5KBlock,
    Q6KBlock, Q8_0Block, half_f32, q3_k_scale, scale_min,
};

/// How far ahead of the block being multiplied a decode kernel fetches the weight, in
/// bytes: the hardware prefetchers alone keep too few lines in flight to stream a weight at
/// the memory's rate (measured on Zen 4: 256–512 bytes ahead doubles a decode step's
/// products' speed; 2 KiB ahead is slower again).
const AHEAD: usize = 512;

/// Which sums of the activations a format's offsets multiply.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Sums {
    /// None: the values have no offset (`Q8_0`, `Q3_K`, `Q6_K`: signed integers).
    None,
    /// The sum of the 32 activations (`Chunk::offsets[0]`).
    Whole,
    /// The sum of each half of 16 (`Q2_K`'s minimums per group of 16).
    Halves,
}

/// 32 of a block's values as the integer kernels use them: their dot product with 32
/// activation integers is `scale · (halves[0] · dot(first 16) + halves[1] · dot(last 16))`
/// plus the offsets times the activations' sums, all times the activations' scale.
#[derive(Clone, Copy)]
pub(super) struct Chunk {
    /// The float factor of the integer dot product.
    pub scale: f32,
    /// The factors of the activations' sums: of all 32 (`[0]`) or of each half.
    pub offsets: [f32; 2],
    /// The integer scale of each half, where the format has groups of 16.
    pub halves: [i32; 2],
}

/// A block format as the integer kernels read it: 32 integers and their factors at a time
/// (one run of a 32-value block, or one of a K-quant's eight).
pub(super) trait IntBlock: Block {
    /// Whether the integers are signed (the vector kernels multiply their magnitudes).
    const SIGNED: bool;
    /// Whether each half of 16 has its own integer scale (`Chunk::halves`).
    const HALVES: bool;
    /// Which sums of the activations the offsets multiply.
    const SUMS: Sums;
    /// Run `c`'s factors; `half(at)` reads the f16 at byte `at` of `block`.
    fn chunk(block: &[u8], c: usize, half: impl Fn(usize) -> f32) -> Chunk;
    /// Run `c`'s 32 integers.
    fn integers(block: &[u8], c: usize, out: &mut [i32; VALUES]);
    /// Run `c`'s 32 integers as bytes, in value order.
    ///
    /// # Safety
    /// AVX2 must be available; `block` points at `BYTES` readable bytes.
    #[cfg(target_arch = "x86_64")]
    unsafe fn integers_avx2(block: *const u8, c: usize) -> std::arch::x86_64::__m256i;
}

/// How a 32-value format's stored integers become its values, besides the scale.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Offset {
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

/// A format of 32-value blocks: an f16 scale at byte 0 (and the minimum at byte 2), then
/// the values.
trait Classic: Block {
    const OFFSET: Offset;
    /// Where the 32 signed bytes or 16 bytes of nibbles start.
    const VALUES_AT: usize;
    /// Where the 32 fifth bits (one little-endian word) are, in the 5-bit formats.
    const FIFTH_BITS_AT: Option<usize>;
}

impl Classic for Q8_0Block {
    const OFFSET: Offset = Offset::None;
    const VALUES_AT: usize = 2;
    const FIFTH_BITS_AT: Option<usize> = None;
}

impl Classic for Q4_0Block {
    const OFFSET: Offset = Offset::Eight;
    const VALUES_AT: usize = 2;
    const FIFTH_BITS_AT: Option<usize> = None;
}

impl Classic for Q4_1Block {
    const OFFSET: Offset = Offset::Minimum;
    const VALUES_AT: usize = 4;
    const FIFTH_BITS_AT: Option<usize> = None;
}

impl Classic for Q5_0Block {
    const OFFSET: Offset = Offset::Sixteen;
    const VALUES_AT: usize = 6;
    const FIFTH_BITS_AT: Option<usize> = Some(2);
}

impl Classic for Q5_1Block {
    const OFFSET: Offset = Offset::Minimum;
    const VALUES_AT: usize = 8;
    const FIFTH_BITS_AT: Option<usize> = Some(4);
}

impl<F: Classic> IntBlock for F {
    const SIGNED: bool = matches!(F::OFFSET, Offset::None);
    const HALVES: bool = false;
    const SUMS: Sums = if Self::SIGNED {
        Sums::None
    } else {
        Sums::Whole
    };

    #[inline(always)]
    fn chunk(_: &[u8], _: usize, half: impl Fn(usize) -> f32) -> Chunk {
        let scale = half(0);
        let offset = match F::OFFSET {
            Offset::None => 0.0,
            Offset::Eight => -8.0 * scale,
            Offset::Sixteen => -16.0 * scale,
            Offset::Minimum => half(2),
        };
        Chunk {
            scale,
            offsets: [offset, 0.0],
            halves: [1, 1],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], _: usize, ints: &mut [i32; VALUES]) {
        let values = &block[F::VALUES_AT..F::BYTES];
        if F::OFFSET == Offset::None {
            for (i, v) in ints.iter_mut().zip(values) {
                *i = i32::from(*v as i8);
            }
            return;
        }
        let fifth = F::FIFTH_BITS_AT.map_or(0, |at| {
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        });
        for (j, v) in values.iter().enumerate() {
            ints[j] = i32::from(v & 0xF) | (((fifth >> j) & 1) << 4) as i32;
            ints[j + 16] = i32::from(v >> 4) | (((fifth >> (j + 16)) & 1) << 4) as i32;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_avx2(block: *const u8, _: usize) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: `F::BYTES` readable bytes at `block` and AVX2 (the caller's contract).
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
}

/// The vector pieces the K-quants' integers are cut from.
#[cfg(target_arch = "x86_64")]
mod bits {
    use std::arch::x86_64::*;

    /// The 32 bytes at `at`, each shifted right by `shift` and masked with `mask`.
    ///
    /// # Safety
    /// AVX2 must be available; 32 readable bytes at `at`.
    #[inline(always)]
    pub(super) unsafe fn field(at: *const u8, shift: usize, mask: i8) -> __m256i {
        // SAFETY: the caller's contract. A 16-bit shift moves bits across the bytes of a
        // pair, but the mask keeps only bits that came from the byte itself.
        unsafe {
            let v = _mm256_loadu_si256(at.cast());
            let shifted = _mm256_srl_epi16(v, _mm_cvtsi32_si128(shift as i32));
            _mm256_and_si256(shifted, _mm256_set1_epi8(mask))
        }
    }

    /// Per byte of the 32 at `at`: all ones where bit `bit` is set, else zero.
    ///
    /// # Safety
    /// AVX2 must be available; 32 readable bytes at `at`.
    #[inline(always)]
    pub(super) unsafe fn bit_set(at: *const u8, bit: usize) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe {
            let v = _mm256_loadu_si256(at.cast());
            let b = _mm256_set1_epi8((1u8 << bit) as i8);
            _mm256_cmpeq_epi8(_mm256_and_si256(v, b), b)
        }
    }
}

impl IntBlock for Q2KBlock {
    const SIGNED: bool = false;
    const HALVES: bool = true;
    const SUMS: Sums = Sums::Halves;

    #[inline(always)]
    fn chunk(block: &[u8], c: usize, half: impl Fn(usize) -> f32) -> Chunk {
        let (d, dmin) = (half(80), half(82));
        let (a, b) = (block[2 * c], block[2 * c + 1]);
        Chunk {
            scale: d,
            offsets: [-dmin * f32::from(a >> 4), -dmin * f32::from(b >> 4)],
            halves: [i32::from(a & 0xF), i32::from(b & 0xF)],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        let q = &block[16 + (c / 4) * 32..][..32];
        for (i, q) in ints.iter_mut().zip(q) {
            *i = i32::from((q >> (2 * (c % 4))) & 3);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_avx2(block: *const u8, c: usize) -> std::arch::x86_64::__m256i {
        // SAFETY: 84 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe { bits::field(block.add(16 + (c / 4) * 32), 2 * (c % 4), 3) }
    }
}

impl IntBlock for Q3KBlock {
    const SIGNED: bool = true;
    const HALVES: bool = true;
    const SUMS: Sums = Sums::None;

    #[inline(always)]
    fn chunk(block: &[u8], c: usize, half: impl Fn(usize) -> f32) -> Chunk {
        let scales = &block[96..108];
        Chunk {
            scale: half(108),
            offsets: [0.0; 2],
            halves: [q3_k_scale(scales, 2 * c), q3_k_scale(scales, 2 * c + 1)],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        let q = &block[32 + (c / 4) * 32..][..32];
        for (l, i) in ints.iter_mut().enumerate() {
            let low = i32::from((q[l] >> (2 * (c % 4))) & 3);
            *i = if block[l] & (1 << c) != 0 {
                low
            } else {
                low - 4
            };
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_avx2(block: *const u8, c: usize) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: 110 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe {
            let low = bits::field(block.add(32 + (c / 4) * 32), 2 * (c % 4), 3);
            let offset = _mm256_andnot_si256(bits::bit_set(block, c), _mm256_set1_epi8(4));
            _mm256_sub_epi8(low, offset)
        }
    }
}

impl IntBlock for Q4KBlock {
    const SIGNED: bool = false;
    const HALVES: bool = false;
    const SUMS: Sums = Sums::Whole;

    #[inline(always)]
    fn chunk(block: &[u8], c: usize, half: impl Fn(usize) -> f32) -> Chunk {
        let (scale, minimum) = scale_min(c, &block[4..16]);
        Chunk {
            scale: half(0) * scale as f32,
            offsets: [-half(2) * minimum as f32, 0.0],
            halves: [1, 1],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        let q = &block[16 + (c / 2) * 32..][..32];
        for (i, q) in ints.iter_mut().zip(q) {
            *i = i32::from((q >> (4 * (c % 2))) & 0xF);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_avx2(block: *const u8, c: usize) -> std::arch::x86_64::__m256i {
        // SAFETY: 144 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe { bits::field(block.add(16 + (c / 2) * 32), 4 * (c % 2), 0x0F) }
    }
}

impl IntBlock for Q5KBlock {
    const SIGNED: bool = false;
    const HALVES: bool = false;
    const SUMS: Sums = Sums::Whole;

    #[inline(always)]
    fn chunk(block: &[u8], c: usize, half: impl Fn(usize) -> f32) -> Chunk {
        Q4KBlock::chunk(block, c, half)
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        let (qh, q) = (&block[16..48], &block[48 + (c / 2) * 32..][..32]);
        for l in 0..VALUES {
            let high = i32::from((qh[l] >> c) & 1) << 4;
            ints[l] = i32::from((q[l] >> (4 * (c % 2))) & 0xF) | high;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_avx2(block: *const u8, c: usize) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: 176 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe {
            let low = bits::field(block.add(48 + (c / 2) * 32), 4 * (c % 2), 0x0F);
            let high = _mm256_and_si256(bits::bit_set(block.add(16), c), _mm256_set1_epi8(0x10));
            _mm256_or_si256(low, high)
        }
    }
}

impl IntBlock for Q6KBlock {
    const SIGNED: bool = true;
    const HALVES: bool = true;
    const SUMS: Sums = Sums::None;

    #[inline(always)]
    fn chunk(block: &[u8], c: usize, half: impl Fn(usize) -> f32) -> Chunk {
        let at = 192 + (c / 4) * 8 + 2 * (c % 4);
        Chunk {
            scale: half(208),
            offsets: [0.0; 2],
            halves: [i32::from(block[at] as i8), i32::from(block[at + 1] as i8)],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        let (h, p) = (c / 4, c % 4);
        let ql = &block[h * 64 + 32 * (p % 2)..][..32];
        let qh = &block[128 + h * 32..][..32];
        for l in 0..VALUES {
            let q = ((ql[l] >> (4 * (p / 2))) & 0xF) | (((qh[l] >> (2 * p)) & 3) << 4);
            ints[l] = i32::from(q) - 32;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_avx2(block: *const u8, c: usize) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        let (h, p) = (c / 4, c % 4);
        // SAFETY: 210 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe {
            let low = bits::field(block.add(h * 64 + 32 * (p % 2)), 4 * (p / 2), 0x0F);
            let high = bits::field(block.add(128 + h * 32), 2 * p, 3);
            let q = _mm256_or_si256(low, _mm256_slli_epi16::<4>(high));
            _mm256_sub_epi8(q, _mm256_set1_epi8(32))
        }
    }
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
        vectorized(|| {
            for ((((xs, qs), scale), sum), halves) in x
                .chunks_exact(VALUES)
                .zip(self.values.chunks_exact_mut(VALUES))
                .zip(self.scales.iter_mut())
                .zip(self.sums.iter_mut())
                .zip(self.half_sums.iter_mut())
            {
                let (d, totals) = quantize_block(xs.try_into().expect("32 values"), qs);
                *scale = d;
                *sum = d * (totals[0] + totals[1]) as f32;
                *halves = [d * totals[0] as f32, d * totals[1] as f32];
            }
        });
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

/// The factor of the activations' sums a run of 32 adds: its offsets times the sums.
#[inline(always)]
fn offset_term<F: IntBlock>(chunk: &Chunk, q: &QuantizedRows, at: usize) -> f32 {
    match F::SUMS {
        Sums::None => 0.0,
        Sums::Whole => chunk.offsets[0] * q.sums[at],
        Sums::Halves => {
            let [a, b] = q.half_sums[at];
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
    let mut ints = [0i32; VALUES];
    for f in range {
        let mut sums = [0f32; GEMM_ROWS];
        for b in 0..runs {
            let at = f * row_bytes + b / per_block * F::BYTES;
            let block = &w[at..at + F::BYTES];
            let c = b % per_block;
            F::integers(block, c, &mut ints);
            let chunk = F::chunk(block, c, |at| half_f32(block, at));
            for (r, sum) in sums.iter_mut().enumerate().take(d.rows) {
                let at = r * runs + b;
                let xs = &q.values[at * VALUES..][..VALUES];
                let dot = |half: usize| -> i32 {
                    let (ws, xs) = (&ints[half * 16..][..16], &xs[half * 16..][..16]);
                    ws.iter().zip(xs).map(|(a, b)| a * i32::from(*b)).sum()
                };
                let dot = dot(0) * chunk.halves[0] + dot(1) * chunk.halves[1];
                *sum += chunk.scale * q.scales[at] * dot as f32 + offset_term::<F>(&chunk, q, at);
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

    use super::{AHEAD, IntBlock, QuantizedRows, offset_term};
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
        let runs = d.k / VALUES;
        let rows = d.rows.min(GEMM_ROWS);
        assert!(w.len() >= range.end * (d.k / F::VALUES) * F::BYTES);
        assert!(q.values.len() >= rows * d.k && q.scales.len() >= rows * runs);
        assert!(q.sums.len() >= rows * runs && q.half_sums.len() >= rows * runs);
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
            let runs = d.k / VALUES;
            let per_block = F::VALUES / VALUES;
            let row_bytes = d.k / F::VALUES * F::BYTES;
            for f in range {
                // SAFETY: AVX is enabled by the callers.
                let mut sums = [unsafe { _mm256_setzero_ps() }; R];
                let mut offsets = [0f32; R];
                for b in 0..runs {
                    let c = b % per_block;
                    // SAFETY: run b of feature f lies inside `w`, and rows first..first + R's
                    // block b inside `q` (the callers' asserts); a prefetch of any address is
                    // harmless.
                    unsafe {
                        let block = self
                            .w
                            .as_ptr()
                            .add(f * row_bytes + b / per_block * F::BYTES);
                        let ahead = AHEAD + c * F::BYTES / per_block;
                        _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(ahead).cast());
                        let bytes = std::slice::from_raw_parts(block, F::BYTES);
                        let chunk = F::chunk(bytes, c, |at| half(block.add(at)));
                        let ints = F::integers_avx2(block, c);
                        let magnitudes = if F::SIGNED {
                            _mm256_sign_epi8(ints, ints)
                        } else {
                            ints
                        };
                        let [low, high] = chunk.halves;
                        let halves = _mm256_setr_epi32(low, low, low, low, high, high, high, high);
                        for r in 0..R {
                            let at = (self.first + r) * runs + b;
                            let xs = _mm256_loadu_si256(q.values.as_ptr().add(at * VALUES).cast());
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
                            let factor = _mm256_set1_ps(chunk.scale * *q.scales.get_unchecked(at));
                            sums[r] = _mm256_fmadd_ps(products, factor, sums[r]);
                            offsets[r] += offset_term::<F>(&chunk, q, at);
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
    use crate::gguf::{GgmlType, dequantize_f64, random_blocks};

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
            GgmlType::Q2K,
            GgmlType::Q3K,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
        ];
        for format in formats {
            for rows in [1usize, 3, 15] {
                let (n, k) = (37, 3 * format.block_values());
                let w = random_blocks(format, n * k / format.block_values(), || rng.next());
                let mut x: Vec<f32> = (0..rows * k)
                    .map(|_| (rng.next() * 4.0 - 2.0) as f32)
                    .collect();
                x[5] = 0.0; // a block's values of mixed magnitude, one of them zero
                x[..VALUES].iter_mut().skip(8).for_each(|v| *v *= 1e-3);
                let d = BlockDims::new(format, crate::ir::ActivationPrecision::Int8, rows, n, k);
                let mut q = QuantizedRows::default();
                q.quantize(&x);
                let row_bytes = k / format.block_values() * format.block_bytes();
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
                            GgmlType::Q5_1 => $f::<Q5_1Block>,
                            GgmlType::Q2K => $f::<Q2KBlock>,
                            GgmlType::Q3K => $f::<Q3KBlock>,
                            GgmlType::Q4K => $f::<Q4KBlock>,
                            GgmlType::Q5K => $f::<Q5KBlock>,
                            _ => $f::<Q6KBlock>,
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

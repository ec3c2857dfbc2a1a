//! Each block format as the kernels read it: 32 integers at a time (a block of the 32-value
//! formats, an eighth of a K-quant's) and the factors that make them values. One
//! definition per format serves the integer products ([`super::int8`]) and the vectorized
//! dequantization of the exact path; the values it gives are those of [`crate::gguf`]'s
//! definitions, computed in the same order.

use crate::cpu::kernels::block_matmul::VALUES;
use crate::gguf::{
    Block, Q2KBlock, Q3KBlock, Q4_0Block, Q4_1Block, Q4KBlock, Q5_0Block, Q5_1Block, Q5KBlock,
    Q6KBlock, Q8_0Block, q3_k_scale,
};

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
    /// What a block's runs share, read once a block.
    type Head: Copy;
    /// `block`'s head; `half(at)` reads the f16 at byte `at` of `block`.
    fn head(block: &[u8], half: impl Fn(usize) -> f32) -> Self::Head;
    /// Run `c`'s factors.
    fn chunk(head: &Self::Head, block: &[u8], c: usize) -> Chunk;
    /// Run `c`'s 32 integers.
    fn integers(block: &[u8], c: usize, out: &mut [i32; VALUES]);
    /// Run `c`'s 32 integers as bytes, in value order; with `MASKS`, bits spread to bytes
    /// through AVX-512's mask registers (one instruction for what AVX2 takes four).
    ///
    /// # Safety
    /// AVX2 must be available, and AVX-512 BW/VL with `MASKS`; `block` points at `BYTES`
    /// readable bytes.
    #[cfg(target_arch = "x86_64")]
    unsafe fn integers_x86<const MASKS: bool>(
        block: *const u8,
        c: usize,
    ) -> std::arch::x86_64::__m256i;

    /// The factors of eight consecutive blocks from `blocks` (`BYTES` apart) as vectors,
    /// lane `j` block `j`'s `Chunk::scale` and `Chunk::offsets[0]`. Only for formats whose
    /// blocks are one run of 32 (`VALUES` = 32: the kernels take those eight blocks at a
    /// time); this one reads each block's head as [`IntBlock::head`] does, the formats
    /// override it with vector loads.
    ///
    /// # Safety
    /// AVX2 and F16C must be available; `blocks` points at `8 * BYTES` readable bytes.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn factors_of_eight(
        blocks: *const u8,
    ) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        // SAFETY: the caller's contract.
        unsafe { factors_of_eight_scalar::<Self>(blocks) }
    }
}

/// [`IntBlock::factors_of_eight`] from each block's [`IntBlock::head`] and
/// [`IntBlock::chunk`]: the definition the vector forms are tested against.
///
/// # Safety
/// AVX must be available; `blocks` points at `8 * F::BYTES` readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn factors_of_eight_scalar<F: IntBlock + ?Sized>(
    blocks: *const u8,
) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
    use std::arch::x86_64::*;
    let chunks: [Chunk; 8] = std::array::from_fn(|j| {
        // SAFETY: the caller's contract: eight blocks of `BYTES` readable bytes.
        let block = unsafe { std::slice::from_raw_parts(blocks.add(j * F::BYTES), F::BYTES) };
        F::chunk(
            &F::head(block, |at| crate::gguf::half_f32(block, at)),
            block,
            0,
        )
    });
    let scales: [f32; 8] = std::array::from_fn(|j| chunks[j].scale);
    let offsets: [f32; 8] = std::array::from_fn(|j| chunks[j].offsets[0]);
    // SAFETY: AVX (the caller's contract); unaligned loads of local arrays.
    unsafe {
        (
            _mm256_loadu_ps(scales.as_ptr()),
            _mm256_loadu_ps(offsets.as_ptr()),
        )
    }
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
    type Head = Chunk;

    #[inline(always)]
    fn chunk(head: &Chunk, _: &[u8], _: usize) -> Chunk {
        *head
    }

    #[inline(always)]
    fn head(_: &[u8], half: impl Fn(usize) -> f32) -> Chunk {
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
    unsafe fn integers_x86<const MASKS: bool>(
        block: *const u8,
        _: usize,
    ) -> std::arch::x86_64::__m256i {
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
            let word = block.add(at).cast::<u32>().read_unaligned();
            _mm256_or_si256(nibbles, bits::spread::<MASKS>(word, 0x10))
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn factors_of_eight(
        blocks: *const u8,
    ) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
        use std::arch::x86_64::*;
        // SAFETY: AVX2 and F16C, and the eight blocks' first four bytes readable (the
        // caller's contract: every block has at least 18).
        unsafe {
            // Each lane the block's scale (low 16 bits) and minimum (high 16 bits, the
            // next field in the formats without one: never used then). Eight loads, not a
            // gather: AMD's gathers are microcoded (Zen 3: products a tenth slower with one).
            let head = |j: usize| blocks.add(j * F::BYTES).cast::<i32>().read_unaligned();
            let heads = _mm256_setr_epi32(
                head(0),
                head(1),
                head(2),
                head(3),
                head(4),
                head(5),
                head(6),
                head(7),
            );
            // The low (then high) halves of every lane, gathered into the first eight bytes
            // of each 128-bit lane, then the two lanes' eight joined (no closure: it would be
            // compiled without the callers' vector features).
            let low = _mm256_setr_epi8(
                0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13,
                -1, -1, -1, -1, -1, -1, -1, -1,
            );
            let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_shuffle_epi8(heads, low));
            let scales = _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
            let offsets = match F::OFFSET {
                Offset::None => _mm256_setzero_ps(),
                Offset::Eight => _mm256_mul_ps(scales, _mm256_set1_ps(-8.0)),
                Offset::Sixteen => _mm256_mul_ps(scales, _mm256_set1_ps(-16.0)),
                Offset::Minimum => {
                    let minimums = _mm256_srli_epi32::<16>(heads);
                    let packed =
                        _mm256_permute4x64_epi64::<0b1000>(_mm256_shuffle_epi8(minimums, low));
                    _mm256_cvtph_ps(_mm256_castsi256_si128(packed))
                }
            };
            (scales, offsets)
        }
    }
}

/// The first 32 bytes of `bytes`, each shifted right by `shift` and masked with `mask`
/// (the scalar twin of `bits::field`).
#[inline(always)]
fn field(bytes: &[u8], shift: usize, mask: u8) -> [i32; VALUES] {
    let bytes = &bytes[..VALUES];
    std::array::from_fn(|l| i32::from((bytes[l] >> shift) & mask))
}

/// The f16 at `at` as an f32, by F16C.
///
/// # Safety
/// Two readable bytes at `at`; F16C enabled in the caller (every AVX2 CPU has it).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn half_f16c(at: *const u8) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract (a volatile read of two bytes needs no alignment).
    unsafe {
        // The bits go through a general register on purpose: read straight from memory,
        // the compiler inserts them into whatever vector register is at hand (`vpinsrw`
        // keeps its other lanes), often an accumulator, and every block then waits for the
        // previous block's multiply-adds (measured: a third of the exact kernel's time).
        // The volatile read keeps the load apart, and `vmovd` clears the other lanes.
        let bits = i32::from(u16::from_le_bytes(at.cast::<[u8; 2]>().read_volatile()));
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
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

    /// Per byte of the 32 at `at`: `value` where bit `bit` is set (or, unless `set`, clear),
    /// else zero.
    ///
    /// # Safety
    /// AVX2 must be available, and AVX-512 BW/VL with `MASKS`; 32 readable bytes at `at`.
    #[inline(always)]
    pub(super) unsafe fn bit_value<const MASKS: bool>(
        at: *const u8,
        bit: usize,
        set: bool,
        value: i8,
    ) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe {
            let v = _mm256_loadu_si256(at.cast());
            let b = _mm256_set1_epi8((1u8 << bit) as i8);
            if MASKS {
                let mask = _mm256_test_epi8_mask(v, b);
                let mask = if set { mask } else { !mask };
                return _mm256_maskz_mov_epi8(mask, _mm256_set1_epi8(value));
            }
            let is_set = _mm256_cmpeq_epi8(_mm256_and_si256(v, b), b);
            let chosen = if set {
                is_set
            } else {
                _mm256_xor_si256(is_set, _mm256_set1_epi8(-1))
            };
            _mm256_and_si256(chosen, _mm256_set1_epi8(value))
        }
    }

    /// Per byte j of 32: `value` where bit j of `word` is set, else zero.
    ///
    /// # Safety
    /// AVX2 must be available, and AVX-512 BW/VL with `MASKS`.
    #[inline(always)]
    pub(super) unsafe fn spread<const MASKS: bool>(word: u32, value: i8) -> __m256i {
        // SAFETY: the caller's contract.
        unsafe {
            if MASKS {
                return _mm256_maskz_mov_epi8(word, _mm256_set1_epi8(value));
            }
            // Each byte takes the word's byte j / 8, ORs in every bit but j % 8, and is all
            // ones exactly when bit j % 8 was set.
            let bytes = _mm256_shuffle_epi8(
                _mm256_set1_epi32(word as i32),
                _mm256_setr_epi64x(
                    0,
                    0x0101_0101_0101_0101,
                    0x0202_0202_0202_0202,
                    0x0303_0303_0303_0303,
                ),
            );
            let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
            let set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi8(-1));
            _mm256_and_si256(set, _mm256_set1_epi8(value))
        }
    }
}

impl IntBlock for Q2KBlock {
    const SIGNED: bool = false;
    const HALVES: bool = true;
    const SUMS: Sums = Sums::Halves;
    /// `d` and `dmin`.
    type Head = (f32, f32);

    #[inline(always)]
    fn head(_: &[u8], half: impl Fn(usize) -> f32) -> (f32, f32) {
        (half(80), half(82))
    }

    #[inline(always)]
    fn chunk(&(d, dmin): &(f32, f32), block: &[u8], c: usize) -> Chunk {
        let (a, b) = (block[2 * c], block[2 * c + 1]);
        Chunk {
            scale: d,
            offsets: [-dmin * f32::from(a >> 4), -dmin * f32::from(b >> 4)],
            halves: [i32::from(a & 0xF), i32::from(b & 0xF)],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        *ints = field(&block[16 + (c / 4) * 32..], 2 * (c % 4), 3);
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_x86<const MASKS: bool>(
        block: *const u8,
        c: usize,
    ) -> std::arch::x86_64::__m256i {
        // SAFETY: 84 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe { bits::field(block.add(16 + (c / 4) * 32), 2 * (c % 4), 3) }
    }
}

impl IntBlock for Q3KBlock {
    const SIGNED: bool = true;
    const HALVES: bool = true;
    const SUMS: Sums = Sums::None;
    /// `d`.
    type Head = f32;

    #[inline(always)]
    fn head(_: &[u8], half: impl Fn(usize) -> f32) -> f32 {
        half(108)
    }

    #[inline(always)]
    fn chunk(&d: &f32, block: &[u8], c: usize) -> Chunk {
        let scales = &block[96..108];
        Chunk {
            scale: d,
            offsets: [0.0; 2],
            halves: [q3_k_scale(scales, 2 * c), q3_k_scale(scales, 2 * c + 1)],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        *ints = field(&block[32 + (c / 4) * 32..], 2 * (c % 4), 3);
        for (i, high) in ints.iter_mut().zip(field(block, c, 1)) {
            *i -= 4 * (1 - high);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_x86<const MASKS: bool>(
        block: *const u8,
        c: usize,
    ) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: 110 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe {
            let low = bits::field(block.add(32 + (c / 4) * 32), 2 * (c % 4), 3);
            _mm256_sub_epi8(low, bits::bit_value::<MASKS>(block, c, false, 4))
        }
    }
}

/// The eight groups' factors of a Q4_K or Q5_K block: `d · scale` and `dmin · minimum`
/// (as [`crate::gguf`] computes them), the 6-bit scales and minimums unpacked from their
/// 12 bytes four at a time.
#[derive(Clone, Copy)]
pub(super) struct GroupScales {
    scales: [f32; 8],
    minimums: [f32; 8],
}

impl GroupScales {
    #[inline(always)]
    fn of(block: &[u8], half: impl Fn(usize) -> f32) -> GroupScales {
        let word = |at: usize| {
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        };
        let (first, second, third) = (word(4), word(8), word(12));
        // Groups 0..4: the low 6 bits of bytes 4..8 (scales) and 8..12 (minimums). Groups
        // 4..8: a nibble of bytes 12..16 below the top 2 bits of those bytes.
        let (low6, nibbles, top2) = (0x3F3F_3F3F, 0x0F0F_0F0F, 0x0303_0303);
        let scales = [
            first & low6,
            (third & nibbles) | (((first >> 6) & top2) << 4),
        ];
        let minimums = [
            second & low6,
            ((third >> 4) & nibbles) | (((second >> 6) & top2) << 4),
        ];
        let widen = |words: [u32; 2], factor: f32| -> [f32; 8] {
            let bytes = [words[0].to_le_bytes(), words[1].to_le_bytes()];
            std::array::from_fn(|j| factor * f32::from(bytes[j / 4][j % 4]))
        };
        GroupScales {
            scales: widen(scales, half(0)),
            minimums: widen(minimums, half(2)),
        }
    }
}

impl IntBlock for Q4KBlock {
    const SIGNED: bool = false;
    const HALVES: bool = false;
    const SUMS: Sums = Sums::Whole;
    type Head = GroupScales;

    #[inline(always)]
    fn head(block: &[u8], half: impl Fn(usize) -> f32) -> GroupScales {
        GroupScales::of(block, half)
    }

    #[inline(always)]
    fn chunk(head: &GroupScales, _: &[u8], c: usize) -> Chunk {
        Chunk {
            scale: head.scales[c],
            offsets: [-head.minimums[c], 0.0],
            halves: [1, 1],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        *ints = field(&block[16 + (c / 2) * 32..], 4 * (c % 2), 0x0F);
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_x86<const MASKS: bool>(
        block: *const u8,
        c: usize,
    ) -> std::arch::x86_64::__m256i {
        // SAFETY: 144 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe { bits::field(block.add(16 + (c / 2) * 32), 4 * (c % 2), 0x0F) }
    }
}

impl IntBlock for Q5KBlock {
    const SIGNED: bool = false;
    const HALVES: bool = false;
    const SUMS: Sums = Sums::Whole;
    type Head = GroupScales;

    #[inline(always)]
    fn head(block: &[u8], half: impl Fn(usize) -> f32) -> GroupScales {
        GroupScales::of(block, half)
    }

    #[inline(always)]
    fn chunk(head: &GroupScales, block: &[u8], c: usize) -> Chunk {
        Q4KBlock::chunk(head, block, c)
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        *ints = field(&block[48 + (c / 2) * 32..], 4 * (c % 2), 0x0F);
        for (i, high) in ints.iter_mut().zip(field(&block[16..], c, 1)) {
            *i |= high << 4;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_x86<const MASKS: bool>(
        block: *const u8,
        c: usize,
    ) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: 176 readable bytes at `block` and AVX2 (the caller's contract).
        unsafe {
            let low = bits::field(block.add(48 + (c / 2) * 32), 4 * (c % 2), 0x0F);
            _mm256_or_si256(low, bits::bit_value::<MASKS>(block.add(16), c, true, 0x10))
        }
    }
}

impl IntBlock for Q6KBlock {
    const SIGNED: bool = true;
    const HALVES: bool = true;
    const SUMS: Sums = Sums::None;
    /// `d`.
    type Head = f32;

    #[inline(always)]
    fn head(_: &[u8], half: impl Fn(usize) -> f32) -> f32 {
        half(208)
    }

    #[inline(always)]
    fn chunk(&d: &f32, block: &[u8], c: usize) -> Chunk {
        let at = 192 + (c / 4) * 8 + 2 * (c % 4);
        Chunk {
            scale: d,
            offsets: [0.0; 2],
            halves: [i32::from(block[at] as i8), i32::from(block[at + 1] as i8)],
        }
    }

    #[inline(always)]
    fn integers(block: &[u8], c: usize, ints: &mut [i32; VALUES]) {
        let (h, p) = (c / 4, c % 4);
        *ints = field(&block[h * 64 + 32 * (p % 2)..], 4 * (p / 2), 0x0F);
        for (i, high) in ints.iter_mut().zip(field(&block[128 + h * 32..], 2 * p, 3)) {
            *i = (*i | high << 4) - 32;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn integers_x86<const MASKS: bool>(
        block: *const u8,
        c: usize,
    ) -> std::arch::x86_64::__m256i {
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

//! GGML's tensor types: their block layouts and their exact dequantization.
//!
//! A GGUF tensor is a run of blocks, each holding a fixed number of values (32 for the
//! classic formats, 256 for the K-quants) in a fixed number of bytes. Dequantizing is
//! defined once here, generic over the float it computes in: in `f32` it gives the values
//! llama.cpp and the `gguf` Python package give, bit for bit (`tests/gguf.rs` holds their
//! values), in the same order of operations; in `f64` it is the exact reference the `f32`
//! path is measured against.

use half::{bf16, f16};

use crate::cpu::kernels::numeric::Real;

/// A GGML tensor type, by the id GGUF files store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GgmlType {
    /// `F32` (type id 0).
    F32,
    /// `F16` (type id 1).
    F16,
    /// `BF16` (type id 30).
    BF16,
    /// `F64` (type id 28).
    F64,
    /// `I8` (type id 24).
    I8,
    /// `I16` (type id 25).
    I16,
    /// `I32` (type id 26).
    I32,
    /// `I64` (type id 27).
    I64,
    /// `Q4_0` (type id 2).
    Q4_0,
    /// `Q4_1` (type id 3).
    Q4_1,
    /// `Q5_0` (type id 6).
    Q5_0,
    /// `Q5_1` (type id 7).
    Q5_1,
    /// `Q8_0` (type id 8).
    Q8_0,
    /// `Q8_1` (type id 9).
    Q8_1,
    /// `Q2_K` (type id 10).
    Q2K,
    /// `Q3_K` (type id 11).
    Q3K,
    /// `Q4_K` (type id 12).
    Q4K,
    /// `Q5_K` (type id 13).
    Q5K,
    /// `Q6_K` (type id 14).
    Q6K,
    /// `Q8_K` (type id 15).
    Q8K,
    /// `IQ2_XXS` (type id 16).
    Iq2Xxs,
    /// `IQ2_XS` (type id 17).
    Iq2Xs,
    /// `IQ3_XXS` (type id 18).
    Iq3Xxs,
    /// `IQ1_S` (type id 19).
    Iq1S,
    /// `IQ4_NL` (type id 20).
    Iq4Nl,
    /// `IQ3_S` (type id 21).
    Iq3S,
    /// `IQ2_S` (type id 22).
    Iq2S,
    /// `IQ4_XS` (type id 23).
    Iq4Xs,
    /// `IQ1_M` (type id 29).
    Iq1M,
    /// `TQ1_0` (type id 34).
    Tq1_0,
    /// `TQ2_0` (type id 35).
    Tq2_0,
    /// `MXFP4` (type id 39).
    Mxfp4,
}

/// `(type, id, values per block, bytes per block, name)` for every type this module knows.
const TYPES: [(GgmlType, u32, usize, usize, &str); 32] = [
    (GgmlType::F32, 0, 1, 4, "F32"),
    (GgmlType::F16, 1, 1, 2, "F16"),
    (GgmlType::Q4_0, 2, 32, 18, "Q4_0"),
    (GgmlType::Q4_1, 3, 32, 20, "Q4_1"),
    (GgmlType::Q5_0, 6, 32, 22, "Q5_0"),
    (GgmlType::Q5_1, 7, 32, 24, "Q5_1"),
    (GgmlType::Q8_0, 8, 32, 34, "Q8_0"),
    (GgmlType::Q8_1, 9, 32, 40, "Q8_1"),
    (GgmlType::Q2K, 10, 256, 84, "Q2_K"),
    (GgmlType::Q3K, 11, 256, 110, "Q3_K"),
    (GgmlType::Q4K, 12, 256, 144, "Q4_K"),
    (GgmlType::Q5K, 13, 256, 176, "Q5_K"),
    (GgmlType::Q6K, 14, 256, 210, "Q6_K"),
    (GgmlType::Q8K, 15, 256, 292, "Q8_K"),
    (GgmlType::Iq2Xxs, 16, 256, 66, "IQ2_XXS"),
    (GgmlType::Iq2Xs, 17, 256, 74, "IQ2_XS"),
    (GgmlType::Iq3Xxs, 18, 256, 98, "IQ3_XXS"),
    (GgmlType::Iq1S, 19, 256, 50, "IQ1_S"),
    (GgmlType::Iq4Nl, 20, 32, 18, "IQ4_NL"),
    (GgmlType::Iq3S, 21, 256, 110, "IQ3_S"),
    (GgmlType::Iq2S, 22, 256, 82, "IQ2_S"),
    (GgmlType::Iq4Xs, 23, 256, 136, "IQ4_XS"),
    (GgmlType::I8, 24, 1, 1, "I8"),
    (GgmlType::I16, 25, 1, 2, "I16"),
    (GgmlType::I32, 26, 1, 4, "I32"),
    (GgmlType::I64, 27, 1, 8, "I64"),
    (GgmlType::F64, 28, 1, 8, "F64"),
    (GgmlType::Iq1M, 29, 256, 56, "IQ1_M"),
    (GgmlType::BF16, 30, 1, 2, "BF16"),
    (GgmlType::Tq1_0, 34, 256, 54, "TQ1_0"),
    (GgmlType::Tq2_0, 35, 256, 66, "TQ2_0"),
    (GgmlType::Mxfp4, 39, 32, 17, "MXFP4"),
];

impl GgmlType {
    /// The type a GGUF file's type id names, if it is one this module knows.
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// assert_eq!(GgmlType::from_id(3), Some(GgmlType::Q4_1));
    /// assert_eq!(GgmlType::from_id(1000), None);
    /// ```
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TYPES.iter().find(|t| t.1 == id).map(|t| t.0)
    }

    /// The type GGML names `name` (`Q4_K`, `F16`), if this module knows it.
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// assert_eq!(GgmlType::from_name("Q8_0"), Some(GgmlType::Q8_0));
    /// assert_eq!(GgmlType::from_name("Q9"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TYPES.iter().find(|t| t.4 == name).map(|t| t.0)
    }

    fn entry(self) -> &'static (GgmlType, u32, usize, usize, &'static str) {
        TYPES
            .iter()
            .find(|t| t.0 == self)
            .expect("every type has an entry")
    }

    /// The id GGUF files store for it.
    pub fn id(self) -> u32 {
        self.entry().1
    }

    /// Values per block.
    pub fn block_values(self) -> usize {
        self.entry().2
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.entry().3
    }

    /// GGML's name for it (`Q4_K`).
    pub fn name(self) -> &'static str {
        self.entry().4
    }

    /// Whether [`dequantize`] reads it: the float and integer-free types the text-generation
    /// models use (F32, F16, BF16, F64, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K).
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// assert!(GgmlType::Q6K.dequantizes());
    /// assert!(!GgmlType::Iq2Xxs.dequantizes());
    /// ```
    pub fn dequantizes(self) -> bool {
        use GgmlType as G;
        matches!(
            self,
            G::F32
                | G::F16
                | G::BF16
                | G::F64
                | G::Q4_0
                | G::Q4_1
                | G::Q5_0
                | G::Q5_1
                | G::Q8_0
                | G::Q2K
                | G::Q3K
                | G::Q4K
                | G::Q5K
                | G::Q6K
        )
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes could not be dequantized.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DequantizeError {
    /// The type has no dequantization here.
    #[error("dequantizing {0} is not supported")]
    Unsupported(GgmlType),
    /// The bytes are not whole blocks, or not as many values as the output holds.
    #[error("{bytes} bytes of {kind} do not hold {values} values")]
    Length {
        /// The type.
        kind: GgmlType,
        /// Bytes given.
        bytes: usize,
        /// Values asked for.
        values: usize,
    },
}

/// The values of `bytes` (whole blocks of `kind`) in `out`, one per value, computed in `f32`
/// as llama.cpp computes them.
///
/// ```
/// use rlx::gguf::{GgmlType, dequantize};
/// // A Q8_0 block: the scale 0.5 as f16, then 32 signed bytes.
/// let mut block = half::f16::from_f32(0.5).to_le_bytes().to_vec();
/// block.extend((0..32).map(|i| (i as i8 - 16) as u8));
/// let mut out = [0f32; 32];
/// dequantize(GgmlType::Q8_0, &block, &mut out)?;
/// assert_eq!(out[0], -8.0);
/// assert_eq!(out[31], 7.5);
/// # Ok::<(), rlx::gguf::DequantizeError>(())
/// ```
pub fn dequantize(kind: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), DequantizeError> {
    dequantize_as(kind, bytes, out)
}

/// [`dequantize`] in `f64`: the exact values of the blocks (every product of an f16 scale
/// and a small integer is exact in `f64`), the reference the `f32` values are measured
/// against.
///
/// ```
/// use rlx::gguf::{GgmlType, dequantize_f64};
/// let mut block = half::f16::from_f32(0.25).to_le_bytes().to_vec();
/// block.extend([0x1F; 16]); // nibbles 15 (first 16 values) and 1 (last 16)
/// let mut out = [0f64; 32];
/// dequantize_f64(GgmlType::Q4_0, &block, &mut out)?;
/// assert_eq!((out[0], out[16]), (1.75, -1.75));
/// # Ok::<(), rlx::gguf::DequantizeError>(())
/// ```
pub fn dequantize_f64(
    kind: GgmlType,
    bytes: &[u8],
    out: &mut [f64],
) -> Result<(), DequantizeError> {
    dequantize_as(kind, bytes, out)
}

fn dequantize_as<R: Real>(
    kind: GgmlType,
    bytes: &[u8],
    out: &mut [R],
) -> Result<(), DequantizeError> {
    if !kind.dequantizes() {
        return Err(DequantizeError::Unsupported(kind));
    }
    let (n, size) = (kind.block_values(), kind.block_bytes());
    if !bytes.len().is_multiple_of(size) || bytes.len() / size * n != out.len() {
        return Err(DequantizeError::Length {
            kind,
            bytes: bytes.len(),
            values: out.len(),
        });
    }
    let blocks = bytes.chunks_exact(size).zip(out.chunks_exact_mut(n));
    let decode: fn(&[u8], &mut [R]) = match kind {
        GgmlType::F32 => |b, y| y[0] = R::from_f64(f64::from(f32::from_le_bytes(word(b, 0)))),
        GgmlType::F16 => |b, y| y[0] = half(b, 0),
        GgmlType::BF16 => {
            |b, y| y[0] = R::from_f64(f64::from(bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))))
        }
        GgmlType::F64 => {
            |b, y| y[0] = R::from_f64(f64::from_le_bytes(b[..8].try_into().expect("8 bytes")))
        }
        GgmlType::Q4_0 => q4_0,
        GgmlType::Q4_1 => q4_1,
        GgmlType::Q5_0 => q5_0,
        GgmlType::Q5_1 => q5_1,
        GgmlType::Q8_0 => q8_0,
        GgmlType::Q2K => q2_k,
        GgmlType::Q3K => q3_k,
        GgmlType::Q4K => q4_k,
        GgmlType::Q5K => q5_k,
        GgmlType::Q6K => q6_k,
        _ => unreachable!("`dequantizes` admits only the types above"),
    };
    for (block, values) in blocks {
        decode(block, values);
    }
    Ok(())
}

fn word(b: &[u8], at: usize) -> [u8; 4] {
    [b[at], b[at + 1], b[at + 2], b[at + 3]]
}

/// A block format that kernels dequantize 32 values at a time into `f32` (the values
/// [`dequantize`] gives, computed alike).
pub(crate) trait Block {
    /// Bytes of one block.
    const BYTES: usize;
    /// Values of one block: 32, or 256 for the K-quants.
    const VALUES: usize = 32;
    /// Values `32 · chunk..32 · chunk + 32` of `block`.
    fn values(block: &[u8], chunk: usize, out: &mut [f32; 32]);
}

/// The f16 at `b[at..at + 2]` as f32.
#[inline(always)]
pub(crate) fn half_f32(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// [`GgmlType::Q8_0`] for kernels.
pub(crate) struct Q8_0Block;

impl Block for Q8_0Block {
    const BYTES: usize = 34;
    #[inline(always)]
    fn values(b: &[u8], _: usize, out: &mut [f32; 32]) {
        let d = half_f32(b, 0);
        let q: &[u8; 32] = b[2..34].try_into().expect("a Q8_0 block has 34 bytes");
        for j in 0..32 {
            out[j] = f32::from(q[j] as i8) * d;
        }
    }
}

/// [`GgmlType::Q4_0`] for kernels.
pub(crate) struct Q4_0Block;

impl Block for Q4_0Block {
    const BYTES: usize = 18;
    #[inline(always)]
    fn values(b: &[u8], _: usize, out: &mut [f32; 32]) {
        let d = half_f32(b, 0);
        let q: &[u8; 16] = b[2..18].try_into().expect("a Q4_0 block has 18 bytes");
        for j in 0..16 {
            out[j] = f32::from(i16::from(q[j] & 0xF) - 8) * d;
        }
        for j in 0..16 {
            out[j + 16] = f32::from(i16::from(q[j] >> 4) - 8) * d;
        }
    }
}

/// [`GgmlType::Q4_1`] for kernels.
pub(crate) struct Q4_1Block;

impl Block for Q4_1Block {
    const BYTES: usize = 20;
    #[inline(always)]
    fn values(b: &[u8], _: usize, out: &mut [f32; 32]) {
        let (d, m) = (half_f32(b, 0), half_f32(b, 2));
        let q: &[u8; 16] = b[4..20].try_into().expect("a Q4_1 block has 20 bytes");
        for j in 0..16 {
            out[j] = f32::from(q[j] & 0xF) * d + m;
        }
        for j in 0..16 {
            out[j + 16] = f32::from(q[j] >> 4) * d + m;
        }
    }
}

/// [`GgmlType::Q5_0`] for kernels.
pub(crate) struct Q5_0Block;

impl Block for Q5_0Block {
    const BYTES: usize = 22;
    #[inline(always)]
    fn values(b: &[u8], _: usize, out: &mut [f32; 32]) {
        let d = half_f32(b, 0);
        let q = five_bits(u32::from_le_bytes(word(b, 2)), &b[6..22]);
        for (out, q) in out.iter_mut().zip(q) {
            // `q - 16` is a small integer, so the product rounds as the f64 reference's.
            *out = (q - 16) as f32 * d;
        }
    }
}

/// [`GgmlType::Q5_1`] for kernels.
pub(crate) struct Q5_1Block;

impl Block for Q5_1Block {
    const BYTES: usize = 24;
    #[inline(always)]
    fn values(b: &[u8], _: usize, out: &mut [f32; 32]) {
        let (d, m) = (half_f32(b, 0), half_f32(b, 2));
        let q = five_bits(u32::from_le_bytes(word(b, 4)), &b[8..24]);
        for (out, q) in out.iter_mut().zip(q) {
            *out = q as f32 * d + m;
        }
    }
}

fn half<R: Real>(b: &[u8], at: usize) -> R {
    R::from_f64(f64::from(f16::from_bits(u16::from_le_bytes([
        b[at],
        b[at + 1],
    ]))))
}

/// A small integer, exactly.
fn int<R: Real>(v: i32) -> R {
    R::from_f64(f64::from(v))
}

/// 32 values: an f16 scale `d`, then 16 bytes of 4-bit values (low nibbles the first 16);
/// `d · (q − 8)`.
fn q4_0<R: Real>(b: &[u8], y: &mut [R]) {
    let d: R = half(b, 0);
    for (j, q) in b[2..18].iter().enumerate() {
        y[j] = int::<R>(i32::from(q & 0xF) - 8) * d;
        y[j + 16] = int::<R>(i32::from(q >> 4) - 8) * d;
    }
}

/// 32 values: f16 scale `d` and minimum `m`, 16 bytes of nibbles; `d · q + m`.
fn q4_1<R: Real>(b: &[u8], y: &mut [R]) {
    let (d, m): (R, R) = (half(b, 0), half(b, 2));
    for (j, q) in b[4..20].iter().enumerate() {
        y[j] = int::<R>(i32::from(q & 0xF)) * d + m;
        y[j + 16] = int::<R>(i32::from(q >> 4)) * d + m;
    }
}

/// The 5-bit values of a Q5 block: nibbles from `qs`, fifth bits from the 32-bit `qh`
/// (bit j for value j).
fn five_bits(qh: u32, qs: &[u8]) -> [i32; 32] {
    let mut q = [0; 32];
    for (j, byte) in qs.iter().enumerate() {
        let high_low = ((qh >> j) << 4) & 0x10;
        let high_high = (qh >> (j + 12)) & 0x10;
        q[j] = (u32::from(byte & 0xF) | high_low) as i32;
        q[j + 16] = (u32::from(byte >> 4) | high_high) as i32;
    }
    q
}

/// 32 values: f16 scale `d`, 4 bytes of fifth bits, 16 bytes of nibbles; `d · (q − 16)`.
fn q5_0<R: Real>(b: &[u8], y: &mut [R]) {
    let d: R = half(b, 0);
    let q = five_bits(u32::from_le_bytes(word(b, 2)), &b[6..22]);
    for (y, q) in y.iter_mut().zip(q) {
        *y = int::<R>(q - 16) * d;
    }
}

/// 32 values: f16 `d` and `m`, fifth bits, nibbles; `d · q + m`.
fn q5_1<R: Real>(b: &[u8], y: &mut [R]) {
    let (d, m): (R, R) = (half(b, 0), half(b, 2));
    let q = five_bits(u32::from_le_bytes(word(b, 4)), &b[8..24]);
    for (y, q) in y.iter_mut().zip(q) {
        *y = int::<R>(q) * d + m;
    }
}

/// 32 values: f16 scale `d`, 32 signed bytes; `d · q`.
fn q8_0<R: Real>(b: &[u8], y: &mut [R]) {
    let d: R = half(b, 0);
    for (y, q) in y.iter_mut().zip(&b[2..34]) {
        *y = int::<R>(i32::from(*q as i8)) * d;
    }
}

/// A K-quant's 256 values, chunk by chunk of 32 (`chunk(b, c, y)` writes values
/// `32c..32c + 32` into `y`).
fn by_chunks<R: Real>(b: &[u8], y: &mut [R], chunk: fn(&[u8], usize, &mut [R])) {
    for (c, y) in y.chunks_exact_mut(32).enumerate() {
        chunk(b, c, y);
    }
}

/// 256 values in 16 groups of 16: 16 bytes of 4-bit scale (low) and minimum (high) per
/// group, 64 bytes of 2-bit values, f16 `d` and `dmin`;
/// `(d · scale) · q − (dmin · min)`. Chunk `c` (values `32c..`) takes bits `2 (c mod 4)`
/// of bytes `32 (c / 4)..+32`, groups `2c` and `2c + 1`.
fn q2_k<R: Real>(b: &[u8], y: &mut [R]) {
    by_chunks(b, y, q2_k_chunk);
}

fn q2_k_chunk<R: Real>(b: &[u8], c: usize, y: &mut [R]) {
    let (d, dmin): (R, R) = (half(b, 80), half(b, 82));
    let q = &b[16 + (c / 4) * 32..][..32];
    let shift = 2 * (c % 4);
    for part in 0..2 {
        let sc = b[2 * c + part];
        let dl = d * int(i32::from(sc & 0xF));
        let ml = dmin * int(i32::from(sc >> 4));
        for l in 0..16 {
            let v = i32::from((q[part * 16 + l] >> shift) & 3);
            y[part * 16 + l] = dl * int(v) - ml;
        }
    }
}

/// The 16 6-bit scales of a Q3_K block, packed in 12 bytes: the low 4 bits of each in the
/// first 8 bytes (two per byte), the high 2 bits in the last 4.
pub(crate) fn q3_k_scale(packed: &[u8], j: usize) -> i32 {
    let low = if j < 8 {
        packed[j] & 0xF
    } else {
        packed[j - 8] >> 4
    };
    let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

/// 256 values in 16 groups of 16: 32 bytes of high bits (bit set: no offset), 64 bytes of
/// 2-bit values, 12 bytes of 6-bit scales, f16 `d`; `(d · scale) · (q − 4·!high)`. Chunk
/// `c` takes bits `2 (c mod 4)` of bytes `32 (c / 4)..+32` and high bit `c` of each of the
/// 32 bytes, groups `2c` and `2c + 1`.
fn q3_k<R: Real>(b: &[u8], y: &mut [R]) {
    by_chunks(b, y, q3_k_chunk);
}

fn q3_k_chunk<R: Real>(b: &[u8], c: usize, y: &mut [R]) {
    let (hmask, q) = (&b[0..32], &b[32 + (c / 4) * 32..][..32]);
    let d: R = half(b, 108);
    let shift = 2 * (c % 4);
    for part in 0..2 {
        let dl = d * int(q3_k_scale(&b[96..108], 2 * c + part));
        for l in 0..16 {
            let i = part * 16 + l;
            let low = i32::from((q[i] >> shift) & 3);
            let offset = if hmask[i] & (1 << c) != 0 { 0 } else { 4 };
            y[i] = dl * int(low - offset);
        }
    }
}

/// Scale and minimum `j` (of 8) of a Q4_K/Q5_K block, 6 bits each in 12 bytes.
fn scale_min(j: usize, q: &[u8]) -> (i32, i32) {
    let (d, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    };
    (i32::from(d), i32::from(m))
}

/// 256 values in 8 groups of 32: f16 `d`, `dmin`, 12 bytes of 6-bit scales and minimums,
/// 128 bytes of nibbles; `(d · scale) · q − (dmin · min)`. Group `c` is the low (even `c`)
/// or high nibbles of bytes `32 (c / 2)..+32`.
fn q4_k<R: Real>(b: &[u8], y: &mut [R]) {
    by_chunks(b, y, q4_k_chunk);
}

fn q4_k_chunk<R: Real>(b: &[u8], c: usize, y: &mut [R]) {
    let (d, dmin): (R, R) = (half(b, 0), half(b, 2));
    let q = &b[16 + (c / 2) * 32..][..32];
    let (sc, mn) = scale_min(c, &b[4..16]);
    let (dl, ml) = (d * int(sc), dmin * int(mn));
    let shift = 4 * (c % 2);
    for l in 0..32 {
        y[l] = dl * int(i32::from((q[l] >> shift) & 0xF)) - ml;
    }
}

/// 256 values in 8 groups of 32: as Q4_K with a fifth bit per value from 32 bytes of high
/// bits (bit `c` of byte `l` for value `l` of group `c`).
fn q5_k<R: Real>(b: &[u8], y: &mut [R]) {
    by_chunks(b, y, q5_k_chunk);
}

fn q5_k_chunk<R: Real>(b: &[u8], c: usize, y: &mut [R]) {
    let (d, dmin): (R, R) = (half(b, 0), half(b, 2));
    let (qh, q) = (&b[16..48], &b[48 + (c / 2) * 32..][..32]);
    let (sc, mn) = scale_min(c, &b[4..16]);
    let (dl, ml) = (d * int(sc), dmin * int(mn));
    let shift = 4 * (c % 2);
    for l in 0..32 {
        let high = if qh[l] & (1 << c) != 0 { 16 } else { 0 };
        let v = i32::from((q[l] >> shift) & 0xF) + high;
        y[l] = dl * int(v) - ml;
    }
}

/// 256 values in 16 groups of 16: 128 bytes of low nibbles, 64 bytes of 2-bit high parts,
/// 16 signed 8-bit scales, f16 `d`; `(d · scale) · (q − 32)`. Chunk `c` (half `h = c / 4`,
/// part `p = c mod 4`) takes the low (`p` < 2) or high nibbles of bytes
/// `64h + 32 (p mod 2)..+32`, bits `2p` of bytes `128 + 32h..+32`, scales `8h + 2p` and
/// `8h + 2p + 1`.
fn q6_k<R: Real>(b: &[u8], y: &mut [R]) {
    by_chunks(b, y, q6_k_chunk);
}

fn q6_k_chunk<R: Real>(b: &[u8], c: usize, y: &mut [R]) {
    let d: R = half(b, 208);
    let (h, p) = (c / 4, c % 4);
    let ql = &b[h * 64 + 32 * (p % 2)..][..32];
    let qh = &b[128 + h * 32..][..32];
    let (low_shift, high_shift) = (4 * (p / 2), 2 * p);
    for l in 0..32 {
        let q = ((ql[l] >> low_shift) & 0xF) | (((qh[l] >> high_shift) & 3) << 4);
        let scale = int::<R>(i32::from(b[192 + h * 8 + 2 * p + l / 16] as i8));
        y[l] = d * scale * int(i32::from(q) - 32);
    }
}

/// The kernels' view of the K-quants: chunk by chunk, through the definitions above.
macro_rules! k_quant_blocks {
    ($($(#[$doc:meta])* $name:ident, $bytes:expr, $chunk:ident;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;

        impl Block for $name {
            const BYTES: usize = $bytes;
            const VALUES: usize = 256;
            #[inline(always)]
            fn values(block: &[u8], chunk: usize, out: &mut [f32; 32]) {
                $chunk::<f32>(block, chunk, out);
            }
        }
    )*};
}

k_quant_blocks! {
    /// [`GgmlType::Q2K`] for kernels.
    Q2KBlock, 84, q2_k_chunk;
    /// [`GgmlType::Q3K`] for kernels.
    Q3KBlock, 110, q3_k_chunk;
    /// [`GgmlType::Q4K`] for kernels.
    Q4KBlock, 144, q4_k_chunk;
    /// [`GgmlType::Q5K`] for kernels.
    Q5KBlock, 176, q5_k_chunk;
    /// [`GgmlType::Q6K`] for kernels.
    Q6KBlock, 210, q6_k_chunk;
}

/// `count` blocks of `format` with random values and modest scales: every byte from
/// `next` (uniform in `[0, 1)`), then the f16 scale (and minimum, of the sign that gives
/// values of both signs) set so that a value's magnitude stays below about 0.3. For
/// generated tests and benchmarks of the block ops.
///
/// ```
/// use rlx::gguf::{GgmlType, dequantize, random_blocks};
///
/// let mut state = 1u32;
/// let bytes = random_blocks(GgmlType::Q4_0, 3, || {
///     state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
///     f64::from(state >> 8) / f64::from(1u32 << 24)
/// });
/// assert_eq!(bytes.len(), 3 * GgmlType::Q4_0.block_bytes());
/// let mut values = [0f32; 3 * 32];
/// dequantize(GgmlType::Q4_0, &bytes, &mut values).unwrap();
/// assert!(values.iter().all(|v| v.abs() < 0.5));
/// ```
pub fn random_blocks(format: GgmlType, count: usize, mut next: impl FnMut() -> f64) -> Vec<u8> {
    use GgmlType as G;
    // Where the f16 scale and minimum lie, the largest sub-scale they are multiplied by,
    // and the minimum's sign (subtracted in the K-quants, added in Q4_1 and Q5_1).
    let (scale_at, minimum_at, sub_scale, sign) = match format {
        G::Q4_1 | G::Q5_1 => (0, Some(2), 1.0, -1.0),
        G::Q2K => (80, Some(82), 15.0, 1.0),
        G::Q3K => (108, None, 32.0, 1.0),
        G::Q4K | G::Q5K => (0, Some(2), 63.0, 1.0),
        G::Q6K => (208, None, 128.0, 1.0),
        _ => (0, None, 1.0, 1.0),
    };
    let half = |v: f64| f16::from_f64(v).to_le_bytes();
    let size = format.block_bytes();
    let mut out = Vec::with_capacity(count * size);
    for _ in 0..count {
        let at = out.len();
        out.extend((0..size).map(|_| (next() * 256.0) as u8));
        out[at + scale_at..][..2].copy_from_slice(&half((0.002 + 0.05 * next()) / sub_scale));
        if let Some(m) = minimum_at {
            out[at + m..][..2].copy_from_slice(&half(sign * 0.2 * next() / sub_scale));
        }
    }
    out
}

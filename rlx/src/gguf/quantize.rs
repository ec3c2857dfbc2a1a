//! Float values into GGML's classic block formats (`Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`,
//! `Q5_1`): how a float checkpoint (safetensors, or float tensors of a GGUF file) is kept in
//! blocks at load.
//!
//! Each block takes its scale (and minimum) as llama.cpp's reference quantizer chooses
//! them — symmetric formats scale the value of largest magnitude onto the end of the
//! integer range, asymmetric ones map `[min, max]` onto it — stored as f16; then every
//! value takes the integer whose dequantized value is nearest to it *under the stored
//! scale*. llama.cpp rounds with the scale before it becomes f16, so a value here may differ
//! from its by one step where that rounding moved it; the values here are never farther
//! from the input.

use half::f16;

use super::GgmlType;

/// Why values could not be put in blocks.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum QuantizeError {
    /// The format has no quantizer here.
    #[error("quantizing to {0} is not supported (Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 are)")]
    Unsupported(GgmlType),
    /// The values do not fill whole blocks.
    #[error("{values} values are not whole blocks of {kind} ({block} values each)")]
    Length {
        /// The format.
        kind: GgmlType,
        /// Values given.
        values: usize,
        /// Values a block holds.
        block: usize,
    },
    /// A value is NaN or infinite, or a block's scale does not fit an f16.
    #[error(
        "value {index} ({value}) cannot be kept in {kind}: its block's scale would not be a finite f16"
    )]
    NotRepresentable {
        /// The format.
        kind: GgmlType,
        /// Index of the offending value.
        index: usize,
        /// The value.
        value: f32,
    },
}

/// Whether [`quantize`] writes `kind`.
///
/// ```
/// use rlx::gguf::{GgmlType, quantizes};
/// assert!(quantizes(GgmlType::Q8_0));
/// assert!(!quantizes(GgmlType::Q4K));
/// ```
pub fn quantizes(kind: GgmlType) -> bool {
    layout(kind).is_some()
}

/// How a classic format holds its integers: `bits` per value, the range `low..=high` of
/// `n` in `d · n + m` (`m` is 0 without a stored `minimum`), stored as `n − low` (Q8_0
/// stores the signed byte of `n` itself).
struct Layout {
    bits: u32,
    low: f32,
    high: f32,
    minimum: bool,
}

fn layout(kind: GgmlType) -> Option<Layout> {
    let (bits, low, high, minimum) = match kind {
        GgmlType::Q8_0 => (8, -127.0, 127.0, false),
        GgmlType::Q4_0 => (4, -8.0, 7.0, false),
        GgmlType::Q4_1 => (4, 0.0, 15.0, true),
        GgmlType::Q5_0 => (5, -16.0, 15.0, false),
        GgmlType::Q5_1 => (5, 0.0, 31.0, true),
        _ => return None,
    };
    Some(Layout {
        bits,
        low,
        high,
        minimum,
    })
}

/// `values` (a multiple of 32 of them) as blocks of `kind`, appended to `out`; the blocks
/// [`dequantize`](super::dequantize) reads back to within half a step of each value.
///
/// ```
/// use rlx::gguf::{GgmlType, dequantize, quantize};
/// let values: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) / 16.0).collect();
/// let mut blocks = Vec::new();
/// quantize(GgmlType::Q8_0, &values, &mut blocks)?;
/// assert_eq!(blocks.len(), 2 * 34);
/// let mut back = vec![0f32; 64];
/// dequantize(GgmlType::Q8_0, &blocks, &mut back)?;
/// // Within half a step: the second block's largest value is 43 / 16, its step 1/127 of it.
/// assert!(values.iter().zip(&back).all(|(v, b)| (v - b).abs() <= 43.0 / 16.0 / 254.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn quantize(kind: GgmlType, values: &[f32], out: &mut Vec<u8>) -> Result<(), QuantizeError> {
    let layout = layout(kind).ok_or(QuantizeError::Unsupported(kind))?;
    let block = kind.block_values();
    if !values.len().is_multiple_of(block) {
        return Err(QuantizeError::Length {
            kind,
            values: values.len(),
            block,
        });
    }
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(QuantizeError::NotRepresentable {
            kind,
            index,
            value: values[index],
        });
    }
    let start = out.len();
    out.reserve(values.len() / block * kind.block_bytes());
    for (b, chunk) in values.chunks_exact(block).enumerate() {
        let chunk: &[f32; 32] = chunk.try_into().expect("classic blocks hold 32 values");
        let Some(q) = quantize_block(&layout, chunk, out) else {
            // Nothing of a failed call stays appended.
            out.truncate(start);
            let index = b * block + largest(chunk).0;
            return Err(QuantizeError::NotRepresentable {
                kind,
                index,
                value: values[index],
            });
        };
        pack(&layout, &q, out);
    }
    Ok(())
}

/// The index and value of the entry of largest magnitude (the first of ties).
fn largest(x: &[f32; 32]) -> (usize, f32) {
    x.iter().copied().enumerate().fold(
        (0, 0.0),
        |(i, m), (j, v)| {
            if v.abs() > m.abs() { (j, v) } else { (i, m) }
        },
    )
}

/// Writes the block's scale (and minimum) to `out` and returns its integers, stored form
/// (`0..2^bits`); `None` when the scale or minimum overflows an f16.
fn quantize_block(layout: &Layout, x: &[f32; 32], out: &mut Vec<u8>) -> Option<[u8; 32]> {
    let (low, high) = (layout.low, layout.high);
    let (d, m) = if layout.minimum {
        // `[min, max]` onto the whole range.
        let (min, max) = x
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        ((max - min) / high, min)
    } else {
        // The value of largest magnitude onto the range's negative end (Q8_0's range is
        // symmetric: onto its magnitude).
        let (_, max) = largest(x);
        let end = if low == -high { -max.abs() } else { max };
        (end / low, 0.0)
    };
    let (d, m) = (f16::from_f32(d), f16::from_f32(m));
    if !(d.is_finite() && m.is_finite()) {
        return None;
    }
    out.extend_from_slice(&d.to_le_bytes());
    if layout.minimum {
        out.extend_from_slice(&m.to_le_bytes());
    }
    let (d, m) = (d.to_f32(), m.to_f32());
    let mut q = [0u8; 32];
    for (q, &v) in q.iter_mut().zip(x) {
        let n = if d == 0.0 {
            0.0
        } else {
            nearest(v, d, m).clamp(low, high)
        };
        *q = if layout.bits == 8 {
            (n as i8) as u8
        } else {
            (n - low) as u8
        };
    }
    Some(q)
}

/// The integer `n` for which `n · d + m` is nearest to `v`, computed in f64 so that the
/// choice is the exact nearest (ties away from zero).
fn nearest(v: f32, d: f32, m: f32) -> f32 {
    ((f64::from(v) - f64::from(m)) / f64::from(d)).round() as f32
}

/// Appends the integers in the format's packing: bytes for 8 bits; otherwise, for 5 bits,
/// the fifth bits as one little-endian `u32` (bit `j` for value `j`), then nibbles with value
/// `j` low and value `j + 16` high in byte `j`.
fn pack(layout: &Layout, q: &[u8; 32], out: &mut Vec<u8>) {
    if layout.bits == 8 {
        out.extend_from_slice(q);
        return;
    }
    if layout.bits == 5 {
        let high = q
            .iter()
            .enumerate()
            .fold(0u32, |h, (j, &v)| h | (u32::from(v >> 4) << j));
        out.extend_from_slice(&high.to_le_bytes());
    }
    out.extend((0..16).map(|j| (q[j] & 0xF) | ((q[j + 16] & 0xF) << 4)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::dequantize_f64;

    const FORMATS: [GgmlType; 5] = [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ];

    /// Blocks of varied shapes: wide and narrow ranges, one sign, a constant block, zeros,
    /// one outlier.
    fn inputs() -> Vec<f32> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut x = Vec::new();
        for block in 0..64 {
            let scale = 10f64.powi(block % 7 - 3);
            let shift = if block % 3 == 0 { 0.5 } else { 0.0 };
            x.extend((0..32).map(|_| ((next() - 0.5 + shift) * scale) as f32));
        }
        x.extend([0.75f32; 32]);
        x.extend([0.0f32; 32]);
        let mut outlier = [0.01f32; 32];
        outlier[7] = -40.0;
        x.extend(outlier);
        x
    }

    /// Every value is stored as the nearest its block can hold: no other integer of the
    /// range, under the block's stored scale and minimum, dequantizes nearer to it.
    #[test]
    fn every_value_is_the_nearest_its_block_holds() {
        let x = inputs();
        for kind in FORMATS {
            let mut blocks = Vec::new();
            quantize(kind, &x, &mut blocks).unwrap();
            assert_eq!(blocks.len(), x.len() / 32 * kind.block_bytes());
            let mut back = vec![0f64; x.len()];
            dequantize_f64(kind, &blocks, &mut back).unwrap();
            for (b, block) in blocks.chunks_exact(kind.block_bytes()).enumerate() {
                let d = f64::from(f16::from_le_bytes([block[0], block[1]]).to_f32());
                let range = d * f64::from((1u32 << layout(kind).unwrap().bits) - 1);
                for j in 0..32 {
                    let (v, got) = (f64::from(x[b * 32 + j]), back[b * 32 + j]);
                    let err = (v - got).abs();
                    // A neighbour one step away, if inside the block's range, is no nearer.
                    for step in [-d, d] {
                        let other = got + step;
                        let inside = block_holds(kind, block, other);
                        assert!(
                            !inside || err <= (v - other).abs() + 1e-12 * range.abs(),
                            "{kind} block {b} value {j}: {v} stored as {got}, {other} is nearer"
                        );
                    }
                }
            }
        }
    }

    /// Whether `value` is one of the values `block` of `kind` can hold.
    fn block_holds(kind: GgmlType, block: &[u8], value: f64) -> bool {
        let d = f64::from(f16::from_le_bytes([block[0], block[1]]).to_f32()).abs();
        let (low, high) = ends(kind, block);
        let steps = (value - low) / d;
        let slack = 1e-9 * d;
        d != 0.0
            && (steps - steps.round()).abs() < 1e-6
            && (low - slack..=high + slack).contains(&value)
    }

    /// The least and greatest values `block` of `kind` holds.
    fn ends(kind: GgmlType, block: &[u8]) -> (f64, f64) {
        let d = f64::from(f16::from_le_bytes([block[0], block[1]]).to_f32());
        let (low, high, m) = match kind {
            GgmlType::Q8_0 => (-127.0, 127.0, 0.0),
            GgmlType::Q4_0 => (-8.0, 7.0, 0.0),
            GgmlType::Q5_0 => (-16.0, 15.0, 0.0),
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                let m = f64::from(f16::from_le_bytes([block[2], block[3]]).to_f32());
                let top = if kind == GgmlType::Q4_1 { 15.0 } else { 31.0 };
                (0.0, top, m)
            }
            _ => unreachable!(),
        };
        let (a, b) = (low * d + m, high * d + m);
        (a.min(b), a.max(b))
    }

    /// Within a block's range the error is at most half a step; the largest magnitude (or
    /// both ends, for formats with a minimum) is kept to within f16 rounding of the scale.
    #[test]
    fn errors_are_half_a_step_and_the_ends_are_kept() {
        let x = inputs();
        for kind in FORMATS {
            let mut blocks = Vec::new();
            quantize(kind, &x, &mut blocks).unwrap();
            let mut back = vec![0f64; x.len()];
            dequantize_f64(kind, &blocks, &mut back).unwrap();
            for (b, block) in blocks.chunks_exact(kind.block_bytes()).enumerate() {
                let d = f64::from(f16::from_le_bytes([block[0], block[1]]).to_f32());
                let values = &x[b * 32..][..32];
                let amax = values.iter().fold(0f64, |m, v| m.max(f64::from(v.abs())));
                let (low, high) = ends(kind, block);
                for j in 0..32 {
                    let v = f64::from(values[j]);
                    let err = (v - back[b * 32 + j]).abs();
                    // Q4_0 and Q5_0 hold one step less on the side opposite the largest
                    // magnitude: a value past that end is stored as the end.
                    let past = (v - v.clamp(low, high)).abs();
                    // f16 scales carry 11 bits, fewer below 2^-14: the range's end may move
                    // by 2^-11 of it, or by up to 2^7 steps of half f16's least subnormal.
                    let bound =
                        past + d.abs() / 2.0 + amax * 2f64.powi(-10) + 2f64.powi(-18) + 1e-12;
                    assert!(
                        err <= bound,
                        "{kind} block {b} value {j}: error {err} > {bound}"
                    );
                }
            }
            // Zeros come back exactly; so does a constant block where a minimum holds it.
            let n = x.len();
            assert!(back[n - 64..n - 32].iter().all(|&v| v == 0.0), "{kind}");
            if layout(kind).unwrap().minimum {
                assert!(back[n - 96..n - 64].iter().all(|&v| v == 0.75), "{kind}");
            }
        }
    }

    #[test]
    fn bad_values_are_typed_errors() {
        let mut out = Vec::new();
        assert!(matches!(
            quantize(GgmlType::Q4K, &[0.0; 256], &mut out),
            Err(QuantizeError::Unsupported(GgmlType::Q4K))
        ));
        assert!(matches!(
            quantize(GgmlType::Q8_0, &[0.0; 33], &mut out),
            Err(QuantizeError::Length { values: 33, .. })
        ));
        let mut x = [0.5f32; 64];
        x[40] = f32::NAN;
        assert!(matches!(
            quantize(GgmlType::Q4_0, &x, &mut out),
            Err(QuantizeError::NotRepresentable { index: 40, .. })
        ));
        x[40] = 1e9; // a scale of 1e9 / 8 is past f16's 65504
        assert!(matches!(
            quantize(GgmlType::Q4_0, &x, &mut out),
            Err(QuantizeError::NotRepresentable { index: 40, .. })
        ));
        assert!(out.is_empty(), "a failed call appends nothing");
    }
}

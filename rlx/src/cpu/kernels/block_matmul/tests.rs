//! The vector dequantization paths against the format definitions.

use crate::gguf::{dequantize, random_blocks};

/// Every format's vectorized dequantization (AVX-512 with mask registers, AVX2, where
/// the CPU has them) gives the values `gguf::dequantize` defines, bit for bit.
#[test]
fn vector_dequantization_is_the_definition() {
    let mut seed = 11u64;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for format in crate::ops::linalg::BLOCK_FORMATS {
        let (rows, k) = (5, 2 * format.block_values());
        let w = random_blocks(format, rows * k / format.block_values(), &mut next);
        let mut want = vec![0f32; rows * k];
        dequantize(format, &w, &mut want).unwrap();
        let mut paths: Vec<(&str, Vec<f32>)> = Vec::new();
        let mut portable = vec![f32::NAN; rows * k];
        super::block_dequantize(format, &w, &mut portable);
        paths.push(("dispatched", portable));
        #[cfg(target_arch = "x86_64")]
        {
            use super::formats::IntBlock;
            fn run<F: IntBlock>(w: &[u8], k: usize, rows: usize) -> [Option<Vec<f32>>; 2] {
                use std::arch::is_x86_feature_detected as has;
                let avx512 = (has!("avx512f") && has!("avx512bw") && has!("avx512vl")).then(|| {
                    let mut out = vec![f32::NAN; rows * k];
                    // SAFETY: the CPU has AVX-512 F/BW/VL (checked), and so F16C.
                    unsafe { super::exact::dequantize_avx512::<F>(k, w, 0..rows, &mut out) };
                    out
                });
                let avx2 = (has!("avx2") && has!("fma") && has!("f16c")).then(|| {
                    let mut out = vec![f32::NAN; rows * k];
                    // SAFETY: the CPU has AVX2, FMA and F16C (checked).
                    unsafe { super::exact::dequantize_avx2::<F>(k, w, 0..rows, &mut out) };
                    out
                });
                [avx512, avx2]
            }
            use crate::gguf::*;
            let [avx512, avx2] = match format {
                GgmlType::Q8_0 => run::<Q8_0Block>(&w, k, rows),
                GgmlType::Q4_0 => run::<Q4_0Block>(&w, k, rows),
                GgmlType::Q4_1 => run::<Q4_1Block>(&w, k, rows),
                GgmlType::Q5_0 => run::<Q5_0Block>(&w, k, rows),
                GgmlType::Q5_1 => run::<Q5_1Block>(&w, k, rows),
                GgmlType::Q2K => run::<Q2KBlock>(&w, k, rows),
                GgmlType::Q3K => run::<Q3KBlock>(&w, k, rows),
                GgmlType::Q4K => run::<Q4KBlock>(&w, k, rows),
                GgmlType::Q5K => run::<Q5KBlock>(&w, k, rows),
                _ => run::<Q6KBlock>(&w, k, rows),
            };
            paths.extend(avx512.map(|v| ("avx512", v)));
            paths.extend(avx2.map(|v| ("avx2", v)));
        }
        for (name, have) in &paths {
            for (i, (h, w)) in have.iter().zip(&want).enumerate() {
                assert_eq!(
                    h.to_bits(),
                    w.to_bits(),
                    "{} {name} [{i}]: {h} != {w}",
                    format.name()
                );
            }
        }
    }
}

//! The integer kernels against float64 sums of the integers they multiply, on every path.

use super::*;
use crate::gguf::{
    GgmlType, Q2KBlock, Q3KBlock, Q4_0Block, Q4_1Block, Q4KBlock, Q5_0Block, Q5_1Block, Q5KBlock,
    Q6KBlock, Q8_0Block, dequantize_f64, random_blocks,
};

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
    for format in crate::ops::linalg::BLOCK_FORMATS {
        for rows in [1usize, 3, 15] {
            // 19 runs in the formats of one run a block: two groups of eight
            // (`IntBlock::factors_of_eight`) and three blocks one at a time.
            let runs = if format.block_values() == VALUES {
                19
            } else {
                3
            };
            let (n, k) = (37, runs * format.block_values());
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

/// The vector reads of eight blocks' factors give what each block's head and chunk
/// give, bit for bit.
#[cfg(target_arch = "x86_64")]
#[test]
fn factors_of_eight_blocks_read_as_vectors() {
    use super::super::formats::{IntBlock, factors_of_eight_scalar};
    use std::arch::x86_64::*;
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
        return;
    }
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn both<F: IntBlock>(blocks: &[u8]) -> [[f32; 8]; 4] {
        let mut out = [[0f32; 8]; 4];
        // SAFETY: AVX2 and F16C (the caller checked them); eight blocks in `blocks`.
        unsafe {
            assert!(blocks.len() >= 8 * F::BYTES);
            let (a, b) = F::factors_of_eight(blocks.as_ptr());
            let (c, d) = factors_of_eight_scalar::<F>(blocks.as_ptr());
            for (o, v) in out.iter_mut().zip([a, b, c, d]) {
                _mm256_storeu_ps(o.as_mut_ptr(), v);
            }
        }
        out
    }
    let mut rng = Numbers(11);
    for format in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ] {
        let blocks = random_blocks(format, 8, || rng.next());
        // SAFETY: the CPU has AVX2 and F16C (checked above).
        let [scales, offsets, want_scales, want_offsets] = unsafe {
            match format {
                GgmlType::Q8_0 => both::<Q8_0Block>(&blocks),
                GgmlType::Q4_0 => both::<Q4_0Block>(&blocks),
                GgmlType::Q4_1 => both::<Q4_1Block>(&blocks),
                GgmlType::Q5_0 => both::<Q5_0Block>(&blocks),
                _ => both::<Q5_1Block>(&blocks),
            }
        };
        let bits = |v: [f32; 8]| v.map(f32::to_bits);
        assert_eq!(bits(scales), bits(want_scales), "{}", format.name());
        assert_eq!(bits(offsets), bits(want_offsets), "{}", format.name());
        assert!(want_scales.iter().any(|s| *s != 0.0), "{}", format.name());
    }
}

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

/// The vendor read from `cpuid` is the one the kernel reports, and the prefetch distance
/// the decode kernels take follows it (unless a user set one).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn prefetch_distance_follows_the_cpu_vendor() {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let Some(vendor) = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("vendor_id"))
        .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
    else {
        return; // Not an x86 kernel's report.
    };
    let intel = crate::cpu::kernels::simd::intel_cpu();
    assert_eq!(intel, vendor == "GenuineIntel", "{vendor}");
    if std::env::var_os("RLX_PREFETCH_AHEAD").is_none() {
        assert_eq!(prefetch_ahead(), if intel { 2048 } else { 512 });
    }
}

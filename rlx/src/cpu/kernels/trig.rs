//! Sines and cosines of many angles at once, in float64, as straight-line arithmetic the
//! compiler vectorizes (`std`'s `sin_cos` is a call per angle, which made the rotary
//! embedding's angles most of its time: 4,096 of them per call in a 128-token prompt).
//!
//! Each angle is reduced to `r` in `[-π/4, π/4]` by the nearest multiple `k` of `π/2`,
//! with `π/2` split in three parts so that `k` times each part is exact (Cody and Waite),
//! then `sin r` and `cos r` are minimax polynomials of `r²` and the quadrant `k mod 4`
//! picks and signs them. Only additions and multiplications run, never contracted, so the
//! results are the same at every vector width (see `simd`). Within about 1 ulp of the true
//! values for `|x|` up to [`REDUCED_MAX`]; larger angles take `std`'s path.

/// Angles computed together: one AVX-512 vector of float64.
pub(crate) const LANES: usize = 8;

/// The largest `|x|` the three-part reduction keeps exact: `k` below 2^20, so `k` times a
/// part of 33 significant bits fits float64's 53.
pub(crate) const REDUCED_MAX: f64 = 1_647_000.0;

/// `2 / π`.
const TWO_OVER_PI: f64 = std::f64::consts::FRAC_2_PI;
/// `π/2` in three parts of 33 significant bits each, largest first, and the rest.
const HALF_PI: [f64; 3] = [
    1.570_796_326_734_125_6,
    6.077_100_506_303_966e-11,
    2.022_266_248_711_166_5e-21,
];
const HALF_PI_REST: f64 = 8.478_427_660_368_9e-32;
/// Adding 1.5·2^52 rounds a float64 below 2^51 in magnitude to the nearest integer (ties
/// to even) and leaves that integer, offset by 1.5·2^52, in the low bits of the mantissa.
const ROUNDER: f64 = 6_755_399_441_055_744.0;

/// `sin r = r + r³·(S1 + z·(S2 + …))` with `z = r²`, on `[-π/4, π/4]`.
const SIN: [f64; 6] = [
    -1.666_666_666_666_663_2e-1,
    8.333_333_333_322_49e-3,
    -1.984_126_982_985_795e-4,
    2.755_731_370_707_006_8e-6,
    -2.505_076_025_340_686_3e-8,
    1.589_690_995_211_55e-10,
];
/// `cos r = 1 - z/2 + z²·(C1 + z·(C2 + …))` with `z = r²`, on `[-π/4, π/4]`.
const COS: [f64; 6] = [
    4.166_666_666_666_66e-2,
    -1.388_888_888_887_411e-3,
    2.480_158_728_947_673e-5,
    -2.755_731_435_139_066_3e-7,
    2.087_572_321_298_175e-9,
    -1.135_964_755_778_819_5e-11,
];

/// `p[0] + z·(p[1] + z·(… + z·p[5]))`.
#[inline(always)]
fn polynomial(p: &[f64; 6], z: f64) -> f64 {
    p[0] + z * (p[1] + z * (p[2] + z * (p[3] + z * (p[4] + z * p[5]))))
}

/// The sine and cosine of each of `LANES` angles, each `|x| <= REDUCED_MAX` (a larger or
/// non-finite angle gives an unspecified value: [`sin_cos`] checks).
#[inline(always)]
fn sin_cos_reduced(x: &[f64; LANES], sin: &mut [f64; LANES], cos: &mut [f64; LANES]) {
    for i in 0..LANES {
        let shifted = x[i] * TWO_OVER_PI + ROUNDER;
        let k = shifted - ROUNDER;
        // The quadrant: the integer's low two bits (the offset 1.5·2^52 adds none there).
        let quadrant = shifted.to_bits() & 3;
        let r = x[i] - k * HALF_PI[0] - k * HALF_PI[1] - k * HALF_PI[2] - k * HALF_PI_REST;
        let z = r * r;
        let s = r + r * z * polynomial(&SIN, z);
        let c = 1.0 - 0.5 * z + z * z * polynomial(&COS, z);
        // Quadrants 1 and 3 swap sine and cosine; the sine is negated in 2 and 3, the
        // cosine in 1 and 2.
        let (s, c) = if quadrant & 1 == 1 { (c, s) } else { (s, c) };
        let sin_sign = (quadrant & 2) << 62;
        let cos_sign = ((quadrant + 1) & 2) << 62;
        sin[i] = f64::from_bits(s.to_bits() ^ sin_sign);
        cos[i] = f64::from_bits(c.to_bits() ^ cos_sign);
    }
}

/// The sine and cosine of each of `LANES` angles. Vectorizes when inlined into a loop
/// compiled for a vector instruction set (`simd::vectorized`).
#[inline(always)]
pub(crate) fn sin_cos(x: &[f64; LANES], sin: &mut [f64; LANES], cos: &mut [f64; LANES]) {
    if x.iter().any(|a| a.is_nan() || a.abs() > REDUCED_MAX) {
        for i in 0..LANES {
            (sin[i], cos[i]) = x[i].sin_cos();
        }
        return;
    }
    sin_cos_reduced(x, sin, cos);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ulps between two float64 of one sign or near zero.
    fn ulps(a: f64, b: f64) -> f64 {
        (a - b).abs()
            / f64::EPSILON.max((a.abs().max(b.abs()) * f64::EPSILON).max(f64::MIN_POSITIVE))
    }

    fn check(angles: impl Iterator<Item = f64>) -> f64 {
        let angles: Vec<f64> = angles.collect();
        let mut worst = 0f64;
        for chunk in angles.chunks(LANES) {
            let mut x = [0.0; LANES];
            x[..chunk.len()].copy_from_slice(chunk);
            let (mut s, mut c) = ([0.0; LANES], [0.0; LANES]);
            sin_cos(&x, &mut s, &mut c);
            for i in 0..chunk.len() {
                let (rs, rc) = x[i].sin_cos();
                // Absolute error against a value of magnitude <= 1, in units of 2^-52.
                worst = worst.max((s[i] - rs).abs() / f64::EPSILON);
                worst = worst.max((c[i] - rc).abs() / f64::EPSILON);
                assert!(
                    ulps(s[i], rs) < 4.0 || (s[i] - rs).abs() < 1e-16,
                    "sin {}",
                    x[i]
                );
                assert!(
                    ulps(c[i], rc) < 4.0 || (c[i] - rc).abs() < 1e-16,
                    "cos {}",
                    x[i]
                );
            }
        }
        worst
    }

    #[test]
    fn rotary_angles_match_std_within_an_ulp() {
        // The angles rope computes: positions up to 32k times its frequencies.
        let dims = 128;
        let angles = (0..32_768u32).step_by(7).flat_map(|pos| {
            (0..dims / 2).map(move |i| pos as f64 * 10_000f64.powf(-2.0 * i as f64 / dims as f64))
        });
        let worst = check(angles);
        assert!(worst <= 1.0, "largest difference {worst} x 2^-52");
    }

    #[test]
    fn every_quadrant_and_sign_matches_std() {
        let step = std::f64::consts::FRAC_PI_4 / 7.0;
        let worst = check(
            (-400..400)
                .map(|i| i as f64 * step)
                .chain([0.0, -0.0, 1e-300]),
        );
        assert!(worst <= 1.0, "largest difference {worst} x 2^-52");
        // Near multiples of π/2, where the reduction loses most.
        let near = (1..2000).flat_map(|k| {
            let x = k as f64 * std::f64::consts::FRAC_PI_2;
            [x, x.next_up(), x.next_down()]
        });
        assert!(check(near) <= 1.0);
    }

    #[test]
    fn large_and_non_finite_angles_take_the_exact_path() {
        let x = [
            REDUCED_MAX * 2.0,
            1e300,
            f64::NAN,
            f64::INFINITY,
            0.5,
            -3.0,
            7.0,
            1.0,
        ];
        let (mut s, mut c) = ([0.0; LANES], [0.0; LANES]);
        sin_cos(&x, &mut s, &mut c);
        for i in 0..LANES {
            let (rs, rc) = x[i].sin_cos();
            assert!(s[i] == rs || (s[i].is_nan() && rs.is_nan()), "sin {}", x[i]);
            assert!(c[i] == rc || (c[i].is_nan() && rc.is_nan()), "cos {}", x[i]);
        }
    }
}

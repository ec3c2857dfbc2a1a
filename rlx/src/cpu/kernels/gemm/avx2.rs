//! The AVX2 + FMA micro-kernel: a 6 x 16 tile of `C` held in twelve 256-bit registers.

use super::{ARows, KernelShape, Kernels, MicroKernel, Tile};

/// Rows per call.
const MR: usize = 6;
/// Columns per call.
const NR: usize = 16;

/// A 16-wide B panel of 256 rows (16 KiB) stays in L1.
const SHAPE: KernelShape = KernelShape {
    nr: NR,
    kc: 256,
    mr: MR,
    tall_mr: None,
};

/// The AVX2 kernels if this CPU has AVX2 and FMA.
pub(crate) fn f32_kernels() -> Option<Kernels<f32>> {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Some(Kernels {
                shape: SHAPE,
                regular: MicroKernel {
                    mr: MR,
                    run: entry,
                    in_place: true,
                },
                tall: None,
            });
        }
    }
    None
}

/// # Safety
/// As [`super::KernelFn`], and the CPU supports AVX2 and FMA (checked by [`f32_kernels`]).
#[cfg(target_arch = "x86_64")]
unsafe fn entry(kc: usize, a: ARows<f32>, b: *const f32, tile: Tile<f32>) {
    // SAFETY: `f32_kernels` hands out this entry only after detecting AVX2 and FMA; the
    // pointer contract is the caller's.
    unsafe {
        if a.k_stride == 1 {
            kernel_6x16::<1>(kc, a, b, tile)
        } else {
            kernel_6x16::<MR>(kc, a, b, tile)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
/// `KS` is A's `k_stride`: `MR` for a packed panel, 1 for rows read in place.
unsafe fn kernel_6x16<const KS: usize>(kc: usize, a: ARows<f32>, b: *const f32, tile: Tile<f32>) {
    use std::arch::x86_64::*;
    let Tile {
        c,
        ldc,
        mr,
        nr,
        accumulate,
    } = tile;
    // SAFETY: `b` holds kc*16 floats and A kc values in each of its first mr rows
    // (KernelFn contract; rows past mr read row mr - 1 again, or the panel's zero padding),
    // so every load below is in bounds; stores stay inside the mr x nr tile of `c`, either
    // directly (full tile) or through the local buffer (edge tile).
    unsafe {
        let rows: [*const f32; MR] = a.row_starts(mr, KS != 1);
        let mut off = 0;
        // Start fetching the C tile now so it has arrived when the k-loop ends.
        for i in 0..mr {
            let row = c.add(i * ldc).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(row);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(60.min(4 * nr - 4)));
        }
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        let mut bp = b;
        // One step of the k-loop: a rank-1 update of the tile by column `$p` of the A panel
        // and row `$p` of the B panel.
        macro_rules! step {
            ($p:expr) => {{
                let b0 = _mm256_loadu_ps(bp.add($p * NR));
                let b1 = _mm256_loadu_ps(bp.add($p * NR + 8));
                for (i, row) in acc.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*rows[i].add(off + $p * KS));
                    row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                    row[1] = _mm256_fmadd_ps(av, b1, row[1]);
                }
            }};
        }
        // Unrolled by four, with A fetched a few steps ahead: the A panel streams from L2
        // while the B panel stays in L1 across calls.
        for _ in 0..kc / 4 {
            if KS != 1 {
                _mm_prefetch::<_MM_HINT_T0>(rows[0].wrapping_add(off + 8 * KS).cast());
            }
            // B streams from memory when few rows share it (small batches): fetch the
            // four lines needed sixteen steps from now.
            for line in 0..4 {
                _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(16 * NR + line * 16).cast());
            }
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            off += 4 * KS;
            bp = bp.add(4 * NR);
        }
        for _ in 0..kc % 4 {
            step!(0);
            off += KS;
            bp = bp.add(NR);
        }
        if mr == MR && nr == NR {
            for (i, row) in acc.iter().enumerate() {
                let dst = c.add(i * ldc);
                let (mut lo, mut hi) = (row[0], row[1]);
                if accumulate {
                    lo = _mm256_add_ps(lo, _mm256_loadu_ps(dst));
                    hi = _mm256_add_ps(hi, _mm256_loadu_ps(dst.add(8)));
                }
                _mm256_storeu_ps(dst, lo);
                _mm256_storeu_ps(dst.add(8), hi);
            }
            return;
        }
        let mut tile = [0f32; MR * NR];
        for (i, row) in acc.iter().enumerate() {
            _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR), row[0]);
            _mm256_storeu_ps(tile.as_mut_ptr().add(i * NR + 8), row[1]);
        }
        for i in 0..mr {
            for j in 0..nr {
                let dst = c.add(i * ldc + j);
                let v = tile[i * NR + j];
                *dst = if accumulate { *dst + v } else { v };
            }
        }
    }
}

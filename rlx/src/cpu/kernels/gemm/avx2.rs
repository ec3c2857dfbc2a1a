//! The AVX2 + FMA micro-kernels, over 16-wide panels of B.
//!
//! - Regular, 6 x 16: the tile of `C` in twelve 256-bit registers; per step of `k`, two
//!   loads of B, six broadcasts of A and twelve fused multiply-adds.
//! - Tall, 16 x 16, for products of few rows (a small batch times a weight). Sixteen
//!   registers cannot hold sixteen rows of even one 8-wide half of the tile next to the
//!   operands, so the roles swap: a step loads the 16 packed values of A's column (two
//!   registers) and broadcasts values of B, accumulating the tile's columns as 16-row
//!   vectors, six columns at a time (twelve registers). B's panel then comes from memory
//!   once for all 16 rows, not once per 6-row pass; the tile is transposed on the way out.

use super::{ARows, KernelShape, Kernels, MicroKernel, Tile};

/// Rows per call of the regular kernel.
const MR: usize = 6;
/// Rows per call of the tall kernel.
const TALL_MR: usize = 16;
/// Columns per call.
const NR: usize = 16;

/// How many steps of `k` ahead the kernel fetches B.
const PREFETCH_STEPS: usize = 48;

/// A 16-wide B panel of 256 rows (16 KiB) stays in L1.
const SHAPE: KernelShape = KernelShape {
    nr: NR,
    kc: 256,
    mr: MR,
    tall_mr: Some(TALL_MR),
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
                    in_place_columns: false,
                },
                tall: Some(MicroKernel {
                    mr: TALL_MR,
                    run: tall_entry,
                    in_place: false,
                    in_place_columns: false,
                }),
            });
        }
    }
    None
}

/// # Safety
/// As [`super::KernelFn`], and the CPU supports AVX2 and FMA (checked by [`f32_kernels`]).
#[cfg(target_arch = "x86_64")]
unsafe fn entry(kc: usize, a: ARows<f32>, b: *const f32, tile: Tile<f32>) {
    /// The kernel computing `$rows` rows, for A's layout.
    macro_rules! rows {
        ($rows:expr) => {
            if a.k_stride == 1 {
                kernel_6x16::<1, $rows>(kc, a, b, tile)
            } else {
                kernel_6x16::<MR, $rows>(kc, a, b, tile)
            }
        };
    }
    // SAFETY: `f32_kernels` hands out this entry only after detecting AVX2 and FMA; the
    // pointer contract is the caller's. A tile of one or two rows (a decode step's
    // matrix-vector products) computes only those: see the AVX-512 kernel.
    unsafe {
        match tile.mr {
            1 => rows!(1),
            2 => rows!(2),
            _ => rows!(MR),
        }
    }
}

/// # Safety
/// As [`super::KernelFn`], and the CPU supports AVX2 and FMA (checked by [`f32_kernels`]).
#[cfg(target_arch = "x86_64")]
unsafe fn tall_entry(kc: usize, a: ARows<f32>, b: *const f32, tile: Tile<f32>) {
    debug_assert_eq!(
        a.k_stride, TALL_MR,
        "the tall kernel reads packed panels only"
    );
    // SAFETY: as `entry`.
    unsafe { kernel_16x16(kc, a.ptr, b, tile) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
/// `KS` is A's `k_stride`: `MR` for a packed panel, 1 for rows read in place. `ROWS` (at
/// most `MR`, at least `tile.mr`) are the rows computed.
unsafe fn kernel_6x16<const KS: usize, const ROWS: usize>(
    kc: usize,
    a: ARows<f32>,
    b: *const f32,
    tile: Tile<f32>,
) {
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
        debug_assert!(mr <= ROWS && ROWS <= MR);
        let rows: [*const f32; ROWS] = a.row_starts(mr, KS != 1);
        let mut off = 0;
        // Start fetching the C tile now so it has arrived when the k-loop ends.
        for i in 0..mr {
            let row = c.add(i * ldc).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(row);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(60.min(4 * nr - 4)));
        }
        let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
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
            // four lines needed PREFETCH_STEPS steps from now.
            for line in 0..4 {
                _mm_prefetch::<_MM_HINT_T0>(
                    bp.wrapping_add(PREFETCH_STEPS * NR + line * 16).cast(),
                );
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
        if ROWS == MR && mr == MR && nr == NR {
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

/// How many steps of `k` ahead the tall kernel fetches B: about a memory latency of work.
const TALL_PREFETCH_STEPS: usize = 24;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_16x16(kc: usize, a: *const f32, b: *const f32, tile: Tile<f32>) {
    use std::arch::x86_64::*;
    // SAFETY: `a` holds kc*16 and `b` kc*16 floats (KernelFn contract), so every load in
    // the column groups is in bounds (prefetches may point past them, which is harmless);
    // `columns` is a local buffer, and `store_transposed` writes only the mr x nr tile.
    unsafe {
        // The tile column by column: `columns[2j + h]` holds rows 8h..8h + 8 of column j.
        let mut columns = [_mm256_setzero_ps(); 2 * NR];
        tall_columns::<6, true>(kc, a, b, 0, &mut columns);
        if tile.nr > 6 {
            tall_columns::<6, false>(kc, a, b, 6, &mut columns);
        }
        if tile.nr > 12 {
            tall_columns::<4, false>(kc, a, b, 12, &mut columns);
        }
        store_transposed(&columns, tile);
    }
}

/// Adds `kc` steps of `k` to columns `j0..j0 + W` of the tall tile (two 8-row vectors
/// each in `columns`). The first group fetches B ahead from memory; the later ones find
/// its lines in L1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tall_columns<const W: usize, const FETCH: bool>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    j0: usize,
    columns: &mut [std::arch::x86_64::__m256; 2 * NR],
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's: `a` holds kc*16 floats and `b` kc*16, `j0 + W <= 16`.
    unsafe {
        let mut acc: [[__m256; 2]; W] =
            std::array::from_fn(|j| [columns[2 * (j0 + j)], columns[2 * (j0 + j) + 1]]);
        let (mut ap, mut bp) = (a, b.add(j0));
        macro_rules! step {
            ($p:expr) => {{
                let a0 = _mm256_loadu_ps(ap.add($p * TALL_MR));
                let a1 = _mm256_loadu_ps(ap.add($p * TALL_MR + 8));
                for (j, col) in acc.iter_mut().enumerate() {
                    let bv = _mm256_broadcast_ss(&*bp.add($p * NR + j));
                    col[0] = _mm256_fmadd_ps(a0, bv, col[0]);
                    col[1] = _mm256_fmadd_ps(a1, bv, col[1]);
                }
            }};
        }
        for _ in 0..kc / 4 {
            if FETCH {
                for line in 0..4 {
                    let ahead = bp.wrapping_add((TALL_PREFETCH_STEPS + line) * NR);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                }
            }
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            ap = ap.add(4 * TALL_MR);
            bp = bp.add(4 * NR);
        }
        for _ in 0..kc % 4 {
            step!(0);
            ap = ap.add(TALL_MR);
            bp = bp.add(NR);
        }
        for (j, col) in acc.iter().enumerate() {
            columns[2 * (j0 + j)] = col[0];
            columns[2 * (j0 + j) + 1] = col[1];
        }
    }
}

/// Writes (or adds) the `mr x nr` corner of a 16 x 16 tile held column by column
/// (`columns[2j + h]`: rows `8h..8h + 8` of column j) into row-major `C`, transposing
/// 8 x 8 blocks in registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn store_transposed(columns: &[std::arch::x86_64::__m256; 2 * NR], tile: Tile<f32>) {
    use std::arch::x86_64::*;
    let Tile {
        c,
        ldc,
        mr,
        nr,
        accumulate,
    } = tile;
    // SAFETY: rows below `mr` and columns below `nr` of the tile at `c` are the caller's
    // to write (KernelFn contract); full-width stores happen only when the 8 columns of a
    // block are all below `nr`, and narrower blocks go through a local row.
    unsafe {
        for h in 0..2 {
            if 8 * h >= mr {
                break;
            }
            for block in 0..2 {
                let col = 8 * block;
                if col >= nr {
                    break;
                }
                let r: [__m256; 8] = std::array::from_fn(|j| columns[2 * (8 * block + j) + h]);
                // 8 x 8 transpose: rows of `r` are columns of C.
                let t0 = _mm256_unpacklo_ps(r[0], r[1]);
                let t1 = _mm256_unpackhi_ps(r[0], r[1]);
                let t2 = _mm256_unpacklo_ps(r[2], r[3]);
                let t3 = _mm256_unpackhi_ps(r[2], r[3]);
                let t4 = _mm256_unpacklo_ps(r[4], r[5]);
                let t5 = _mm256_unpackhi_ps(r[4], r[5]);
                let t6 = _mm256_unpacklo_ps(r[6], r[7]);
                let t7 = _mm256_unpackhi_ps(r[6], r[7]);
                let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
                let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
                let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
                let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
                let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
                let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
                let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
                let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
                let rows = [
                    _mm256_permute2f128_ps::<0x20>(u0, u4),
                    _mm256_permute2f128_ps::<0x20>(u1, u5),
                    _mm256_permute2f128_ps::<0x20>(u2, u6),
                    _mm256_permute2f128_ps::<0x20>(u3, u7),
                    _mm256_permute2f128_ps::<0x31>(u0, u4),
                    _mm256_permute2f128_ps::<0x31>(u1, u5),
                    _mm256_permute2f128_ps::<0x31>(u2, u6),
                    _mm256_permute2f128_ps::<0x31>(u3, u7),
                ];
                let width = (nr - col).min(8);
                for (i, row) in rows.iter().enumerate() {
                    let at = 8 * h + i;
                    if at >= mr {
                        break;
                    }
                    let dst = c.add(at * ldc + col);
                    if width == 8 {
                        let v = if accumulate {
                            _mm256_add_ps(*row, _mm256_loadu_ps(dst))
                        } else {
                            *row
                        };
                        _mm256_storeu_ps(dst, v);
                    } else {
                        let mut values = [0f32; 8];
                        _mm256_storeu_ps(values.as_mut_ptr(), *row);
                        for (j, v) in values.iter().take(width).enumerate() {
                            let d = dst.add(j);
                            *d = if accumulate { *d + v } else { *v };
                        }
                    }
                }
            }
        }
    }
}

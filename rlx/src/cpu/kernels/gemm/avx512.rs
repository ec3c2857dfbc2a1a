//! The AVX-512 micro-kernels, over 32-wide panels of B.
//!
//! - Regular, 12 x 32: the tile of `C` in twenty-four 512-bit registers. Per step of `k`,
//!   two loads of B, twelve broadcasts of A and twenty-four fused multiply-adds: enough
//!   independent accumulators to cover the FMA latency on both ports, and fewer loads per
//!   multiply-add than a 6-row tile (measured 6 to 18% faster on the BERT-sized products
//!   of `gemm_bench`, Sapphire Rapids, 2 threads). A B panel stays in L1 and serves every
//!   row panel of A.
//! - Tall, 16 x 32, for products of few rows (a small batch times a weight): the tile's
//!   two 16-column halves one after the other, each in sixteen registers. Each half reads
//!   its own cache line of every panel row, so a panel comes from memory once for all 16
//!   rows, where the regular kernel would stream it for its first 12 rows and stall.
//!
//! Edge tiles store through masks instead of a bounce buffer. A regular tile at most 16
//! columns wide (the last panel of a product whose `n` is not a multiple of 32; every
//! panel of a block product over 16–31 rows of `x`) computes its first half alone.

use super::{ARows, KernelShape, Kernels, MicroKernel, Tile};

/// Rows per call of the regular kernel.
const MR: usize = 12;
/// Rows per call of the tall kernel.
const TALL_MR: usize = 16;
/// Columns per call.
const NR: usize = 32;

/// A 32-wide B panel of 192 rows (24 KiB) stays in L1.
const SHAPE: KernelShape = KernelShape {
    nr: NR,
    kc: 192,
    mr: MR,
    tall_mr: Some(TALL_MR),
};

/// The AVX-512 kernels if this CPU has AVX-512 F and FMA.
pub(crate) fn f32_kernels() -> Option<Kernels<f32>> {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
            return Some(Kernels {
                shape: SHAPE,
                regular: MicroKernel {
                    mr: MR,
                    run: entry,
                    in_place: true,
                    in_place_columns: true,
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
/// As [`super::KernelFn`], and the CPU supports AVX-512 F (checked by [`f32_kernels`]).
#[cfg(target_arch = "x86_64")]
unsafe fn entry(kc: usize, a: ARows<f32>, b: *const f32, tile: Tile<f32>) {
    /// The kernel computing `$rows` rows, for A's layout.
    macro_rules! rows {
        ($rows:expr) => {
            if tile.nr <= 16 {
                columns!($rows, 1)
            } else {
                columns!($rows, 2)
            }
        };
    }
    macro_rules! columns {
        ($rows:expr, $halves:expr) => {
            if a.packed {
                kernel_12x32::<MR, $rows, $halves>(kc, a, b, tile)
            } else if a.k_stride == 1 {
                kernel_12x32::<1, $rows, $halves>(kc, a, b, tile)
            } else {
                kernel_12x32::<0, $rows, $halves>(kc, a, b, tile)
            }
        };
    }
    // SAFETY: `f32_kernels` hands out this entry only after detecting AVX-512 F and FMA;
    // the pointer contract is the caller's. A tile of few rows (a decode step's
    // matrix-vector products) computes only those: the rows a 12-row tile would repeat
    // cost multiply-adds that, at one row, take longer than streaming B from memory.
    unsafe {
        match tile.mr {
            1 => rows!(1),
            2 => rows!(2),
            3 | 4 => rows!(4),
            _ => rows!(MR),
        }
    }
}

/// # Safety
/// As [`super::KernelFn`], and the CPU supports AVX-512 F (checked by [`f32_kernels`]).
#[cfg(target_arch = "x86_64")]
unsafe fn tall_entry(kc: usize, a: ARows<f32>, b: *const f32, tile: Tile<f32>) {
    debug_assert_eq!(
        a.k_stride, TALL_MR,
        "the tall kernel reads packed panels only"
    );
    // SAFETY: as `entry`.
    unsafe { kernel_16x32(kc, a.ptr, b, tile) }
}

/// The store mask of the 16 columns from `from` in a tile `nr` wide.
#[cfg(target_arch = "x86_64")]
fn lanes(nr: usize, from: usize) -> u16 {
    let n = nr.saturating_sub(from).min(16);
    ((1u32 << n) - 1) as u16
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
/// `KS` is A's `k_stride`: `MR` for a packed panel, 1 for rows read in place, 0 for adjacent
/// rows read in place at the run-time stride `a.k_stride` (a column-major A). `ROWS` (at
/// most `MR`, at least `tile.mr`) are the rows computed; `HALVES` the 16-column halves
/// computed (1 when `tile.nr` is at most 16, else 2).
unsafe fn kernel_12x32<const KS: usize, const ROWS: usize, const HALVES: usize>(
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
    // SAFETY: `b` holds kc*32 floats and A kc values in each of its first mr rows
    // (KernelFn contract; rows past mr read row mr - 1 again, or the panel's zero padding),
    // so every load below is in bounds; stores stay inside the mr x nr tile of `c`: rows
    // below `mr` only, and columns masked to `nr`.
    unsafe {
        debug_assert!(mr <= ROWS && ROWS <= MR);
        debug_assert!(HALVES == 2 || (HALVES == 1 && nr <= 16));
        let rows: [*const f32; ROWS] = a.row_starts(mr, KS == MR);
        // A's stride along k: a constant the offsets fold into, or the run-time one.
        let ks = if KS == 0 { a.k_stride } else { KS };
        let mut off = 0;
        for i in 0..mr {
            let row = c.add(i * ldc).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(row);
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(124.min(4 * nr - 4)));
        }
        let mut acc = [[_mm512_setzero_ps(); HALVES]; ROWS];
        // B comes from memory when few rows share it: fetch far enough ahead to cover a
        // memory latency at the pace of this many rows.
        let ahead = if ROWS >= 8 { 8 } else { 32 };
        let mut bp = b;
        macro_rules! step {
            ($p:expr) => {{
                let mut bs = [_mm512_setzero_ps(); HALVES];
                for (h, b) in bs.iter_mut().enumerate() {
                    *b = _mm512_loadu_ps(bp.add($p * NR + 16 * h));
                }
                for (i, row) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*rows[i].add(off + $p * ks));
                    for (acc, b) in row.iter_mut().zip(&bs) {
                        *acc = _mm512_fmadd_ps(av, *b, *acc);
                    }
                }
            }};
        }
        for _ in 0..kc / 4 {
            if KS != 1 {
                _mm_prefetch::<_MM_HINT_T0>(rows[0].wrapping_add(off + 8 * ks).cast());
            }
            // B streams from memory when few rows share it (small batches): fetch the
            // lines needed `ahead` steps from now.
            for line in (0..8).filter(|line| HALVES == 2 || line % 2 == 0) {
                _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(ahead * NR + line * 16).cast());
            }
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            off += 4 * ks;
            bp = bp.add(4 * NR);
        }
        for _ in 0..kc % 4 {
            step!(0);
            off += ks;
            bp = bp.add(NR);
        }
        // Column masks of the 16-wide halves of the tile.
        for (i, row) in acc.iter().enumerate().take(mr) {
            for (h, half) in row.iter().enumerate() {
                let (mask, dst) = (lanes(nr, 16 * h), c.add(i * ldc).wrapping_add(16 * h));
                let mut value = *half;
                if accumulate {
                    value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, dst));
                }
                _mm512_mask_storeu_ps(dst, mask, value);
            }
        }
    }
}

/// How many steps of `k` ahead the tall kernel fetches B: about a memory latency of work.
const TALL_PREFETCH_STEPS: usize = 24;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn kernel_16x32(kc: usize, a: *const f32, b: *const f32, tile: Tile<f32>) {
    use std::arch::x86_64::*;
    let Tile {
        c,
        ldc,
        mr,
        nr,
        accumulate,
    } = tile;
    // SAFETY: `a` holds kc*16 and `b` kc*32 floats (KernelFn contract), so every load below
    // is in bounds (prefetches may point past them, which is harmless); stores stay inside
    // the mr x nr tile of `c`: rows below `mr` only, and columns masked to `nr`.
    unsafe {
        for half in 0..2 {
            let col = half * 16;
            if col >= nr {
                break;
            }
            let mut acc = [_mm512_setzero_ps(); TALL_MR];
            let (mut ap, mut bp) = (a, b.add(col));
            macro_rules! step {
                ($p:expr) => {{
                    let bv = _mm512_loadu_ps(bp.add($p * NR));
                    for (i, row) in acc.iter_mut().enumerate() {
                        let av = _mm512_set1_ps(*ap.add($p * TALL_MR + i));
                        *row = _mm512_fmadd_ps(av, bv, *row);
                    }
                }};
            }
            for _ in 0..kc / 4 {
                for line in 0..4 {
                    let ahead = bp.wrapping_add((TALL_PREFETCH_STEPS + line) * NR);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                    if half == 0 {
                        // The other half's line of the same row, for the second pass: to
                        // L2, so it does not push A out of L1.
                        _mm_prefetch::<_MM_HINT_T1>(ahead.wrapping_add(16).cast());
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
            let mask = lanes(nr, col);
            for (i, row) in acc.iter().enumerate().take(mr) {
                let dst = c.add(i * ldc + col);
                let mut v = *row;
                if accumulate {
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, dst));
                }
                _mm512_mask_storeu_ps(dst, mask, v);
            }
        }
    }
}

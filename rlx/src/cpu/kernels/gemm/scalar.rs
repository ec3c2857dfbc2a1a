//! Portable micro-kernel: plain loops the compiler vectorizes as it can.

use super::{ARows, KernelShape, Kernels, MicroKernel, Tile};
use crate::cpu::kernels::numeric::Real;

/// Rows per call.
const MR: usize = 6;
/// Columns per call.
const NR: usize = 16;

/// The portable kernel for `E` (no tall one: without vector registers it would gain
/// nothing).
pub(crate) fn kernels<E: Real>() -> Kernels<E> {
    Kernels {
        shape: KernelShape {
            nr: NR,
            kc: 256,
            mr: MR,
            tall_mr: None,
        },
        regular: MicroKernel {
            mr: MR,
            run: run::<E>,
            in_place: true,
            in_place_columns: true,
        },
        tall: None,
    }
}

/// See [`super::KernelFn`].
///
/// # Safety
/// As [`super::KernelFn`].
unsafe fn run<E: Real>(kc: usize, a: ARows<E>, b: *const E, tile: Tile<E>) {
    let Tile {
        c,
        ldc,
        mr,
        nr,
        accumulate,
    } = tile;
    // SAFETY: the caller guarantees `b` holds kc*NR values and that A has kc values in each
    // of its first `mr` rows (rows past `mr` read row `mr - 1` again).
    let b = unsafe { std::slice::from_raw_parts(b, kc * NR) };
    let rows: [*const E; MR] = a.row_starts(mr, false);
    let mut acc = [[E::ZERO; NR]; MR];
    for p in 0..kc {
        let bp = &b[p * NR..(p + 1) * NR];
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: row i (or mr - 1) has kc values at stride `k_stride`.
            let av = unsafe { *rows[i].add(p * a.k_stride) };
            for (x, bv) in row.iter_mut().zip(bp) {
                *x += av * *bv;
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(mr) {
        for (j, v) in row.iter().enumerate().take(nr) {
            // SAFETY: (i, j) is inside the mr x nr tile the caller owns.
            unsafe {
                let dst = c.add(i * ldc + j);
                *dst = if accumulate { *dst + *v } else { *v };
            }
        }
    }
}

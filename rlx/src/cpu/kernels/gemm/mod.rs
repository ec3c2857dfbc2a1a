//! General matrix multiply `C = A·B` (row-major `C`, any strides for `A` and `B`).
//!
//! BLIS-style: `B` is packed into `KC x NR` panels, `A` into `MR x KC` panels, and a
//! register-blocked micro-kernel multiplies one panel pair into an `MR x NR` tile of `C`.
//! Transposed operands cost nothing: packing reads through the strides. `f16`/`bf16`
//! operands are widened to `f32` while packing. Work is split over (row block, column range)
//! tasks on rayon; each worker owns one packed-`A` slot of the scratch, so a run allocates
//! nothing.

mod avx2;
mod scalar;

use rayon::prelude::*;

use super::layout::parallel;
use super::numeric::{FloatStore, Real};

/// Rows of `A` per micro-kernel call.
pub(crate) const MR: usize = 6;
/// Columns of `B` per micro-kernel call.
pub(crate) const NR: usize = 16;
const KC: usize = 256;
const MC: usize = 120;
const NC: usize = 3072;

/// The block of `C` one micro-kernel call writes: the `mr x nr` corner of the tile at `c`
/// (row stride `ldc`), added to when `accumulate`.
#[derive(Clone, Copy)]
pub(crate) struct Tile<E> {
    pub c: *mut E,
    pub ldc: usize,
    pub mr: usize,
    pub nr: usize,
    pub accumulate: bool,
}

/// Multiplies one packed `MR x kc` panel of A by one packed `kc x NR` panel of B into `tile`.
///
/// # Safety
/// `a` holds `kc * MR` and `b` `kc * NR` readable values; `tile.c` is valid for writes of
/// an `mr x nr` block with row stride `ldc`; `mr <= MR`, `nr <= NR`.
pub(crate) type MicroKernel<E> = unsafe fn(kc: usize, a: *const E, b: *const E, tile: Tile<E>);

/// The accumulator types GEMM computes in.
pub(crate) trait GemmAcc: Real + bytemuck::Pod + Default {
    /// The fastest micro-kernel this CPU runs.
    fn micro_kernel() -> MicroKernel<Self>;
}

impl GemmAcc for f32 {
    fn micro_kernel() -> MicroKernel<f32> {
        avx2::f32_kernel().unwrap_or(scalar::kernel::<f32>)
    }
}

impl GemmAcc for f64 {
    fn micro_kernel() -> MicroKernel<f64> {
        scalar::kernel::<f64>
    }
}

/// Sizes and element strides of one product: `A` is `m x k`, `B` is `k x n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GemmDims {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a_rs: usize,
    pub a_cs: usize,
    pub b_rs: usize,
    pub b_cs: usize,
}

/// How the work of one product is split, fixed when the plan is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GemmPlan {
    pub dims: GemmDims,
    kc: usize,
    nc: usize,
    /// Column ranges per row block, so small-`m` products still use every worker.
    n_splits: usize,
    /// Workers, each with its own packed-`A` slot.
    pub workers: usize,
}

impl GemmPlan {
    pub(crate) fn new(dims: GemmDims, threads: usize) -> GemmPlan {
        let kc = dims.k.clamp(1, KC);
        let nc = dims.n.div_ceil(NR).clamp(1, NC / NR) * NR;
        let flops = dims.m * dims.n * dims.k;
        let workers = if flops < 1 << 16 { 1 } else { threads.max(1) };
        let m_blocks = dims.m.div_ceil(MC).max(1);
        let n_splits = workers.div_ceil(m_blocks).max(1);
        GemmPlan {
            dims,
            kc,
            nc,
            n_splits,
            workers,
        }
    }

    fn packed_a_len(&self) -> usize {
        MC * self.kc
    }

    fn packed_b_len(&self) -> usize {
        self.nc * self.kc
    }

    /// Scratch elements of the accumulator type the product needs.
    pub(crate) fn scratch_len(&self) -> usize {
        self.packed_b_len() + self.workers * self.packed_a_len()
    }
}

/// A pointer to `C` shared by tasks that write disjoint tiles.
#[derive(Clone, Copy)]
struct TilePtr<E>(*mut E);
// SAFETY: tasks write disjoint tiles of C (distinct row blocks or column ranges), and the
// pointer outlives the parallel section, which joins before `gemm` returns.
unsafe impl<E> Send for TilePtr<E> {}
// SAFETY: as above; shared access only hands out disjoint tiles.
unsafe impl<E> Sync for TilePtr<E> {}

/// Packs rows `p0..p0+kc` and columns `j0..j0+nc` of B into `NR`-wide panels (zero-padded).
fn pack_b<S: FloatStore>(
    d: &GemmDims,
    b: &[S],
    p0: usize,
    kc: usize,
    j0: usize,
    nc: usize,
    out: &mut [S::Acc],
) {
    let panels = nc.div_ceil(NR);
    let work = |(jp, panel): (usize, &mut [S::Acc])| {
        for p in 0..kc {
            let row = &mut panel[p * NR..(p + 1) * NR];
            for (jj, slot) in row.iter_mut().enumerate() {
                let j = j0 + jp * NR + jj;
                *slot = if j < j0 + nc {
                    b[(p0 + p) * d.b_rs + j * d.b_cs].load()
                } else {
                    <S::Acc as Real>::ZERO
                };
            }
        }
    };
    let out = &mut out[..panels * kc * NR];
    if parallel(kc * nc) {
        out.par_chunks_mut(kc * NR).enumerate().for_each(work);
    } else {
        out.chunks_mut(kc * NR).enumerate().for_each(work);
    }
}

/// Packs rows `i0..i0+mc` and columns `p0..p0+kc` of A into `MR`-tall panels.
fn pack_a<S: FloatStore>(
    d: &GemmDims,
    a: &[S],
    i0: usize,
    mc: usize,
    p0: usize,
    kc: usize,
    out: &mut [S::Acc],
) {
    for (ip, panel) in out[..mc.div_ceil(MR) * MR * kc]
        .chunks_mut(MR * kc)
        .enumerate()
    {
        for p in 0..kc {
            for ii in 0..MR {
                let i = i0 + ip * MR + ii;
                panel[p * MR + ii] = if i < i0 + mc {
                    a[i * d.a_rs + (p0 + p) * d.a_cs].load()
                } else {
                    <S::Acc as Real>::ZERO
                };
            }
        }
    }
}

/// `c = a · b` for `c` row-major `m x n` (row stride `n`).
///
/// `a` and `b` start at their first element; `scratch` has `plan.scratch_len()` elements.
pub(crate) fn gemm<S: FloatStore>(
    plan: &GemmPlan,
    kernel: MicroKernel<S::Acc>,
    a: &[S],
    b: &[S],
    c: &mut [S::Acc],
    scratch: &mut [S::Acc],
) where
    S::Acc: GemmAcc,
{
    let d = plan.dims;
    if d.m == 0 || d.n == 0 {
        return;
    }
    if d.k == 0 {
        c[..d.m * d.n].fill(<S::Acc as Real>::ZERO);
        return;
    }
    let (packed_b, packed_a) = scratch.split_at_mut(plan.packed_b_len());
    let c_ptr = TilePtr(c.as_mut_ptr());
    let m_blocks = d.m.div_ceil(MC);
    let tasks = m_blocks * plan.n_splits;
    for j0 in (0..d.n).step_by(plan.nc) {
        let nc = plan.nc.min(d.n - j0);
        let panels = nc.div_ceil(NR);
        let panels_per_split = panels.div_ceil(plan.n_splits);
        for p0 in (0..d.k).step_by(plan.kc) {
            let kc = plan.kc.min(d.k - p0);
            let accumulate = p0 > 0;
            pack_b(&d, b, p0, kc, j0, nc, packed_b);
            let packed_b = &*packed_b;
            let run_worker = |(w, slot): (usize, &mut [S::Acc])| {
                for task in (w..tasks).step_by(plan.workers) {
                    let (block, split) = (task / plan.n_splits, task % plan.n_splits);
                    let i0 = block * MC;
                    let mc = MC.min(d.m - i0);
                    let first_panel = split * panels_per_split;
                    let last_panel = panels.min(first_panel + panels_per_split);
                    if first_panel >= last_panel {
                        continue;
                    }
                    pack_a(&d, a, i0, mc, p0, kc, slot);
                    for jp in first_panel..last_panel {
                        let nr = NR.min(nc - jp * NR);
                        let bp = &packed_b[jp * kc * NR..];
                        for ip in 0..mc.div_ceil(MR) {
                            let mr = MR.min(mc - ip * MR);
                            let ap = &slot[ip * kc * MR..];
                            let offset = (i0 + ip * MR) * d.n + j0 + jp * NR;
                            let c = c_ptr;
                            // SAFETY: the panels hold kc*MR and kc*NR packed values; the
                            // tile at `offset` lies inside the m x n output (mr, nr are
                            // clipped to its edge); no other task writes this tile.
                            unsafe {
                                let tile = Tile {
                                    c: c.0.add(offset),
                                    ldc: d.n,
                                    mr,
                                    nr,
                                    accumulate,
                                };
                                kernel(kc, ap.as_ptr(), bp.as_ptr(), tile)
                            };
                        }
                    }
                }
            };
            let slots = &mut packed_a[..plan.workers * plan.packed_a_len()];
            if plan.workers > 1 {
                slots
                    .par_chunks_mut(plan.packed_a_len())
                    .enumerate()
                    .for_each(run_worker);
            } else {
                run_worker((0, slots));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(d: &GemmDims, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; d.m * d.n];
        for i in 0..d.m {
            for j in 0..d.n {
                for p in 0..d.k {
                    c[i * d.n + j] += a[i * d.a_rs + p * d.a_cs] * b[p * d.b_rs + j * d.b_cs];
                }
            }
        }
        c
    }

    fn check(m: usize, n: usize, k: usize, ta: bool, tb: bool, threads: usize) {
        let d = GemmDims {
            m,
            n,
            k,
            a_rs: if ta { 1 } else { k },
            a_cs: if ta { m } else { 1 },
            b_rs: if tb { 1 } else { n },
            b_cs: if tb { k } else { 1 },
        };
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 7 % 13) as f64) - 6.0).collect();
        let b: Vec<f64> = (0..k * n)
            .map(|i| ((i * 5 % 11) as f64) * 0.5 - 2.0)
            .collect();
        let expected = naive(&d, &a, &b);
        let plan = GemmPlan::new(d, threads);
        let a32: Vec<f32> = a.iter().map(|v| *v as f32).collect();
        let b32: Vec<f32> = b.iter().map(|v| *v as f32).collect();
        let mut c = vec![f32::NAN; m * n];
        let mut scratch = vec![0f32; plan.scratch_len()];
        gemm(&plan, f32::micro_kernel(), &a32, &b32, &mut c, &mut scratch);
        for (x, y) in c.iter().zip(&expected) {
            assert!(
                (f64::from(*x) - y).abs() < 1e-3 * (1.0 + y.abs()),
                "{m}x{n}x{k} {x} vs {y}"
            );
        }
        let mut c = vec![f64::NAN; m * n];
        let mut scratch = vec![0f64; plan.scratch_len()];
        gemm(&plan, f64::micro_kernel(), &a, &b, &mut c, &mut scratch);
        assert_eq!(c, expected);
        let mut c = vec![f32::NAN; m * n];
        let mut scratch = vec![0f32; plan.scratch_len()];
        gemm(
            &plan,
            scalar::kernel::<f32>,
            &a32,
            &b32,
            &mut c,
            &mut scratch,
        );
        for (x, y) in c.iter().zip(&expected) {
            assert!((f64::from(*x) - y).abs() < 1e-3 * (1.0 + y.abs()));
        }
    }

    #[test]
    fn matches_naive_on_edges_and_blocks() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (6, 16, 3),
            (7, 17, 5),
            (13, 33, 300),
            (121, 40, 513),
            (250, 3100, 20),
            (3, 5, 0),
        ] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                check(m, n, k, ta, tb, 2);
            }
        }
        check(130, 70, 40, false, true, 1);
    }
}

//! General matrix multiply `C = A·B` (row-major `C`, any strides for `A` and `B`).
//!
//! BLIS-style: `B` is packed into `kc x nr` panels, `A` into `MR x kc` panels, and a
//! register-blocked micro-kernel multiplies one panel pair into an `MR x nr` tile of `C`.
//! The kernel is chosen at run time for the instruction set in use (AVX-512 6x32, AVX2
//! 6x16, or portable), and `nr` and `kc` come with it: plans and packed weights are made
//! for that kernel.
//! Transposed operands cost nothing: packing reads through the strides. `f16`/`bf16`
//! operands are widened to `f32` while packing. Work is split over (row block, column range)
//! tasks on rayon; each worker owns one packed-`A` slot of the scratch, so a run allocates
//! nothing.

mod avx2;
mod avx512;
mod batch;
mod epilogue;
mod scalar;

use rayon::prelude::*;

pub(crate) use batch::{GemmBatch, gemm_batch};
pub(crate) use epilogue::{Epilogue, RowEpilogue};

use super::layout::{SharedMut, parallel};
use super::numeric::{FloatStore, Real};
use super::simd::{Isa, isa};
use crate::ir::DType;

/// Rows of `A` per micro-kernel call (every kernel).
pub(crate) const MR: usize = 6;
/// Rows of `A` packed per block, at most (a 256 x kc block of A stays in L2).
const MC: usize = 256;
/// Columns of `B` per block, at most.
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

/// Multiplies one packed `MR x kc` panel of A by one packed `kc x nr` panel of B into `tile`.
///
/// # Safety
/// `a` holds `kc * MR` and `b` `kc * nr` readable values (`nr` of the kernel's shape);
/// `tile.c` is valid for writes of an `mr x nr` block with row stride `ldc`; `mr <= MR`,
/// `tile.nr` at most the kernel's `nr`.
pub(crate) type KernelFn<E> = unsafe fn(kc: usize, a: *const E, b: *const E, tile: Tile<E>);

/// The blocking a micro-kernel is written for: its panel width and the depth of a block
/// of `k` (so that one B panel stays in L1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelShape {
    pub nr: usize,
    pub kc: usize,
}

/// A micro-kernel and its shape.
#[derive(Clone, Copy)]
pub(crate) struct MicroKernel<E> {
    pub shape: KernelShape,
    pub run: KernelFn<E>,
}

/// The accumulator types GEMM computes in.
pub(crate) trait GemmAcc: Real + bytemuck::Pod + Default + FloatStore<Acc = Self> {
    /// The fastest micro-kernel of the instruction set in use ([`isa`]).
    fn micro_kernel() -> MicroKernel<Self>;
}

impl GemmAcc for f32 {
    fn micro_kernel() -> MicroKernel<f32> {
        // Chosen once: every product of the process uses the kernel its plans were made for.
        static CHOSEN: std::sync::OnceLock<MicroKernel<f32>> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let vector = match isa() {
                Isa::Avx512 => avx512::f32_kernel(),
                Isa::Avx2 => avx2::f32_kernel(),
                Isa::Baseline => None,
            };
            vector.unwrap_or_else(scalar::kernel::<f32>)
        })
    }
}

impl GemmAcc for f64 {
    fn micro_kernel() -> MicroKernel<f64> {
        scalar::kernel::<f64>()
    }
}

/// Runs `f` on an output block in the accumulator type: `dst` itself when the storage is the
/// accumulator type (`wide` is `None`), else `wide`, narrowed into `dst` afterwards.
pub(crate) fn in_accumulator<S: FloatStore>(
    dst: &mut [S],
    wide: Option<&mut [S::Acc]>,
    f: impl FnOnce(&mut [S::Acc]),
) where
    S::Acc: GemmAcc,
{
    match wide {
        None => f(bytemuck::cast_slice_mut(dst)),
        Some(wide) => {
            let wide = &mut wide[..dst.len()];
            f(wide);
            for (d, v) in dst.iter_mut().zip(wide.iter()) {
                *d = S::store(*v);
            }
        }
    }
}

/// The shape of the micro-kernel products accumulated in `acc` (`f32` or `f64`) use.
pub(crate) fn kernel_shape(acc: DType) -> KernelShape {
    if acc == DType::F64 {
        f64::micro_kernel().shape
    } else {
        f32::micro_kernel().shape
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

/// How the rows or columns of `C` are split between workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    Rows,
    Columns,
}

/// How the work of one product is divided, fixed when the plan is made.
///
/// Each worker computes a disjoint slice of `C` (a range of columns when `N` is the longer
/// side, of rows otherwise) as an independent single-threaded product with its own packing
/// buffers, so workers share nothing but the read-only operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GemmPlan {
    pub dims: GemmDims,
    /// The shape of the kernel the product runs with.
    pub shape: KernelShape,
    kc: usize,
    /// Rows of A per packed block: a worker's rows in equal blocks of at most `MC`, so no
    /// thin last block re-reads all of B for a few rows.
    mc: usize,
    nc: usize,
    split: Split,
    /// Rows or columns per worker (a multiple of `MR` or `nr`).
    chunk: usize,
    /// Workers, each with its own scratch slot.
    pub workers: usize,
    /// `C += A·B` instead of `C = A·B`.
    adds: bool,
}

impl GemmPlan {
    pub(crate) fn new(dims: GemmDims, threads: usize, shape: KernelShape) -> GemmPlan {
        let nr = shape.nr;
        let kc = dims.k.clamp(1, shape.kc);
        let flops = dims.m * dims.n * dims.k;
        let wanted = if flops < 1 << 18 { 1 } else { threads.max(1) };
        // Split the longer side of C into equal ranges: each worker then re-packs only the
        // operand along the shorter side, a small fraction of its work.
        let (split, unit, len) = if dims.n.div_ceil(nr) * nr >= dims.m {
            (Split::Columns, nr, dims.n)
        } else {
            (Split::Rows, MR, dims.m)
        };
        let units = len.div_ceil(unit).max(1);
        let workers = wanted.min(units);
        let chunk = units.div_ceil(workers) * unit;
        let workers = len.div_ceil(chunk).max(1);
        let cols = if split == Split::Columns {
            chunk.min(dims.n)
        } else {
            dims.n
        };
        let nc = cols.div_ceil(nr).clamp(1, NC / nr) * nr;
        let rows = if split == Split::Rows {
            chunk.min(dims.m)
        } else {
            dims.m
        };
        let row_blocks = rows.div_ceil(MC).max(1);
        let mc = rows.div_ceil(row_blocks).div_ceil(MR).max(1) * MR;
        GemmPlan {
            dims,
            shape,
            kc,
            mc,
            nc,
            split,
            chunk,
            workers,
            adds: false,
        }
    }

    /// The same product added to what `C` holds (`C += A·B`).
    pub(crate) fn adding(self) -> GemmPlan {
        GemmPlan { adds: true, ..self }
    }

    fn slot_len(&self) -> usize {
        self.nc * self.kc + self.mc * self.kc
    }

    /// Scratch elements of the accumulator type the product needs.
    pub(crate) fn scratch_len(&self) -> usize {
        self.workers * self.slot_len()
    }
}

/// Packs rows `p0..p0+kc` and columns `j0..j0+nc` of B into `nr`-wide panels, zero-padded.
/// Walks B row by row (or column by column when transposed) to stay on few pages.
#[allow(clippy::too_many_arguments)]
fn pack_b<S: FloatStore>(
    d: &GemmDims,
    b: &[S],
    p0: usize,
    kc: usize,
    j0: usize,
    nc: usize,
    nr: usize,
    out: &mut [S::Acc],
) {
    let panels = nc.div_ceil(nr);
    let zero = <S::Acc as Real>::ZERO;
    if d.b_cs == 1 {
        for p in 0..kc {
            let row = &b[(p0 + p) * d.b_rs + j0..][..nc];
            for jp in 0..panels {
                let dst = &mut out[jp * kc * nr + p * nr..][..nr];
                let src = &row[jp * nr..row.len().min((jp + 1) * nr)];
                for (o, v) in dst.iter_mut().zip(src) {
                    *o = v.load();
                }
                dst[src.len()..].fill(zero);
            }
        }
    } else {
        for jp in 0..panels {
            let panel = &mut out[jp * kc * nr..][..kc * nr];
            for jj in 0..nr {
                let j = j0 + jp * nr + jj;
                if j >= j0 + nc {
                    (0..kc).for_each(|p| panel[p * nr + jj] = zero);
                    continue;
                }
                for p in 0..kc {
                    panel[p * nr + jj] = b[(p0 + p) * d.b_rs + j * d.b_cs].load();
                }
            }
        }
    }
}

/// Elements of a whole `k x n` B packed once by [`pack_b_whole`] for kernels of `shape`.
pub(crate) fn packed_b_len(k: usize, n: usize, shape: KernelShape) -> usize {
    k * n.div_ceil(shape.nr) * shape.nr
}

/// Packs all of B in the order [`gemm`] reads it with kernels of `shape` (blocks of `kc`
/// rows, each a row of `nr`-wide panels), so a weight is packed once when it is bound
/// instead of on every run.
pub(crate) fn pack_b_whole<S: FloatStore>(
    d: &GemmDims,
    b: &[S],
    shape: KernelShape,
    out: &mut [S::Acc],
) {
    let panels = d.n.div_ceil(shape.nr);
    for p0 in (0..d.k).step_by(shape.kc) {
        let kc = shape.kc.min(d.k - p0);
        pack_b(
            d,
            b,
            p0,
            kc,
            0,
            d.n,
            shape.nr,
            &mut out[p0 * panels * shape.nr..],
        );
    }
}

/// Packs rows `i0..i0+mc` and columns `p0..p0+kc` of A into `MR`-tall panels, zero-padded.
///
/// The panel is written in order (one `MR`-long column at a time) while reading `MR` rows
/// side by side, so stores stream and loads come from a few sequential lines.
fn pack_a<S: FloatStore>(
    d: &GemmDims,
    a: &[S],
    i0: usize,
    mc: usize,
    p0: usize,
    kc: usize,
    out: &mut [S::Acc],
) {
    let zero = <S::Acc as Real>::ZERO;
    for (ip, panel) in out[..mc.div_ceil(MR) * MR * kc]
        .chunks_exact_mut(MR * kc)
        .enumerate()
    {
        let first = i0 + ip * MR;
        let rows = MR.min(i0 + mc - first);
        if d.a_cs == 1 && rows == MR {
            let r: [&[S]; MR] = std::array::from_fn(|ii| &a[(first + ii) * d.a_rs + p0..][..kc]);
            for (p, column) in panel.chunks_exact_mut(MR).enumerate() {
                for (o, row) in column.iter_mut().zip(&r) {
                    *o = row[p].load();
                }
            }
            continue;
        }
        for (p, column) in panel.chunks_exact_mut(MR).enumerate() {
            for (ii, o) in column.iter_mut().enumerate() {
                *o = if ii < rows {
                    a[(first + ii) * d.a_rs + (p0 + p) * d.a_cs].load()
                } else {
                    zero
                };
            }
        }
    }
}

/// One worker's product: `C[rows, cols] = A[rows, :] · B[:, cols]` on the calling thread.
#[allow(clippy::too_many_arguments)]
fn serial<SA: FloatStore, SB: FloatStore<Acc = SA::Acc>>(
    plan: &GemmPlan,
    kernel: MicroKernel<SA::Acc>,
    a: &[SA],
    b: &[SB],
    c: SharedMut<SA::Acc>,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
    slot: &mut [SA::Acc],
    prepacked_b: Option<&[SA::Acc]>,
    epilogue: Option<&dyn RowEpilogue<SA::Acc>>,
) where
    SA::Acc: GemmAcc,
{
    let d = plan.dims;
    let nr = plan.shape.nr;
    let panels = d.n.div_ceil(nr);
    let (b_slot, packed_a) = slot.split_at_mut(plan.nc * plan.kc);
    for j0 in cols.clone().step_by(plan.nc) {
        let nc = plan.nc.min(cols.end - j0);
        for p0 in (0..d.k).step_by(plan.kc) {
            let kc = plan.kc.min(d.k - p0);
            let accumulate = p0 > 0 || plan.adds;
            // `j0` is a multiple of nr, so this block's panels are contiguous in the
            // whole-B packing.
            let packed_b: &[SA::Acc] = match prepacked_b {
                Some(all) => &all[p0 * panels * nr + (j0 / nr) * kc * nr..],
                None => {
                    pack_b(&d, b, p0, kc, j0, nc, nr, b_slot);
                    b_slot
                }
            };
            for i0 in rows.clone().step_by(plan.mc) {
                let mc = plan.mc.min(rows.end - i0);
                pack_a(&d, a, i0, mc, p0, kc, packed_a);
                for jp in 0..nc.div_ceil(nr) {
                    let tile_nr = nr.min(nc - jp * nr);
                    let bp = &packed_b[jp * kc * nr..];
                    for ip in 0..mc.div_ceil(MR) {
                        let mr = MR.min(mc - ip * MR);
                        let ap = &packed_a[ip * kc * MR..];
                        let offset = (i0 + ip * MR) * d.n + j0 + jp * nr;
                        // SAFETY: the panels hold kc*MR and kc*nr packed values; the tile
                        // at `offset` lies inside the m x n output (mr and nr are clipped to
                        // this worker's rows and columns), which no other worker writes.
                        unsafe {
                            let tile = Tile {
                                c: c.ptr().add(offset),
                                ldc: d.n,
                                mr,
                                nr: tile_nr,
                                accumulate,
                            };
                            (kernel.run)(kc, ap.as_ptr(), bp.as_ptr(), tile)
                        };
                    }
                }
                // The last block of k has landed: these rows of C are final and still in
                // cache.
                if let Some(epilogue) = epilogue.filter(|_| p0 + kc == d.k) {
                    for i in i0..i0 + mc {
                        // SAFETY: row i, columns j0..j0+nc lie inside the m x n output and
                        // belong to this worker alone; no tile write is pending.
                        let values = unsafe {
                            std::slice::from_raw_parts_mut(c.ptr().add(i * d.n + j0), nc)
                        };
                        epilogue.apply(i, j0, values);
                    }
                }
            }
        }
    }
}

/// `c = a · b` for `c` row-major `m x n` (row stride `n`).
///
/// `a` and `b` start at their first element and may have different storage types with one
/// accumulator type; `scratch` has `plan.scratch_len()` elements. `prepacked_b`, when
/// given, is all of `b` packed by [`pack_b_whole`] and replaces packing `b` here.
/// `epilogue`, when given, runs on each row block of `c` as soon as it is final.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<SA: FloatStore, SB: FloatStore<Acc = SA::Acc>>(
    plan: &GemmPlan,
    kernel: MicroKernel<SA::Acc>,
    a: &[SA],
    b: &[SB],
    c: &mut [SA::Acc],
    scratch: &mut [SA::Acc],
    prepacked_b: Option<&[SA::Acc]>,
    epilogue: Option<&dyn RowEpilogue<SA::Acc>>,
) where
    SA::Acc: GemmAcc,
{
    let d = plan.dims;
    if d.m == 0 || d.n == 0 {
        return;
    }
    if d.k == 0 {
        if !plan.adds {
            c[..d.m * d.n].fill(<SA::Acc as Real>::ZERO);
        }
        if let Some(epilogue) = epilogue {
            for (i, row) in c[..d.m * d.n].chunks_exact_mut(d.n).enumerate() {
                epilogue.apply(i, 0, row);
            }
        }
        return;
    }
    assert!(c.len() >= d.m * d.n, "C is too small for the product");
    assert_eq!(
        kernel.shape, plan.shape,
        "the plan was made for another kernel"
    );
    // Workers write disjoint row or column ranges of C; the parallel section joins before
    // `gemm` returns.
    let shared = SharedMut::new(c);
    let work = |(w, slot): (usize, &mut [SA::Acc])| {
        let (rows, cols) = match plan.split {
            Split::Rows => (w * plan.chunk..d.m.min((w + 1) * plan.chunk), 0..d.n),
            Split::Columns => (0..d.m, w * plan.chunk..d.n.min((w + 1) * plan.chunk)),
        };
        if !rows.is_empty() && !cols.is_empty() {
            serial(
                plan,
                kernel,
                a,
                b,
                shared,
                rows,
                cols,
                slot,
                prepacked_b,
                epilogue,
            );
        }
    };
    let slots = &mut scratch[..plan.scratch_len()];
    if plan.workers > 1 && parallel(d.m * d.n * d.k) {
        slots
            .par_chunks_mut(plan.slot_len())
            .enumerate()
            .for_each(work);
    } else {
        slots.chunks_mut(plan.slot_len()).enumerate().for_each(work);
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
        let a32: Vec<f32> = a.iter().map(|v| *v as f32).collect();
        let b32: Vec<f32> = b.iter().map(|v| *v as f32).collect();
        // Every f32 kernel this CPU can run, each with its own plan and packing.
        let kernels = [
            Some(scalar::kernel::<f32>()),
            avx2::f32_kernel(),
            avx512::f32_kernel(),
        ];
        for kernel in kernels.into_iter().flatten() {
            let plan = GemmPlan::new(d, threads, kernel.shape);
            let mut scratch = vec![0f32; plan.scratch_len()];
            let mut packed = vec![f32::NAN; packed_b_len(k, n, kernel.shape)];
            pack_b_whole(&d, &b32, kernel.shape, &mut packed);
            for prepacked in [None, Some(packed.as_slice())] {
                let mut c = vec![f32::NAN; m * n];
                gemm(
                    &plan,
                    kernel,
                    &a32,
                    &b32,
                    &mut c,
                    &mut scratch,
                    prepacked,
                    None,
                );
                for (x, y) in c.iter().zip(&expected) {
                    assert!(
                        (f64::from(*x) - y).abs() < 1e-3 * (1.0 + y.abs()),
                        "{m}x{n}x{k} nr {} {x} vs {y}",
                        kernel.shape.nr
                    );
                }
            }
        }
        let kernel = f64::micro_kernel();
        let plan = GemmPlan::new(d, threads, kernel.shape);
        let mut scratch = vec![0f64; plan.scratch_len()];
        let mut packed = vec![f64::NAN; packed_b_len(k, n, kernel.shape)];
        pack_b_whole(&d, &b, kernel.shape, &mut packed);
        for prepacked in [None, Some(packed.as_slice())] {
            let mut c = vec![f64::NAN; m * n];
            gemm(&plan, kernel, &a, &b, &mut c, &mut scratch, prepacked, None);
            assert_eq!(c, expected, "prepacked B: {}", prepacked.is_some());
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
            (9, 40, 200),
            (14, 33, 193),
            (3, 5, 0),
        ] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                check(m, n, k, ta, tb, 2);
            }
        }
        check(130, 70, 40, false, true, 1);
    }
}

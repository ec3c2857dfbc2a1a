//! General matrix multiply `C = A·B` (row-major `C`, any strides for `A` and `B`).
//!
//! BLIS-style: `B` is packed into `kc x nr` panels, `A` into `MR x kc` panels, and a
//! register-blocked micro-kernel multiplies one panel pair into an `MR x nr` tile of `C`.
//! The kernels are chosen at run time for the instruction set in use (AVX-512 12x32 and
//! 16x32, AVX2 6x16, or portable), and `nr` and `kc` come with them: plans and packed
//! weights are made for that family. A family may have a tall kernel beside its regular
//! one; the plan picks the tall one for products with few rows (small batches), where
//! holding every row of `A` in registers lets each value of `B` come from memory once.
//! Transposed operands cost nothing: packing reads through the strides. `f16`/`bf16`
//! operands are widened to `f32` while packing. Work is split over (row block, column range)
//! tasks on the run's workers (`cpu::workers`); each worker owns one packed-`A` slot of the scratch, so a run allocates
//! nothing.

mod avx2;
mod avx512;
mod batch;
mod epilogue;
mod scalar;

pub(crate) use batch::{GemmBatch, gemm_batch};
pub(crate) use epilogue::{Epilogue, RowEpilogue};

use super::layout::{SharedMut, parallel};
use super::numeric::{FloatStore, Real};
use super::simd::{Isa, isa};
use crate::ir::DType;

/// Products with at most this many rows may use a family's tall kernel.
const TALL_MAX_ROWS: usize = 48;
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

/// Where a micro-kernel reads its rows of A: value `(i, p)` (row `i`, step `p` of `k`) at
/// `ptr + i * row_stride + p * k_stride`. A packed panel has `row_stride` 1 and `k_stride`
/// the kernel's rows per call; rows read in place have `k_stride` 1.
#[derive(Clone, Copy)]
pub(crate) struct ARows<E> {
    pub ptr: *const E,
    pub row_stride: usize,
    pub k_stride: usize,
    /// A packed panel (`row_stride` 1, `k_stride` the kernel's rows, zero-padded to them).
    pub packed: bool,
}

impl<E> ARows<E> {
    /// Where each of a kernel's `MR` rows starts, for a tile of `mr` rows. A packed panel's
    /// rows are adjacent (`packed`, a constant in each kernel, so the offsets fold into the
    /// loads); rows read in place past `mr` repeat row `mr - 1`, which exists, and are never
    /// stored. Only addresses are computed here; the kernel's contract covers the reads.
    #[inline(always)]
    pub(crate) fn row_starts<const MR: usize>(&self, mr: usize, packed: bool) -> [*const E; MR] {
        debug_assert!(!packed || (self.row_stride == 1 && self.k_stride >= MR));
        std::array::from_fn(|i| {
            if packed {
                self.ptr.wrapping_add(i)
            } else {
                self.ptr.wrapping_add(i.min(mr - 1) * self.row_stride)
            }
        })
    }
}

/// Multiplies `MR x kc` of A by one packed `kc x nr` panel of B into `tile`.
///
/// # Safety
/// `a` is a packed panel (`kc * MR` readable values, `MR` the kernel's rows per call) or,
/// for kernels that read rows in place, has `kc` readable values in each of its first
/// `tile.mr` rows; `b` holds `kc * nr` readable values (`nr` the family's panel width);
/// `tile.c` is valid for writes of an `mr x nr` block with row stride `ldc`;
/// `tile.mr <= MR`, `tile.nr` at most the family's `nr`.
pub(crate) type KernelFn<E> = unsafe fn(kc: usize, a: ARows<E>, b: *const E, tile: Tile<E>);

/// The blocking a family of micro-kernels is written for: the panel width and the depth
/// of a block of `k` (so that one B panel stays in L1), which fix how B is packed, and the
/// rows per call of its kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelShape {
    pub nr: usize,
    pub kc: usize,
    /// Rows per call of the regular kernel.
    pub mr: usize,
    /// Rows per call of the tall kernel, when the family has one.
    pub tall_mr: Option<usize>,
}

impl KernelShape {
    /// Rows per kernel call for a product of `m` rows: the tall kernel when it covers the
    /// rows in fewer passes over B without computing more padding rows than the regular
    /// one would.
    fn rows_per_call(&self, m: usize) -> usize {
        match self.tall_mr {
            Some(tall)
                if m <= TALL_MAX_ROWS
                    && m.div_ceil(tall) < m.div_ceil(self.mr)
                    && m.div_ceil(tall) * tall <= m.div_ceil(self.mr) * self.mr =>
            {
                tall
            }
            _ => self.mr,
        }
    }
}

/// One micro-kernel: it multiplies `mr` rows of A.
#[derive(Clone, Copy)]
pub(crate) struct MicroKernel<E> {
    pub mr: usize,
    pub run: KernelFn<E>,
    /// Whether `run` also reads rows of A in place (unit column stride), so that a product
    /// whose A is stored row-major in the accumulator type skips packing A.
    pub in_place: bool,
    /// Whether `run` also reads adjacent rows of A in place at any stride along `k` (a
    /// transposed A, stored column-major), so that such a product skips packing A too:
    /// with few columns of B (an attention's `Pᵀ·dO`) packing would cost as much as the
    /// product.
    pub in_place_columns: bool,
}

/// The micro-kernels of one instruction set, sharing one packing of B.
#[derive(Clone, Copy)]
pub(crate) struct Kernels<E> {
    pub shape: KernelShape,
    pub regular: MicroKernel<E>,
    pub tall: Option<MicroKernel<E>>,
}

impl<E: Copy> Kernels<E> {
    /// The kernel a plan was made for.
    fn for_plan(&self, plan: &GemmPlan) -> MicroKernel<E> {
        assert_eq!(
            self.shape, plan.shape,
            "the plan was made for other kernels"
        );
        match self.tall {
            Some(tall) if tall.mr == plan.mr => tall,
            _ => self.regular,
        }
    }
}

/// The accumulator types GEMM computes in.
pub(crate) trait GemmAcc: Real + bytemuck::Pod + Default + FloatStore<Acc = Self> {
    /// The fastest micro-kernels of the instruction set in use ([`isa`]).
    fn micro_kernels() -> Kernels<Self>;
}

impl GemmAcc for f32 {
    fn micro_kernels() -> Kernels<f32> {
        // Chosen once: every product of the process uses the kernels its plans were made
        // for.
        static CHOSEN: std::sync::OnceLock<Kernels<f32>> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let vector = match isa() {
                Isa::Avx512 => avx512::f32_kernels(),
                Isa::Avx2 => avx2::f32_kernels(),
                Isa::Baseline => None,
            };
            vector.unwrap_or_else(scalar::kernels::<f32>)
        })
    }
}

impl GemmAcc for f64 {
    fn micro_kernels() -> Kernels<f64> {
        scalar::kernels::<f64>()
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
        f64::micro_kernels().shape
    } else {
        f32::micro_kernels().shape
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
    /// The shape of the kernels the product runs with.
    pub shape: KernelShape,
    /// Rows per kernel call: the regular or the tall kernel of the shape.
    mr: usize,
    kc: usize,
    /// Rows of A per packed block: a worker's rows in equal blocks of at most `MC`, so no
    /// thin last block re-reads all of B for a few rows.
    mc: usize,
    nc: usize,
    split: Split,
    /// Rows or columns per worker (a multiple of `mr` or `nr`).
    chunk: usize,
    /// Workers, each with its own scratch slot.
    pub workers: usize,
    /// `C += A·B` instead of `C = A·B`.
    adds: bool,
}

impl GemmPlan {
    pub(crate) fn new(dims: GemmDims, threads: usize, shape: KernelShape) -> GemmPlan {
        let nr = shape.nr;
        let mr = shape.rows_per_call(dims.m);
        let kc = dims.k.clamp(1, shape.kc);
        let flops = dims.m * dims.n * dims.k;
        let wanted = if flops < 1 << 18 { 1 } else { threads.max(1) };
        // Split the longer side of C into equal ranges: each worker then re-packs only the
        // operand along the shorter side, a small fraction of its work.
        let (split, unit, len) = if dims.n.div_ceil(nr) * nr >= dims.m {
            (Split::Columns, nr, dims.n)
        } else {
            (Split::Rows, mr, dims.m)
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
        let mc = rows.div_ceil(row_blocks).div_ceil(mr).max(1) * mr;
        GemmPlan {
            dims,
            shape,
            mr,
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
        self.shared_b_len() + self.workers * self.slot_len()
    }

    /// Workers split the rows of C, so each would pack all of B: B is packed once, by all
    /// of them, into scratch ahead of their slots (unless it comes packed).
    fn shares_b(&self) -> bool {
        self.split == Split::Rows && self.workers > 1
    }

    /// Scratch elements of the B all workers share, ahead of their slots.
    fn shared_b_len(&self) -> usize {
        if self.shares_b() {
            packed_b_len(self.dims.k, self.dims.n, self.shape)
        } else {
            0
        }
    }
}

/// Scratch elements of a single-threaded `m x k` by `k x n` product with kernels of
/// `shape`; it covers every product of `m` rows, `n` columns and a depth up to `k`.
pub(crate) fn serial_scratch_len(m: usize, n: usize, k: usize, shape: KernelShape) -> usize {
    let dims = GemmDims {
        m,
        n,
        k,
        a_rs: k,
        a_cs: 1,
        b_rs: n,
        b_cs: 1,
    };
    GemmPlan::new(dims, 1, shape).scratch_len()
}

/// Scratch elements a single-threaded product of any row count up to `max_rows` by a
/// `k x n` B needs with kernels of `shape`: products planned at run time, whose row counts
/// are known only then, size their slots with it.
pub(crate) fn serial_scratch_bound(
    max_rows: usize,
    k: usize,
    n: usize,
    shape: KernelShape,
) -> usize {
    // Rows set the block of A packed (`mc`, at most MC rounded up to the kernel's rows),
    // which is not monotone in the count: try every count up to where blocks repeat.
    (1..=max_rows.min(2 * MC + 64))
        .chain([max_rows.max(1)])
        .map(|m| serial_scratch_len(m, n, k, shape))
        .max()
        .unwrap_or(0)
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
            let first = j0 + jp * nr;
            if d.b_rs == 1 && first + nr <= j0 + nc && nr.is_multiple_of(8) {
                // Columns contiguous along k: eight of them side by side, so each read walks
                // a column in order and each write fills 8 adjacent values of a panel row.
                for jb in (0..nr).step_by(8) {
                    let columns: [&[S]; 8] =
                        std::array::from_fn(|c| &b[(first + jb + c) * d.b_cs + p0..][..kc]);
                    for (p, row) in panel.chunks_exact_mut(nr).enumerate() {
                        for (o, column) in row[jb..jb + 8].iter_mut().zip(&columns) {
                            *o = column[p].load();
                        }
                    }
                }
                continue;
            }
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

/// The `k x n` B (at `d`'s strides in `b`) that [`pack_b_whole`] packed into `packed` for
/// kernels of `shape`: its inverse, exact where the accumulator type holds every value of
/// the storage type.
pub(crate) fn unpack_b_whole<S: FloatStore>(
    d: &GemmDims,
    packed: &[S::Acc],
    shape: KernelShape,
    b: &mut [S],
) {
    let (nr, panels) = (shape.nr, d.n.div_ceil(shape.nr));
    for p0 in (0..d.k).step_by(shape.kc) {
        let kc = shape.kc.min(d.k - p0);
        let block = &packed[p0 * panels * nr..];
        for p in 0..kc {
            for j in 0..d.n {
                let value = block[(j / nr) * kc * nr + p * nr + j % nr];
                b[(p0 + p) * d.b_rs + j * d.b_cs] = S::store(value);
            }
        }
    }
}

/// [`pack_b_whole`] for a plan's blocks of `kc` rows, the blocks spread over the workers.
pub(crate) fn pack_b_shared<S: FloatStore>(plan: &GemmPlan, b: &[S], out: &mut [S::Acc]) {
    let d = plan.dims;
    let nr = plan.shape.nr;
    let block = plan.kc * d.n.div_ceil(nr) * nr;
    let out = &mut out[..packed_b_len(d.k, d.n, plan.shape)];
    crate::cpu::workers::chunks_mut(out, block, |blk, out| {
        let p0 = blk * plan.kc;
        pack_b(&d, b, p0, plan.kc.min(d.k - p0), 0, d.n, nr, out);
    });
}

/// Packs rows `i0..i0+mc` and columns `p0..p0+kc` of A into `mr`-tall panels, zero-padded.
#[allow(clippy::too_many_arguments)]
fn pack_a<S: FloatStore>(
    mr: usize,
    d: &GemmDims,
    a: &[S],
    i0: usize,
    mc: usize,
    p0: usize,
    kc: usize,
    out: &mut [S::Acc],
) {
    match mr {
        6 => pack_a_panels::<S, 6>(d, a, i0, mc, p0, kc, out),
        12 => pack_a_panels::<S, 12>(d, a, i0, mc, p0, kc, out),
        16 => pack_a_panels::<S, 16>(d, a, i0, mc, p0, kc, out),
        _ => unreachable!("no kernel takes {mr} rows"),
    }
}

/// [`pack_a`] for panels of `MR` rows.
///
/// The panel is written in order (one `MR`-long column at a time) while reading `MR` rows
/// side by side, so stores stream and loads come from a few sequential lines.
fn pack_a_panels<S: FloatStore, const MR: usize>(
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
    // Rows of A in the accumulator type with unit column stride are read where they are,
    // as the kernel reads a packed panel (a packing would only copy them), unless the row
    // stride is a multiple of 4 KiB: such rows all fall in one L1 set (and alias each other
    // on Intel), and a 1024- or 2048-wide A then runs faster packed.
    let in_place: Option<&[SA::Acc]> = if kernel.in_place
        && d.a_cs == 1
        && !(d.a_rs * size_of::<SA::Acc>()).is_multiple_of(4096)
    {
        SA::as_acc(a)
    } else {
        None
    };
    // The same for a column-major A (adjacent rows, any stride along k).
    let in_place_columns: Option<&[SA::Acc]> = if in_place.is_none()
        && kernel.in_place_columns
        && d.a_rs == 1
        && d.a_cs > 1
        && !(d.a_cs * size_of::<SA::Acc>()).is_multiple_of(4096)
    {
        SA::as_acc(a)
    } else {
        None
    };
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
                if in_place.is_none() && in_place_columns.is_none() {
                    pack_a(plan.mr, &d, a, i0, mc, p0, kc, packed_a);
                }
                for jp in 0..nc.div_ceil(nr) {
                    let tile_nr = nr.min(nc - jp * nr);
                    let bp = &packed_b[jp * kc * nr..];
                    for ip in 0..mc.div_ceil(kernel.mr) {
                        let mr = kernel.mr.min(mc - ip * kernel.mr);
                        let first = i0 + ip * kernel.mr;
                        let rows = match (in_place, in_place_columns) {
                            (Some(a), _) => ARows {
                                ptr: a[first * d.a_rs + p0..].as_ptr(),
                                row_stride: d.a_rs,
                                k_stride: 1,
                                packed: false,
                            },
                            (None, Some(a)) => ARows {
                                ptr: a[first + p0 * d.a_cs..].as_ptr(),
                                row_stride: 1,
                                k_stride: d.a_cs,
                                packed: false,
                            },
                            (None, None) => ARows {
                                ptr: packed_a[ip * kc * kernel.mr..].as_ptr(),
                                row_stride: 1,
                                k_stride: kernel.mr,
                                packed: true,
                            },
                        };
                        let offset = first * d.n + j0 + jp * nr;
                        // SAFETY: the packed panels hold kc*mr and kc*nr values, and rows
                        // read in place are rows first..first+mr of A, each with columns
                        // p0..p0+kc; the tile at `offset` lies inside the m x n output (mr
                        // and nr are clipped to this worker's rows and columns), which no
                        // other worker writes.
                        unsafe {
                            let tile = Tile {
                                c: c.ptr().add(offset),
                                ldc: d.n,
                                mr,
                                nr: tile_nr,
                                accumulate,
                            };
                            (kernel.run)(kc, rows, bp.as_ptr(), tile)
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
    kernels: Kernels<SA::Acc>,
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
    let kernel = kernels.for_plan(plan);
    let (shared_b, slots) = scratch[..plan.scratch_len()].split_at_mut(plan.shared_b_len());
    let prepacked_b: Option<&[SA::Acc]> = match prepacked_b {
        None if plan.shares_b() && parallel(d.m * d.n * d.k) => {
            pack_b_shared(plan, b, shared_b);
            Some(shared_b)
        }
        given => given,
    };
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
    if plan.workers > 1 && parallel(d.m * d.n * d.k) {
        crate::cpu::workers::chunks_mut(slots, plan.slot_len(), |w, slot| work((w, slot)));
    } else {
        slots.chunks_mut(plan.slot_len()).enumerate().for_each(work);
    }
}

#[cfg(test)]
mod tests;

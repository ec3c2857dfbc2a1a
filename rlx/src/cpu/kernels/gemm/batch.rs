//! Batched matrix products: one GEMM plan over many batch entries.

use crate::cpu::workers::{Chunks, for_each};

use super::{Epilogue, GemmAcc, GemmPlan, RowEpilogue, gemm, in_accumulator};
use crate::cpu::kernels::numeric::FloatStore;

/// The operands of a batch of products sharing one plan.
pub(crate) struct GemmBatch<'a, S: FloatStore> {
    pub plan: &'a GemmPlan,
    /// Element offsets into `a` and `b` of each batch entry, in output order.
    pub offsets: &'a [(usize, usize)],
    /// Entries run in parallel on this many workers, each a single-threaded product.
    pub workers: usize,
    pub a: &'a [S],
    pub b: &'a [S],
    /// `b` packed once when bound (a weight), in the accumulator type.
    pub packed_b: Option<&'a [S::Acc]>,
    /// A fused matmul's bias, activation and residual (its `entry_offset` is set per
    /// batch entry).
    pub epilogue: Option<Epilogue<'a, S>>,
}

/// `out[i] = a[i] · b[i]` for every batch entry. `scratch` holds one packing slot per
/// worker; `wide` (one `m x n` tile per worker) receives f16/bf16 results before they are
/// narrowed, and is `None` when storage and accumulator are the same type.
pub(crate) fn gemm_batch<S: FloatStore>(
    job: &GemmBatch<'_, S>,
    out: &mut [S],
    scratch: &mut [S::Acc],
    wide: Option<&mut [S::Acc]>,
) where
    S::Acc: GemmAcc,
{
    let kernels = S::Acc::micro_kernels();
    let tile = job.plan.dims.m * job.plan.dims.n;
    // One worker's share: consecutive batch entries from `first`, with its own scratch.
    let run =
        |first: usize, out: &mut [S], scratch: &mut [S::Acc], mut wide: Option<&mut [S::Acc]>| {
            for (i, dst) in out.chunks_mut(tile).enumerate() {
                let (ao, bo) = job.offsets[first + i];
                let (a, b) = (&job.a[ao..], &job.b[bo..]);
                let entry = first + i;
                let epilogue = job.epilogue.map(|e| Epilogue {
                    entry_offset: entry * tile,
                    ..e
                });
                let epilogue = epilogue.as_ref().map(|e| e as &dyn RowEpilogue<S::Acc>);
                in_accumulator(dst, wide.as_deref_mut(), |c| {
                    gemm(job.plan, kernels, a, b, c, scratch, job.packed_b, epilogue);
                });
            }
        };
    if job.workers <= 1 || tile == 0 {
        run(0, out, scratch, wide);
        return;
    }
    let per_worker = job.offsets.len().div_ceil(job.workers);
    let slot = scratch.len() / job.workers;
    let outs = Chunks::new(out, per_worker * tile);
    let slots = Chunks::new(scratch, slot);
    let wides = wide.map(|wide| Chunks::new(wide, tile));
    let shares = outs
        .count()
        .min(slots.count())
        .min(wides.as_ref().map_or(usize::MAX, Chunks::count));
    for_each(shares, |w| {
        // SAFETY: `for_each` calls each index below every count once.
        let (out, scratch) = unsafe { (outs.take(w), slots.take(w)) };
        // SAFETY: as above.
        let wide = wides.as_ref().map(|wides| unsafe { wides.take(w) });
        run(w * per_worker, out, scratch, wide)
    });
}

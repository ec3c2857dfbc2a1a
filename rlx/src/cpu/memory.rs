//! The memory planner: places buffers with known live intervals in one arena.
//!
//! Greedy by size: the largest buffers are placed first, each into the smallest gap left
//! between already-placed buffers whose lifetimes overlap its own (best fit), or after them.
//! Every offset is a multiple of [`ALIGN`].

/// Alignment of every buffer in the arena, in bytes (a cache line; enough for AVX-512).
pub const ALIGN: usize = 64;

/// One buffer to place: its size and the steps during which it is live (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferRequest {
    /// Bytes.
    pub size: usize,
    /// First step at which it is written.
    pub start: usize,
    /// Last step at which it is read.
    pub end: usize,
}

impl BufferRequest {
    fn overlaps(&self, other: &BufferRequest) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// Where each buffer goes and how big the arena is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Byte offset of each request, in request order.
    pub offsets: Vec<usize>,
    /// Arena size: the peak the plan needs.
    pub peak_bytes: usize,
    /// The most bytes live at any one step (aligned sizes): no placement can beat it.
    pub lower_bound: usize,
}

fn aligned(size: usize) -> usize {
    size.div_ceil(ALIGN) * ALIGN
}

/// Places `requests`. With `reuse = false` every buffer gets its own bytes (for debugging
/// and for checking that reuse changes no result).
///
/// ```
/// use rlx::cpu::memory::{BufferRequest, plan_memory};
/// let reqs = [
///     BufferRequest { size: 100, start: 0, end: 1 },
///     BufferRequest { size: 100, start: 1, end: 2 },
///     BufferRequest { size: 100, start: 2, end: 3 }, // can reuse the first buffer
/// ];
/// let plan = plan_memory(&reqs, true);
/// assert_eq!(plan.offsets[0], plan.offsets[2]);
/// assert_eq!(plan.peak_bytes, 256); // two 64-byte-aligned buffers live at step 1
/// assert_eq!(plan.lower_bound, 256);
/// ```
pub fn plan_memory(requests: &[BufferRequest], reuse: bool) -> MemoryPlan {
    let mut offsets = vec![0usize; requests.len()];
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by(|&a, &b| {
        requests[b]
            .size
            .cmp(&requests[a].size)
            .then(requests[a].start.cmp(&requests[b].start))
    });
    let mut placed: Vec<usize> = Vec::with_capacity(requests.len());
    let mut peak = 0usize;
    for &i in &order {
        let req = requests[i];
        let size = aligned(req.size);
        let offset = if reuse {
            let mut busy: Vec<(usize, usize)> = placed
                .iter()
                .filter(|&&j| requests[j].overlaps(&req))
                .map(|&j| (offsets[j], offsets[j] + aligned(requests[j].size)))
                .collect();
            busy.sort_unstable();
            best_fit(&busy, size)
        } else {
            peak
        };
        offsets[i] = offset;
        peak = peak.max(offset + size);
        placed.push(i);
    }
    MemoryPlan {
        offsets,
        peak_bytes: peak,
        lower_bound: lower_bound(requests),
    }
}

/// The smallest gap of at least `size` bytes between the sorted busy ranges, or the end.
fn best_fit(busy: &[(usize, usize)], size: usize) -> usize {
    let mut best: Option<(usize, usize)> = None; // (gap, offset)
    let mut cursor = 0usize;
    for &(start, end) in busy {
        if start > cursor {
            let gap = start - cursor;
            if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, cursor));
            }
        }
        cursor = cursor.max(end);
    }
    best.map_or(cursor, |(_, offset)| offset)
}

fn lower_bound(requests: &[BufferRequest]) -> usize {
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(requests.len() * 2);
    for r in requests {
        events.push((r.start, true, aligned(r.size)));
        events.push((r.end + 1, false, aligned(r.size)));
    }
    // Frees before allocations at the same step: a buffer ending at step t is gone at t+1.
    events.sort_by_key(|&(t, alloc, _)| (t, alloc));
    let (mut live, mut max) = (0usize, 0usize);
    for (_, alloc, size) in events {
        if alloc {
            live += size;
            max = max.max(live);
        } else {
            live -= size;
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator for property tests.
    pub(crate) struct SplitMix(pub u64);
    impl SplitMix {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        pub(crate) fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_requests_never_overlap_while_live() {
        let mut rng = SplitMix(7);
        for _ in 0..300 {
            let n = 1 + rng.below(40);
            let reqs: Vec<BufferRequest> = (0..n)
                .map(|_| {
                    let start = rng.below(30);
                    BufferRequest {
                        size: 1 + rng.below(5000),
                        start,
                        end: start + rng.below(10),
                    }
                })
                .collect();
            for reuse in [true, false] {
                let plan = plan_memory(&reqs, reuse);
                assert!(plan.peak_bytes >= plan.lower_bound);
                for i in 0..n {
                    assert_eq!(plan.offsets[i] % ALIGN, 0);
                    assert!(plan.offsets[i] + reqs[i].size <= plan.peak_bytes);
                    for j in i + 1..n {
                        if reqs[i].overlaps(&reqs[j]) {
                            let (a, b) = (plan.offsets[i], plan.offsets[j]);
                            let disjoint = a + reqs[i].size <= b || b + reqs[j].size <= a;
                            assert!(disjoint, "{:?} {:?} at {a} {b}", reqs[i], reqs[j]);
                        }
                    }
                }
            }
        }
    }
}

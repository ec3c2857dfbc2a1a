//! Strided iteration: how an output's index space maps onto operand offsets.
//!
//! Built when a plan is made (numpy broadcasting turns into stride 0, adjacent contiguous
//! axes are merged) and walked row by row when the kernel runs, in parallel above a size
//! threshold.

/// Below this many elements a kernel runs on the calling thread.
pub(crate) const PARALLEL_MIN: usize = 1 << 15;

/// Most axes a layout may have after coalescing; index counters live on the stack.
pub(crate) const MAX_RANK: usize = 16;

thread_local! {
    /// Whether kernels called on this thread may spread over the run's workers (off for one thread).
    static PARALLEL: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// True if `work` elements are worth splitting and this run may use several threads.
pub(crate) fn parallel(work: usize) -> bool {
    work >= PARALLEL_MIN && PARALLEL.with(std::cell::Cell::get)
}

/// Runs `f` with parallel kernels enabled or not on this thread.
pub(crate) fn with_parallelism<R>(enabled: bool, f: impl FnOnce() -> R) -> R {
    let previous = PARALLEL.with(|p| p.replace(enabled));
    let result = f();
    PARALLEL.with(|p| p.set(previous));
    result
}

/// A pointer to an output that parallel workers write in disjoint parts. Whoever creates it
/// keeps the output borrowed until every worker has joined, and hands each worker only its
/// own part.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut<T>(*mut T);
// SAFETY: see the type's contract: workers write disjoint ranges, and the pointer does not
// outlive the borrow it was made from.
unsafe impl<T> Send for SharedMut<T> {}
// SAFETY: as above; shared access only hands out disjoint ranges.
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub(crate) fn new(out: &mut [T]) -> SharedMut<T> {
        SharedMut(out.as_mut_ptr())
    }

    /// The pointer itself (a method, so closures capture the `Send` wrapper, not the field).
    pub(crate) fn ptr(self) -> *mut T {
        self.0
    }
}

/// Row-major index space `dims` with one stride vector per operand (in elements).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Strided<const K: usize> {
    pub dims: Vec<usize>,
    pub strides: [Vec<usize>; K],
}

/// Contiguous row-major strides of `dims`.
pub(crate) fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

impl<const K: usize> Strided<K> {
    /// Numpy broadcasting of `operands` (right-aligned) to `out`; a size-1 or missing axis
    /// gets stride 0.
    pub(crate) fn broadcast(out: &[usize], operands: [&[usize]; K]) -> Strided<K> {
        let strides = operands.map(|dims| {
            let own = contiguous_strides(dims);
            let offset = out.len() - dims.len();
            (0..out.len())
                .map(|i| {
                    if i < offset || dims[i - offset] == 1 {
                        0
                    } else {
                        own[i - offset]
                    }
                })
                .collect()
        });
        Strided {
            dims: out.to_vec(),
            strides,
        }
        .coalesced()
    }

    /// Merges adjacent axes that every operand walks contiguously, and drops size-1 axes.
    pub(crate) fn coalesced(self) -> Strided<K> {
        let mut dims: Vec<usize> = Vec::new();
        let mut strides: [Vec<usize>; K] = std::array::from_fn(|_| Vec::new());
        for axis in 0..self.dims.len() {
            let d = self.dims[axis];
            if d == 1 {
                continue;
            }
            let mergeable = !dims.is_empty()
                && (0..K).all(|k| {
                    let last = strides[k].len() - 1;
                    strides[k][last] == self.strides[k][axis] * d
                });
            if mergeable {
                let last = dims.len() - 1;
                dims[last] *= d;
                for (merged, own) in strides.iter_mut().zip(&self.strides) {
                    let s = merged.len() - 1;
                    merged[s] = own[axis];
                }
            } else {
                dims.push(d);
                for (merged, own) in strides.iter_mut().zip(&self.strides) {
                    merged.push(own[axis]);
                }
            }
        }
        if dims.is_empty() {
            dims.push(1);
            for s in &mut strides {
                s.push(0);
            }
        }
        Strided { dims, strides }
    }

    fn row_len(&self) -> usize {
        *self.dims.last().unwrap_or(&1)
    }

    /// Walks rows `first..first + count` of the space, calling
    /// `f(row, operand_offsets, inner_strides)`.
    fn walk_rows(
        &self,
        first: usize,
        count: usize,
        mut f: impl FnMut(usize, [usize; K], [usize; K]),
    ) {
        let outer = &self.dims[..self.dims.len() - 1];
        let inner: [usize; K] = std::array::from_fn(|k| *self.strides[k].last().unwrap_or(&0));
        let mut index = [0usize; MAX_RANK];
        let mut rest = first;
        for axis in (0..outer.len()).rev() {
            index[axis] = rest % outer[axis];
            rest /= outer[axis];
        }
        let mut offsets: [usize; K] =
            std::array::from_fn(|k| index.iter().zip(&self.strides[k]).map(|(i, s)| i * s).sum());
        for row in first..first + count {
            f(row, offsets, inner);
            for axis in (0..outer.len()).rev() {
                index[axis] += 1;
                for (k, off) in offsets.iter_mut().enumerate() {
                    *off += self.strides[k][axis];
                }
                if index[axis] < outer[axis] {
                    break;
                }
                for (k, off) in offsets.iter_mut().enumerate() {
                    *off -= self.strides[k][axis] * outer[axis];
                }
                index[axis] = 0;
            }
        }
    }

    /// Fills the contiguous `out` row by row: `f(out_row, operand_offsets, inner_strides)`,
    /// in parallel for large outputs.
    pub(crate) fn for_each_row<O: Send>(
        &self,
        out: &mut [O],
        f: impl Fn(&mut [O], [usize; K], [usize; K]) + Sync,
    ) {
        let len = self.row_len();
        if len == 0 || out.is_empty() {
            return;
        }
        let rows = out.len() / len;
        if !parallel(out.len()) || rows < 2 {
            self.walk_rows(0, rows, |row, offs, inner| {
                f(&mut out[row * len..(row + 1) * len], offs, inner)
            });
            return;
        }
        let rows_per_chunk = rows.div_ceil(crate::cpu::workers::threads() * 4).max(1);
        crate::cpu::workers::chunks_mut(out, rows_per_chunk * len, |chunk, block| {
            let first = chunk * rows_per_chunk;
            let count = block.len() / len;
            self.walk_rows(first, count, |row, offs, inner| {
                let r = row - first;
                f(&mut block[r * len..(r + 1) * len], offs, inner)
            });
        });
    }
}

/// Applies `f` to disjoint chunks of `out` (with the chunk's start index), in parallel for
/// large outputs.
pub(crate) fn for_each_chunk<O: Send>(out: &mut [O], f: impl Fn(usize, &mut [O]) + Sync) {
    if !parallel(out.len()) {
        f(0, out);
        return;
    }
    let chunk = out
        .len()
        .div_ceil(crate::cpu::workers::threads() * 4)
        .max(4096);
    crate::cpu::workers::chunks_mut(out, chunk, |i, block| f(i * chunk, block));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_strides_and_coalescing() {
        let s = Strided::broadcast(&[2, 3, 4], [&[2, 3, 4], &[4]]);
        assert_eq!(s.dims, vec![6, 4]);
        assert_eq!(s.strides, [vec![4, 1], vec![0, 1]]);
        let s = Strided::broadcast(&[2, 3, 4], [&[2, 3, 4], &[2, 3, 4]]);
        assert_eq!(s.dims, vec![24]);
        let s = Strided::broadcast(&[2, 3], [&[2, 1], &[]]);
        assert_eq!(s.strides, [vec![1, 0], vec![0, 0]]);
        let s = Strided::broadcast(&[], [&[], &[]]);
        assert_eq!((s.dims, s.strides), (vec![1], [vec![0], vec![0]]));
    }

    #[test]
    fn rows_cover_the_space_in_order() {
        let s = Strided::broadcast(&[3, 2, 5], [&[3, 1, 5]]);
        let mut out = vec![0usize; 30];
        s.for_each_row(&mut out, |row, [off], [inner]| {
            for (i, o) in row.iter_mut().enumerate() {
                *o = off + i * inner;
            }
        });
        let expected: Vec<usize> = (0..3)
            .flat_map(|a| (0..2).flat_map(move |_| (0..5).map(move |c| a * 5 + c)))
            .collect();
        assert_eq!(out, expected);
    }
}

//! Data movement: strided copies (permute, slice, broadcast, concat, pad), fills and
//! gathers. Kernels here only move bytes, so they are generic over the element size.

use super::layout::{MAX_RANK, Strided};

/// An element moved as an opaque value of its size.
pub(crate) trait Word: Copy + Send + Sync + bytemuck::Pod {}
impl Word for u8 {}
impl Word for u16 {}
impl Word for u32 {}
impl Word for u64 {}

/// `dst[layout(dst)] = src[layout(src)]` where `layout.strides = [dst, src]` and the walk
/// starts at element offsets `dst_at` and `src_at`.
pub(crate) fn strided_copy<W: Word>(
    layout: &Strided<2>,
    dst_at: usize,
    src_at: usize,
    src: &[W],
    dst: &mut [W],
) {
    let dims = &layout.dims;
    let [ds, ss] = &layout.strides;
    let rank = dims.len();
    let inner = dims[rank - 1];
    let (d_inner, s_inner) = (ds[rank - 1], ss[rank - 1]);
    let rows: usize = dims[..rank - 1].iter().product();
    let mut index = [0usize; MAX_RANK];
    let (mut d, mut s) = (dst_at, src_at);
    for _ in 0..rows {
        if d_inner == 1 && s_inner == 1 {
            dst[d..d + inner].copy_from_slice(&src[s..s + inner]);
        } else {
            for i in 0..inner {
                dst[d + i * d_inner] = src[s + i * s_inner];
            }
        }
        for axis in (0..rank - 1).rev() {
            index[axis] += 1;
            d += ds[axis];
            s += ss[axis];
            if index[axis] < dims[axis] {
                break;
            }
            d -= ds[axis] * dims[axis];
            s -= ss[axis] * dims[axis];
            index[axis] = 0;
        }
    }
}

/// Fills `dst` with copies of `value`.
pub(crate) fn fill<W: Word>(value: W, dst: &mut [W]) {
    dst.fill(value);
}

/// `numpy.take`: `out[o, j, i] = data[o, idx[j], i]` with `data` viewed as
/// `[outer, axis_len, inner]`. Returns the first out-of-range index.
pub(crate) fn gather<W: Word>(
    outer: usize,
    axis_len: usize,
    inner: usize,
    data: &[W],
    indices: impl Fn(usize) -> i64,
    n_indices: usize,
    out: &mut [W],
) -> Result<(), i64> {
    for o in 0..outer {
        for j in 0..n_indices {
            let idx = indices(j);
            if idx < 0 || idx as usize >= axis_len {
                return Err(idx);
            }
            let from = (o * axis_len + idx as usize) * inner;
            let to = (o * n_indices + j) * inner;
            out[to..to + inner].copy_from_slice(&data[from..from + inner]);
        }
    }
    Ok(())
}

/// `out[o, idx[j], i] += updates[o, j, i]` for `out` viewed as `[outer, axis_len, inner]`;
/// repeated indices accumulate. Returns the first out-of-range index.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter_add<T: Copy>(
    outer: usize,
    axis_len: usize,
    inner: usize,
    indices: impl Fn(usize) -> i64,
    n_indices: usize,
    updates: &[T],
    out: &mut [T],
    add: impl Fn(T, T) -> T,
) -> Result<(), i64> {
    for o in 0..outer {
        for j in 0..n_indices {
            let idx = indices(j);
            if idx < 0 || idx as usize >= axis_len {
                return Err(idx);
            }
            let to = (o * axis_len + idx as usize) * inner;
            let from = (o * n_indices + j) * inner;
            for (d, u) in out[to..to + inner]
                .iter_mut()
                .zip(&updates[from..from + inner])
            {
                *d = add(*d, *u);
            }
        }
    }
    Ok(())
}

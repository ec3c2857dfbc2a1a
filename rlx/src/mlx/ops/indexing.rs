//! Gathers, scatters and windows at run-time offsets: each also returns (or, for a window's
//! start, shares) the flag of an index out of range, which the lowering checks after a run.

use rlx_mlx_sys as sys;

use crate::mlx::array::{Array, MlxError, dims_i64, make, make_checked};

impl Array {
    /// `numpy.take` along `axis`, and a `bool` scalar that is true if an index was out of
    /// range (such indices read element 0 instead of memory outside the array).
    pub fn gather(&self, indices: &Array, axis: usize) -> Result<(Array, Array), MlxError> {
        // SAFETY: the handles are live; both out-pointers are valid slots.
        make_checked(|out, bad| unsafe {
            sys::rlx_mlx_gather(self.ptr(), indices.ptr(), axis as i32, out, bad)
        })
    }

    /// `y[p] = self[row(p)] · w[indices[p]]` (`w` stored `[E, N, K]` when `transpose_b`),
    /// with the same out-of-range flag as [`Array::gather`].
    pub fn gather_matmul(
        &self,
        w: &Array,
        indices: &Array,
        transpose_b: bool,
    ) -> Result<(Array, Array), MlxError> {
        // SAFETY: the handles are live; both out-pointers are valid slots.
        make_checked(|out, bad| unsafe {
            sys::rlx_mlx_gather_matmul(self.ptr(), w.ptr(), indices.ptr(), transpose_b, out, bad)
        })
    }

    /// `out[e] = Σ self[row(p)]ᵀ · g[p]` over the pairs of matrix `e` (transposed when
    /// `transpose`), with the same out-of-range flag as [`Array::gather`].
    pub fn scatter_matmul(
        &self,
        g: &Array,
        indices: &Array,
        groups: usize,
        transpose: bool,
    ) -> Result<(Array, Array), MlxError> {
        let groups = i32::try_from(groups).map_err(|_| MlxError::new("too many matrices"))?;
        // SAFETY: the handles are live; both out-pointers are valid slots.
        make_checked(|out, bad| unsafe {
            sys::rlx_mlx_scatter_matmul(
                self.ptr(),
                g.ptr(),
                indices.ptr(),
                groups,
                transpose,
                out,
                bad,
            )
        })
    }

    /// Adds `updates` into a copy of `self` at `indices` along `axis`, with the same
    /// out-of-range flag as [`Array::gather`].
    pub fn scatter_add(
        &self,
        indices: &Array,
        updates: &Array,
        axis: usize,
    ) -> Result<(Array, Array), MlxError> {
        // SAFETY: the handles are live; both out-pointers are valid slots.
        make_checked(|out, bad| unsafe {
            sys::rlx_mlx_scatter_add(
                self.ptr(),
                indices.ptr(),
                updates.ptr(),
                axis as i32,
                out,
                bad,
            )
        })
    }

    /// The window of `sizes` (one per axis) at run-time `offsets` along `axes`, and a `bool`
    /// scalar that is true if an offset put the window outside (such offsets read as 0).
    pub fn dynamic_slice(
        &self,
        offsets: &Array,
        axes: &[usize],
        sizes: &[usize],
    ) -> Result<(Array, Array), MlxError> {
        let (start, bad) = Array::window_start(offsets, &self.shape()?, sizes, axes)?;
        Ok((self.dynamic_slice_at(&start, axes, sizes)?, bad))
    }

    /// `self` with `update` written over the window at run-time `offsets` along `axes`,
    /// flagged as [`Array::dynamic_slice`]. MLX writes in place when `self` is referenced
    /// nowhere else.
    pub fn slice_update(
        &self,
        update: &Array,
        offsets: &Array,
        axes: &[usize],
    ) -> Result<(Array, Array), MlxError> {
        let (start, bad) = Array::window_start(offsets, &self.shape()?, &update.shape()?, axes)?;
        Ok((self.slice_update_at(update, &start, axes)?, bad))
    }

    /// Where a window of dims `window` inside an array of dims `shape` starts along `axes`
    /// at run-time `offsets`: `int32 [axes]`, an offset that puts the window outside read as
    /// 0, and a `bool` scalar that is true when one did. Windows at the same offsets (a
    /// decoder's cache writes) share one start.
    pub(crate) fn window_start(
        offsets: &Array,
        shape: &[usize],
        window: &[usize],
        axes: &[usize],
    ) -> Result<(Array, Array), MlxError> {
        let axes: Vec<i32> = axes.iter().map(|&a| a as i32).collect();
        let (shape, window) = (dims_i64(shape), dims_i64(window));
        if shape.len() != window.len() {
            return Err(MlxError::new("a window has one dim per dim of its array"));
        }
        // SAFETY: the handle is live; the slices outlive the call and their lengths are
        // passed with them; both out-pointers are valid slots.
        make_checked(|start, bad| unsafe {
            sys::rlx_mlx_window_start(
                offsets.ptr(),
                shape.as_ptr(),
                window.as_ptr(),
                shape.len(),
                axes.as_ptr(),
                axes.len(),
                start,
                bad,
            )
        })
    }

    /// The window of `sizes` at `start` ([`Array::window_start`]).
    pub(crate) fn dynamic_slice_at(
        &self,
        start: &Array,
        axes: &[usize],
        sizes: &[usize],
    ) -> Result<Array, MlxError> {
        let axes: Vec<i32> = axes.iter().map(|&a| a as i32).collect();
        let sizes = dims_i64(sizes);
        // SAFETY: the handles are live; the slices outlive the call and their lengths are
        // passed with them; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_dynamic_slice_at(
                self.ptr(),
                start.ptr(),
                axes.as_ptr(),
                axes.len(),
                sizes.as_ptr(),
                sizes.len(),
                out,
            )
        })
    }

    /// `self` with `update` written over the window at `start` ([`Array::window_start`]).
    pub(crate) fn slice_update_at(
        &self,
        update: &Array,
        start: &Array,
        axes: &[usize],
    ) -> Result<Array, MlxError> {
        let axes: Vec<i32> = axes.iter().map(|&a| a as i32).collect();
        // SAFETY: the handles are live; `axes` outlives the call and its length is passed
        // with it; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_slice_update_at(
                self.ptr(),
                update.ptr(),
                start.ptr(),
                axes.as_ptr(),
                axes.len(),
                out,
            )
        })
    }
}

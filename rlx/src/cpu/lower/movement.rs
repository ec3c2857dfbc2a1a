//! Data movement thunks: strided copies, fills, gathers, scatter-adds and windows at
//! run-time offsets.

use super::geometry::axis3;
use super::{Lower, LowerInput, boxed, copy};
use crate::backend::{NodeSite, RunError};
use crate::cpu::kernels::copy::{self, Word};
use crate::cpu::kernels::layout::Strided;
use crate::cpu::kernels::layout::contiguous_strides;
use crate::cpu::kernels::numeric::{FloatStore, Int};
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel, float_type, int_type, word_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, DType, Slice};

/// Offsets of a dynamic slice or slice update, read at run time: per sliced axis, its
/// stride in the windowed tensor, its size and the window's size along it.
#[derive(Clone, Debug)]
pub(crate) struct Offsets {
    pub dtype: DType,
    pub view: View,
    /// `(stride, size, window)` per offset, in order.
    pub axes: Vec<(usize, usize, usize)>,
    /// Windows per row of axis 0: `(rows, elements of a row of x, of a row of the window)`.
    pub per_row: Option<(usize, usize, usize)>,
    pub at: NodeSite,
}

impl Offsets {
    fn of(n: &LowerInput<'_>, operand: usize, axes: &[usize], window: &[usize]) -> Offsets {
        let shape = n.shapes[0];
        let strides = contiguous_strides(shape);
        let per_row = crate::ops::offsets_per_row(n.shapes[operand]).then(|| {
            let row = |dims: &[usize]| dims[1..].iter().product();
            (shape[0], row(shape), row(window))
        });
        Offsets {
            dtype: n.dtypes[operand],
            view: n.views[operand],
            axes: axes
                .iter()
                .map(|&a| (strides[a], shape[a], window[a]))
                .collect(),
            per_row,
            at: n.site(),
        }
    }

    fn access(&self) -> (View, usize) {
        (self.view, self.dtype.size_bytes())
    }

    /// The windows: one, or one per row of axis 0.
    fn rows(&self) -> usize {
        self.per_row.map_or(1, |(rows, _, _)| rows)
    }

    /// The element of x where row `row`'s window starts and the element of the window
    /// where that row begins, or the first offset that puts the window outside.
    fn start(&self, mem: &Memory, row: usize) -> Result<(usize, usize), RunError> {
        let first = row * self.axes.len();
        let value = |k: usize| match self.dtype {
            DType::I32 => i64::from(mem.src::<i32>(self.view)[first + k]),
            _ => mem.src::<i64>(self.view)[first + k],
        };
        let (mut at, within) = match self.per_row {
            Some((_, x_row, window_row)) => (row * x_row, row * window_row),
            None => (0, 0),
        };
        for (k, &(stride, size, window)) in self.axes.iter().enumerate() {
            let offset = value(k);
            match usize::try_from(offset).ok().filter(|o| o + window <= size) {
                Some(o) => at += o * stride,
                None => {
                    return Err(RunError::WindowOutOfRange {
                        at: self.at,
                        offset,
                        window,
                        size,
                    });
                }
            }
        }
        Ok((at, within))
    }
}

/// A strided copy whose start on one side is read at run time: the window of a dynamic
/// slice (read from `src`) or of a slice update (written into `dst`).
#[derive(Clone, Debug)]
pub(crate) struct WindowCopy {
    pub dtype: DType,
    pub layout: Strided<2>,
    pub offsets: Offsets,
    /// True when the window is in `dst` (a slice update), false when in `src`.
    pub into_window: bool,
    pub src: View,
    pub dst: View,
}

impl Kernel for WindowCopy {
    fn accesses(&self) -> Accesses {
        let mut accesses = Accesses::one_to_one(self.src, self.dst, self.dtype.size_bytes());
        accesses.reads.push(self.offsets.access());
        accesses
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        // Every window is checked before any is copied: a failed run writes nothing.
        for row in 0..self.offsets.rows() {
            self.offsets.start(mem, row)?;
        }
        for row in 0..self.offsets.rows() {
            let (start, within) = self.offsets.start(mem, row)?;
            let (dst_at, src_at) = if self.into_window {
                (start, within)
            } else {
                (within, start)
            };
            let (src, dst) = (self.src, self.dst);
            word_type!(self.dtype, |W| copy::strided_copy::<W>(
                &self.layout,
                dst_at,
                src_at,
                mem.src(src),
                mem.dst(dst)
            ));
        }
        Ok(())
    }
}

/// Copies `src` (from element `src_at`) into `dst` (from `dst_at`) through a layout:
/// permute, slice, broadcast and the parts of concat and pad.
#[derive(Clone, Debug)]
pub(crate) struct StridedCopy {
    pub dtype: DType,
    pub layout: Strided<2>,
    pub dst_at: usize,
    pub src_at: usize,
    pub src: View,
    pub dst: View,
}

impl Kernel for StridedCopy {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.src, self.dst, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (src, dst) = (self.src, self.dst);
        word_type!(self.dtype, |W| copy::strided_copy::<W>(
            &self.layout,
            self.dst_at,
            self.src_at,
            mem.src(src),
            mem.dst(dst)
        ));
        Ok(())
    }
}

/// Fills `dst` with one value, given as the low bytes of `pattern`.
#[derive(Clone, Debug)]
pub(crate) struct Fill {
    pub dtype: DType,
    pub pattern: u64,
    pub dst: View,
}

/// The low bytes of `pattern` as a word.
fn word_from_pattern<W: Word>(pattern: u64) -> W {
    let bytes = pattern.to_le_bytes();
    bytemuck::pod_read_unaligned(&bytes[..size_of::<W>()])
}

impl Kernel for Fill {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.dst, self.dtype.size_bytes())],
            reads: vec![],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let dst = self.dst;
        word_type!(self.dtype, |W| copy::fill::<W>(
            word_from_pattern(self.pattern),
            mem.dst(dst)
        ));
        Ok(())
    }
}

/// `numpy.take` along the middle axis of `[outer, axis_len, inner]`.
#[derive(Clone, Debug)]
pub(crate) struct Gather {
    pub dtype: DType,
    pub index: DType,
    pub outer: usize,
    pub axis_len: usize,
    pub inner: usize,
    pub data: View,
    pub indices: View,
    pub out: View,
    pub at: NodeSite,
}

impl Kernel for Gather {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, self.dtype.size_bytes())],
            reads: vec![
                (self.data, self.dtype.size_bytes()),
                (self.indices, self.index.size_bytes()),
            ],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (n, outer, len, inner) = (self.indices.len, self.outer, self.axis_len, self.inner);
        let (data, indices, out) = (self.data, self.indices, self.out);
        let result = word_type!(self.dtype, |W| {
            let (data, out) = (mem.src::<W>(data), mem.dst::<W>(out));
            if self.index == DType::I32 {
                let idx = mem.src::<i32>(indices);
                copy::gather(outer, len, inner, data, |j| i64::from(idx[j]), n, out)
            } else {
                let idx = mem.src::<i64>(indices);
                copy::gather(outer, len, inner, data, |j| idx[j], n, out)
            }
        });
        result.map_err(|index| RunError::IndexOutOfRange {
            at: self.at,
            index,
            size: len,
        })
    }
}

/// Adds `updates` into `out` (already a copy of the data) at `indices` along the middle
/// axis of `[outer, axis_len, inner]`.
#[derive(Clone, Debug)]
pub(crate) struct ScatterAdd {
    pub dtype: DType,
    pub index: DType,
    pub outer: usize,
    pub axis_len: usize,
    pub inner: usize,
    pub indices: View,
    pub updates: View,
    pub out: View,
    pub at: NodeSite,
}

impl Kernel for ScatterAdd {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, s)],
            reads: vec![(self.indices, self.index.size_bytes()), (self.updates, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (n, outer, len, inner) = (self.indices.len, self.outer, self.axis_len, self.inner);
        let (updates, out) = (self.updates, self.out);
        let idx32 = (self.index == DType::I32).then(|| mem.src::<i32>(self.indices));
        let idx64 = (self.index == DType::I64).then(|| mem.src::<i64>(self.indices));
        let at = |j: usize| idx32.map_or_else(|| idx64.map_or(0, |i| i[j]), |i| i64::from(i[j]));
        let result = if self.dtype.is_float() {
            float_type!(self.dtype, |T| copy::scatter_add(
                outer,
                len,
                inner,
                at,
                n,
                mem.src::<T>(updates),
                mem.dst::<T>(out),
                |a: T, b: T| T::store(a.load() + b.load())
            ))
        } else {
            int_type!(self.dtype, |T| copy::scatter_add(
                outer,
                len,
                inner,
                at,
                n,
                mem.src::<T>(updates),
                mem.dst::<T>(out),
                <T as Int>::add
            ))
        };
        result.map_err(|index| RunError::IndexOutOfRange {
            at: self.at,
            index,
            size: len,
        })
    }
}

/// A view of its operand: the planner gives it the operand's storage.
impl Lower for ir::Reshape {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

/// Its operand's storage, as a reshape.
impl Lower for crate::ops::StopGradient {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

/// Its operand's storage, as a reshape.
impl Lower for crate::ops::Checkpoint {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

/// Its first operand's storage: the plan runs nodes in order, so whatever reads it comes
/// after the token already.
impl Lower for crate::ops::After {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

impl Lower for ir::Permute {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let src = contiguous_strides(n.shapes[0]);
        let layout = Strided {
            dims: n.out_shape.to_vec(),
            strides: [
                contiguous_strides(n.out_shape),
                self.perm.iter().map(|p| src[*p]).collect(),
            ],
        };
        vec![copy(n.dtype(), layout, 0, 0, n.views[0], n.out)]
    }
}

impl Lower for ir::Slice {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let Slice {
            axis, start, step, ..
        } = *self;
        let size = n.shapes[0][axis] as i64;
        let first = if start < 0 { size + start } else { start } as usize;
        let mut src = contiguous_strides(n.shapes[0]);
        let src_at = first * src[axis];
        src[axis] *= step;
        let layout = Strided {
            dims: n.out_shape.to_vec(),
            strides: [contiguous_strides(n.out_shape), src],
        };
        vec![copy(n.dtype(), layout, 0, src_at, n.views[0], n.out)]
    }
}

impl Lower for ir::Broadcast {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let layout = Strided::broadcast(n.out_shape, [n.out_shape, n.shapes[0]]);
        vec![copy(n.dtype(), layout, 0, 0, n.views[0], n.out)]
    }
}

/// One copy per non-empty operand, each at its offset along the axis.
impl Lower for ir::Concat {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let dst = contiguous_strides(n.out_shape);
        let mut offset = 0;
        let mut thunks = Vec::new();
        for (shape, view) in n.shapes.iter().zip(&n.views) {
            if view.len > 0 {
                let layout = Strided {
                    dims: shape.to_vec(),
                    strides: [dst.clone(), contiguous_strides(shape)],
                };
                thunks.push(copy(
                    n.dtype(),
                    layout,
                    offset * dst[self.axis],
                    0,
                    *view,
                    n.out,
                ));
            }
            offset += shape[self.axis];
        }
        thunks
    }
}

/// A fill with the pad value, then the operand copied inside.
impl Lower for ir::Pad {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let dtype = n.dtype();
        let dst = contiguous_strides(n.out_shape);
        let mut pattern = [0u8; 8];
        let bytes = self.value.to_bytes(dtype);
        pattern[..bytes.len()].copy_from_slice(&bytes);
        let mut thunks = vec![boxed(Fill {
            dtype,
            pattern: u64::from_le_bytes(pattern),
            dst: n.out,
        })];
        if n.views[0].len > 0 {
            let at = self
                .pads
                .iter()
                .zip(&dst)
                .map(|((before, _), s)| before * s)
                .sum();
            let layout = Strided {
                dims: n.shapes[0].to_vec(),
                strides: [dst, contiguous_strides(n.shapes[0])],
            };
            thunks.push(copy(dtype, layout, at, 0, n.views[0], n.out));
        }
        thunks
    }
}

impl Lower for ir::Gather {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let s = axis3(n.shapes[0], self.axis, self.axis);
        vec![boxed(Gather {
            dtype: n.dtype(),
            index: n.dtypes[1],
            outer: s.outer,
            axis_len: s.len,
            inner: s.inner,
            data: n.views[0],
            indices: n.views[1],
            out: n.out,
            at: n.site(),
        })]
    }
}

/// A copy of the operand, then the updates added at their indices.
impl Lower for ir::ScatterAdd {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let s = axis3(n.shapes[0], self.axis, self.axis);
        let layout = Strided {
            dims: vec![n.out.len],
            strides: [vec![1], vec![1]],
        };
        vec![
            copy(n.dtype(), layout, 0, 0, n.views[0], n.out),
            boxed(ScatterAdd {
                dtype: n.dtype(),
                index: n.dtypes[1],
                outer: s.outer,
                axis_len: s.len,
                inner: s.inner,
                indices: n.views[1],
                updates: n.views[2],
                out: n.out,
                at: n.site(),
            }),
        ]
    }
}

/// The dims copied at once: the whole `window`, or one row of it for offsets (operand
/// `offsets`) per row of axis 0.
fn one_row(n: &LowerInput<'_>, offsets: usize, window: &[usize]) -> Vec<usize> {
    let mut dims = window.to_vec();
    if crate::ops::offsets_per_row(n.shapes[offsets]) && !dims.is_empty() {
        dims[0] = 1;
    }
    dims
}

/// One copy from the window's start, read at run time.
impl Lower for ir::DynamicSlice {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let layout = Strided {
            dims: one_row(n, 1, n.out_shape),
            strides: [
                contiguous_strides(n.out_shape),
                contiguous_strides(n.shapes[0]),
            ],
        };
        vec![boxed(WindowCopy {
            dtype: n.dtype(),
            layout: layout.coalesced(),
            offsets: Offsets::of(n, 1, &self.axes, n.out_shape),
            into_window: false,
            src: n.views[0],
            dst: n.out,
        })]
    }
}

/// A copy of the operand, then the update copied over the window (none for an empty
/// update, which is never out of range). Writing a state in place, the output is the
/// operand's own storage and only the window is copied.
impl Lower for ir::SliceUpdate {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let whole = Strided {
            dims: vec![n.out.len],
            strides: [vec![1], vec![1]],
        };
        let update = n.shapes[1];
        let layout = Strided {
            dims: one_row(n, 2, update),
            strides: [contiguous_strides(n.out_shape), contiguous_strides(update)],
        };
        // In place (the operand is the output: a state's slot) the copy is not needed.
        let mut thunks = Vec::new();
        if n.views[0] != n.out {
            thunks.push(copy(n.dtype(), whole, 0, 0, n.views[0], n.out));
        }
        if n.views[1].len > 0 {
            thunks.push(boxed(WindowCopy {
                dtype: n.dtype(),
                layout: layout.coalesced(),
                offsets: Offsets::of(n, 2, &self.axes, update),
                into_window: true,
                src: n.views[1],
                dst: n.out,
            }));
        }
        thunks
    }
}

//! The sort thunk: sort, argsort and top-k.

use super::geometry::axis3;
use super::{Lower, LowerInput, Sizes, boxed};
use crate::backend::RunError;
use crate::cpu::kernels::numeric::FloatStore;
use crate::cpu::kernels::reduce::Axis3;
use crate::cpu::kernels::sort::sort_lines;
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel, float_type, int_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, DType, SortOutput};

/// The first `keep` positions of each line along the middle axis, in sorted order: values
/// or their `i64` indices.
#[derive(Clone, Debug)]
pub(crate) struct Sort {
    pub dtype: DType,
    pub shape: Axis3,
    pub descending: bool,
    pub keep: usize,
    pub output: SortOutput,
    pub x: View,
    pub out: View,
    /// One line's order (`u32` positions).
    pub order: View,
}

impl Sort {
    /// Sorts by `key` (NaN per `is_nan`, largest) and writes the kept positions.
    fn run<T: bytemuck::Pod + Send + Sync, K: PartialOrd>(
        &self,
        mem: &Memory,
        key: impl Fn(T) -> K,
        is_nan: impl Fn(&K) -> bool,
    ) {
        let (shape, keep) = (self.shape, self.keep);
        let xs = mem.src::<T>(self.x);
        let order = mem.dst::<u32>(self.order);
        match self.output {
            SortOutput::Indices => {
                let out = mem.dst::<i64>(self.out);
                sort_lines(
                    shape,
                    self.descending,
                    xs,
                    key,
                    is_nan,
                    order,
                    |o, i, ord| {
                        for (r, k) in ord[..keep].iter().enumerate() {
                            out[(o * keep + r) * shape.inner + i] = i64::from(*k);
                        }
                    },
                )
            }
            SortOutput::Values => {
                let out = mem.dst::<T>(self.out);
                sort_lines(
                    shape,
                    self.descending,
                    xs,
                    key,
                    is_nan,
                    order,
                    |o, i, ord| {
                        for (r, k) in ord[..keep].iter().enumerate() {
                            out[(o * keep + r) * shape.inner + i] =
                                xs[(o * shape.len + *k as usize) * shape.inner + i];
                        }
                    },
                )
            }
        }
    }
}

impl Kernel for Sort {
    fn accesses(&self) -> Accesses {
        let out_size = match self.output {
            SortOutput::Values => self.dtype.size_bytes(),
            SortOutput::Indices => 8,
        };
        Accesses {
            writes: vec![(self.out, out_size), (self.order, 4)],
            reads: vec![(self.x, self.dtype.size_bytes())],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        if self.dtype.is_float() {
            float_type!(self.dtype, |T| self.run(
                mem,
                |v: T| v.load(),
                |k: &<T as FloatStore>::Acc| k.is_nan()
            ))
        } else {
            int_type!(self.dtype, |T| self.run(mem, |v: T| v, |_: &T| false))
        }
        Ok(())
    }
}

/// The first `keep` positions of each line along `axis`, in sorted order.
fn sorted(
    n: &LowerInput<'_>,
    axis: usize,
    descending: bool,
    keep: usize,
    output: SortOutput,
) -> Vec<Thunk> {
    let shape = n.shapes[0];
    vec![boxed(Sort {
        dtype: n.dtypes[0],
        shape: axis3(shape, axis, axis),
        descending,
        keep,
        output,
        x: n.views[0],
        out: n.out,
        order: View {
            len: shape[axis],
            ..n.scratch[0]
        },
    })]
}

/// One line's order, as `u32` positions.
fn order_scratch(n: &Sizes<'_>, axis: usize) -> Vec<(DType, usize)> {
    vec![(DType::I32, n.operands[0][axis])]
}

impl Lower for ir::TopK {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        order_scratch(n, self.axis)
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        sorted(n, self.axis, true, self.k, self.output)
    }
}

impl Lower for ir::Sort {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        order_scratch(n, self.axis)
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let keep = n.shapes[0][self.axis];
        sorted(n, self.axis, self.descending, keep, self.output)
    }
}

//! Reduction, arg-reduction, cumulative-sum, softmax and normalization thunks.

use super::geometry::axis3;
use super::{Lower, LowerInput, boxed};
use crate::backend::RunError;
use crate::cpu::kernels::numeric::{FloatStore, Real};
use crate::cpu::kernels::reduce::{self, Axis3, NormKind};
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel, float_type, int_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, ArgReduceOp, DType, ReduceOp};

/// A reduction over the middle axis of `[outer, len, inner]`.
#[derive(Clone, Debug)]
pub(crate) struct Reduce {
    pub op: ReduceOp,
    pub dtype: DType,
    pub shape: Axis3,
    pub x: View,
    pub out: View,
}

impl Kernel for Reduce {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.x, self.out, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (op, shape, x, out) = (self.op, self.shape, self.x, self.out);
        if self.dtype.is_float() {
            float_type!(self.dtype, |T| reduce::reduce_float::<T>(
                op,
                shape,
                mem.src(x),
                mem.dst(out)
            ))
        } else {
            int_type!(self.dtype, |T| reduce::reduce_int::<T>(
                op,
                shape,
                mem.src(x),
                mem.dst(out)
            ))
        }
        Ok(())
    }
}

/// Argmax or argmin over the middle axis, as `i64`.
#[derive(Clone, Debug)]
pub(crate) struct ArgReduce {
    pub op: ArgReduceOp,
    pub dtype: DType,
    pub shape: Axis3,
    pub x: View,
    pub out: View,
}

/// Whether `candidate` beats `best` for `op`: a NaN wins (as in numpy), then strictly
/// better values, so the first of equal values stays.
fn float_beats<T: FloatStore>(op: ArgReduceOp) -> fn(T, T) -> bool {
    match op {
        ArgReduceOp::ArgMax => |c, b| {
            let (c, b) = (c.load(), b.load());
            !b.is_nan() && (c.is_nan() || c > b)
        },
        ArgReduceOp::ArgMin => |c, b| {
            let (c, b) = (c.load(), b.load());
            !b.is_nan() && (c.is_nan() || c < b)
        },
    }
}

fn int_beats<T: PartialOrd>(op: ArgReduceOp) -> fn(T, T) -> bool {
    match op {
        ArgReduceOp::ArgMax => |c, b| c > b,
        ArgReduceOp::ArgMin => |c, b| c < b,
    }
}

impl Kernel for ArgReduce {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, 8)],
            reads: vec![(self.x, self.dtype.size_bytes())],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let out = mem.dst::<i64>(self.out);
        let (op, shape, x) = (self.op, self.shape, self.x);
        let largest = op == ArgReduceOp::ArgMax;
        if self.dtype.is_float() && shape.inner == 1 {
            float_type!(self.dtype, |T| reduce::arg_reduce_last(
                shape,
                mem.src::<T>(x),
                out,
                largest
            ))
        } else if self.dtype.is_float() {
            float_type!(self.dtype, |T| reduce::arg_reduce(
                shape,
                mem.src::<T>(x),
                out,
                float_beats::<T>(op)
            ))
        } else {
            int_type!(self.dtype, |T| reduce::arg_reduce(
                shape,
                mem.src::<T>(x),
                out,
                int_beats::<T>(op)
            ))
        }
        Ok(())
    }
}

/// A running sum along the middle axis.
#[derive(Clone, Debug)]
pub(crate) struct Cumsum {
    pub dtype: DType,
    pub shape: Axis3,
    pub exclusive: bool,
    pub reverse: bool,
    pub x: View,
    pub out: View,
}

impl Kernel for Cumsum {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.x, self.out, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (shape, ex, rev, x, out) = (self.shape, self.exclusive, self.reverse, self.x, self.out);
        if self.dtype.is_float() {
            float_type!(self.dtype, |T| reduce::cumsum::<T>(
                shape,
                ex,
                rev,
                mem.src(x),
                mem.dst(out)
            ))
        } else {
            int_type!(self.dtype, |T| reduce::cumsum::<T>(
                shape,
                ex,
                rev,
                mem.src(x),
                mem.dst(out)
            ))
        }
        Ok(())
    }
}

/// A linear recurrence along the middle axis.
#[derive(Clone, Debug)]
pub(crate) struct LinearScan {
    pub dtype: DType,
    pub shape: Axis3,
    pub reverse: bool,
    pub a: View,
    pub b: View,
    /// The state before the first step, `[outer, inner]`, when there is one.
    pub start: Option<View>,
    pub out: View,
}

impl Kernel for LinearScan {
    fn accesses(&self) -> Accesses {
        let size = self.dtype.size_bytes();
        let mut reads = vec![(self.a, size), (self.b, size)];
        reads.extend(self.start.map(|v| (v, size)));
        Accesses {
            writes: vec![(self.out, size)],
            reads,
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (shape, reverse, a, b, out) = (self.shape, self.reverse, self.a, self.b, self.out);
        float_type!(self.dtype, |T| reduce::linear_scan::<T>(
            shape,
            reverse,
            mem.src(a),
            mem.src(b),
            self.start.map(|v| mem.src(v)),
            mem.dst(out)
        ));
        Ok(())
    }
}

/// Softmax or log-softmax along the middle axis.
#[derive(Clone, Debug)]
pub(crate) struct Softmax {
    pub log: bool,
    pub dtype: DType,
    pub shape: Axis3,
    pub x: View,
    pub out: View,
}

impl Kernel for Softmax {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.x, self.out, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (log, shape, x, out) = (self.log, self.shape, self.x, self.out);
        float_type!(self.dtype, |T| reduce::softmax::<T>(
            log,
            shape,
            mem.src(x),
            mem.dst(out)
        ));
        Ok(())
    }
}

/// Layer or RMS norm over rows of `features` elements.
#[derive(Clone, Debug)]
pub(crate) struct Norm {
    pub kind: NormKind,
    pub eps: f64,
    pub dtype: DType,
    pub features: usize,
    pub x: View,
    pub weight: Option<View>,
    pub bias: Option<View>,
    pub out: View,
}

impl Kernel for Norm {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let reads = std::iter::once(self.x)
            .chain(self.weight)
            .chain(self.bias)
            .map(|v| (v, s))
            .collect();
        Accesses {
            writes: vec![(self.out, s)],
            reads,
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| reduce::norm::<T>(
            self.kind,
            self.eps,
            self.features,
            mem.src(self.x),
            self.weight.map(|w| mem.src(w)),
            self.bias.map(|b| mem.src(b)),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

/// One block of adjacent axes (`legalize` splits reductions into blocks).
impl Lower for ir::Reduce {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let (first, last) = (self.axes[0], self.axes[self.axes.len() - 1]);
        debug_assert_eq!(
            last - first + 1,
            self.axes.len(),
            "legalize splits reductions into blocks"
        );
        vec![boxed(Reduce {
            op: self.op,
            dtype: n.dtype(),
            shape: axis3(n.shapes[0], first, last),
            x: n.views[0],
            out: n.out,
        })]
    }
}

impl Lower for ir::ArgReduce {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(ArgReduce {
            op: self.op,
            dtype: n.dtypes[0],
            shape: axis3(n.shapes[0], self.axis, self.axis),
            x: n.views[0],
            out: n.out,
        })]
    }
}

impl Lower for ir::Cumsum {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Cumsum {
            dtype: n.dtype(),
            shape: axis3(n.shapes[0], self.axis, self.axis),
            exclusive: self.exclusive,
            reverse: self.reverse,
            x: n.views[0],
            out: n.out,
        })]
    }
}

impl Lower for ir::LinearScan {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(LinearScan {
            dtype: n.dtype(),
            shape: axis3(n.shapes[0], self.axis, self.axis),
            reverse: self.reverse,
            a: n.views[0],
            b: n.views[1],
            start: n.views.get(2).copied(),
            out: n.out,
        })]
    }
}

/// A kernel of its own for the composite: one pass per line, max and sum kept in registers.
impl Lower for ir::Softmax {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Softmax {
            log: self.log,
            dtype: n.dtype(),
            shape: axis3(n.shapes[0], self.axis, self.axis),
            x: n.views[0],
            out: n.out,
        })]
    }
}

/// A kernel of its own for the composite (statistics in the accumulator type).
impl Lower for ir::LayerNorm {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let weight = self.has_weight.then(|| n.views[1]);
        let bias = self
            .has_bias
            .then(|| n.views[1 + usize::from(self.has_weight)]);
        norm(n, NormKind::Layer, self.eps, weight, bias)
    }
}

/// A kernel of its own for the composite, as layer norm.
impl Lower for ir::RmsNorm {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let weight = self.has_weight.then(|| n.views[1]);
        norm(n, NormKind::Rms, self.eps, weight, None)
    }
}

fn norm(
    n: &LowerInput<'_>,
    kind: NormKind,
    eps: f64,
    weight: Option<View>,
    bias: Option<View>,
) -> Vec<Thunk> {
    vec![boxed(Norm {
        kind,
        eps,
        dtype: n.dtype(),
        features: *n.out_shape.last().unwrap_or(&1),
        x: n.views[0],
        weight,
        bias,
        out: n.out,
    })]
}

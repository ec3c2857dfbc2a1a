//! Unary, binary, comparison, `where` and cast thunks.

use super::geometry::numel;
use super::{Lower, LowerInput, boxed};
use crate::backend::RunError;
use crate::cpu::fuse::ElementwiseStep;
use crate::cpu::kernels::cast::{BoolByte, CastFrom};
use crate::cpu::kernels::elementwise as ew;
use crate::cpu::kernels::layout::Strided;
use crate::cpu::kernels::numeric::FloatStore;
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel, float_type, int_type, word_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, BinaryOp, CompareOp, DType, UnaryOp};

/// `out = kind(x)`.
#[derive(Clone, Debug)]
pub(crate) struct Unary {
    pub kind: UnaryOp,
    pub dtype: DType,
    pub x: View,
    pub out: View,
}

impl Kernel for Unary {
    fn accesses(&self) -> Accesses {
        Accesses::one_to_one(self.x, self.out, self.dtype.size_bytes())
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (x, out) = (self.x, self.out);
        if self.dtype.is_float() {
            float_type!(self.dtype, |T| ew::unary_float::<T>(
                self.kind,
                mem.src(x),
                mem.dst(out)
            ))
        } else {
            int_type!(self.dtype, |T| ew::unary_int::<T>(
                self.kind,
                mem.src(x),
                mem.dst(out)
            ))
        }
        Ok(())
    }
}

/// `out` = a chain of elementwise float ops in one pass (see [`ew::fused_float`]).
#[derive(Clone, Debug)]
pub(crate) struct FusedElementwise {
    pub steps: Vec<ElementwiseStep>,
    pub dtype: DType,
    pub operands: Vec<FusedInput>,
    pub out: View,
}

/// Where an operand of a fused chain is read from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum FusedInput {
    /// A tensor of the output's shape.
    Full(View),
    /// One element, read once for every element.
    Scalar(View),
    /// One value per row of the output (rows of the given length).
    PerRow(View, usize),
    /// One row (of the given length) repeated for every row of the output.
    OneRow(View, usize),
    /// The output's own memory, read element by element before it is overwritten (a
    /// state updated in place, see `program::in_place_writes`).
    Output,
}

impl Kernel for FusedElementwise {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let reads = self.operands.iter().filter_map(|input| match input {
            FusedInput::Full(v)
            | FusedInput::Scalar(v)
            | FusedInput::PerRow(v, _)
            | FusedInput::OneRow(v, _) => Some((*v, s)),
            FusedInput::Output => None,
        });
        Accesses {
            writes: vec![(self.out, s)],
            reads: reads.collect(),
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| {
            // A fixed array, so a run allocates nothing.
            let operands: [ew::FusedOperand<'_, T>; ElementwiseStep::MAX_VALUES] =
                std::array::from_fn(|i| match self.operands.get(i) {
                    Some(&FusedInput::Scalar(view)) => {
                        ew::FusedOperand::Scalar(mem.src::<T>(view)[0])
                    }
                    Some(&FusedInput::Full(view)) => ew::FusedOperand::Full(mem.src::<T>(view)),
                    Some(&FusedInput::PerRow(view, len)) => {
                        ew::FusedOperand::PerRow(mem.src::<T>(view), len)
                    }
                    Some(&FusedInput::OneRow(view, len)) => {
                        ew::FusedOperand::OneRow(mem.src::<T>(view), len)
                    }
                    Some(FusedInput::Output) => ew::FusedOperand::Output,
                    None => ew::FusedOperand::Full(&[]),
                });
            ew::fused_float::<T>(
                &self.steps,
                &operands[..self.operands.len()],
                mem.dst(self.out),
            )
        });
        Ok(())
    }
}

/// `out = kind(a, b)` with broadcasting.
#[derive(Clone, Debug)]
pub(crate) struct Binary {
    pub kind: BinaryOp,
    pub dtype: DType,
    pub layout: Strided<2>,
    pub a: View,
    pub b: View,
    pub out: View,
}

impl Kernel for Binary {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, s)],
            reads: vec![(self.a, s), (self.b, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (k, l) = (self.kind, &self.layout);
        let (a, b, out) = (self.a, self.b, self.out);
        if self.dtype.is_float() {
            float_type!(self.dtype, |T| ew::binary_float::<T>(
                k,
                l,
                mem.src(a),
                mem.src(b),
                mem.dst(out)
            ))
        } else {
            int_type!(self.dtype, |T| ew::binary_int::<T>(
                k,
                l,
                mem.src(a),
                mem.src(b),
                mem.dst(out)
            ))
        }
        Ok(())
    }
}

/// `out = a <kind> b` as `bool`, with broadcasting; `dtype` is the operands'.
#[derive(Clone, Debug)]
pub(crate) struct Compare {
    pub kind: CompareOp,
    pub dtype: DType,
    pub layout: Strided<2>,
    pub a: View,
    pub b: View,
    pub out: View,
}

fn float_key<T: FloatStore>(v: T) -> T::Acc {
    v.load()
}

impl Kernel for Compare {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, 1)],
            reads: vec![(self.a, s), (self.b, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (k, l) = (self.kind, &self.layout);
        let (a, b) = (self.a, self.b);
        let out = mem.dst::<u8>(self.out);
        match self.dtype {
            DType::Bool => ew::compare(k, l, mem.src::<u8>(a), mem.src(b), out, |v| v != 0),
            d if d.is_float() => float_type!(d, |T| ew::compare(
                k,
                l,
                mem.src::<T>(a),
                mem.src(b),
                out,
                float_key::<T>
            )),
            d => int_type!(d, |T| ew::compare(
                k,
                l,
                mem.src::<T>(a),
                mem.src(b),
                out,
                |v: T| v
            )),
        }
        Ok(())
    }
}

/// `out = cond ? a : b` with broadcasting.
#[derive(Clone, Debug)]
pub(crate) struct Select {
    pub dtype: DType,
    pub layout: Strided<3>,
    pub cond: View,
    pub a: View,
    pub b: View,
    pub out: View,
}

impl Kernel for Select {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        Accesses {
            writes: vec![(self.out, s)],
            reads: vec![(self.cond, 1), (self.a, s), (self.b, s)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let (c, a, b, out) = (self.cond, self.a, self.b, self.out);
        word_type!(self.dtype, |W| ew::select::<W>(
            &self.layout,
            mem.src(c),
            mem.src(a),
            mem.src(b),
            mem.dst(out)
        ));
        Ok(())
    }
}

/// Conversion between dtypes with Rust `as` semantics.
#[derive(Clone, Debug)]
pub(crate) struct Cast {
    pub from: DType,
    pub to: DType,
    pub x: View,
    pub out: View,
}

/// Runs `$body` with `$t` the cast type of any dtype.
macro_rules! cast_type {
    ($dtype:expr, |$t:ident| $body:expr) => {
        match $dtype {
            DType::Bool => {
                type $t = BoolByte;
                $body
            }
            d if d.is_float() => float_type!(d, |$t| $body),
            d => int_type!(d, |$t| $body),
        }
    };
}

fn cast<A: CastFrom + bytemuck::Pod, B: CastFrom + bytemuck::Pod>(mem: &Memory, c: &Cast) {
    ew::convert(mem.src::<A>(c.x), mem.dst::<B>(c.out), |v| {
        B::narrow(v.widen())
    });
}

impl Kernel for Cast {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, self.to.size_bytes())],
            reads: vec![(self.x, self.from.size_bytes())],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        cast_type!(self.from, |A| cast_type!(self.to, |B| cast::<A, B>(
            mem, self
        )));
        Ok(())
    }
}

/// The thunk of a chain of elementwise ops the CPU fused (`cpu::fuse::elementwise`): an
/// operand smaller than the output is read as the fuser admitted it (a scalar, a value per
/// row, one row), and an operand in the output's own memory (a state the chain updates in
/// place) from the output.
pub(super) fn fused(n: &LowerInput<'_>, steps: &[ElementwiseStep]) -> Vec<Thunk> {
    let out = n.out_shape;
    let row = out.last().copied().unwrap_or(1);
    vec![boxed(FusedElementwise {
        steps: steps.to_vec(),
        dtype: n.dtype(),
        operands: n
            .views
            .iter()
            .zip(&n.shapes)
            .map(|(view, shape)| {
                if *view == n.out {
                    FusedInput::Output
                } else if numel(shape) == numel(out) {
                    FusedInput::Full(*view)
                } else if numel(shape) == 1 {
                    FusedInput::Scalar(*view)
                } else if shape.len() == out.len() && shape.last() == Some(&1) {
                    FusedInput::PerRow(*view, row)
                } else {
                    FusedInput::OneRow(*view, row)
                }
            })
            .collect(),
        out: n.out,
    })]
}

impl Lower for UnaryOp {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Unary {
            kind: *self,
            dtype: n.dtype(),
            x: n.views[0],
            out: n.out,
        })]
    }
}

impl Lower for BinaryOp {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Binary {
            kind: *self,
            dtype: n.dtype(),
            layout: Strided::broadcast(n.out_shape, [n.shapes[0], n.shapes[1]]),
            a: n.views[0],
            b: n.views[1],
            out: n.out,
        })]
    }
}

impl Lower for CompareOp {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Compare {
            kind: *self,
            dtype: n.dtypes[0],
            layout: Strided::broadcast(n.out_shape, [n.shapes[0], n.shapes[1]]),
            a: n.views[0],
            b: n.views[1],
            out: n.out,
        })]
    }
}

impl Lower for crate::ops::Where {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Select {
            dtype: n.dtype(),
            layout: Strided::broadcast(n.out_shape, [n.shapes[0], n.shapes[1], n.shapes[2]]),
            cond: n.views[0],
            a: n.views[1],
            b: n.views[2],
            out: n.out,
        })]
    }
}

impl Lower for ir::Cast {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(Cast {
            from: n.dtypes[0],
            to: self.to,
            x: n.views[0],
            out: n.out,
        })]
    }
}

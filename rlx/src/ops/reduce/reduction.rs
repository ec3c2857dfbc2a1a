//! Reductions (sum, mean, max, min, prod over axes) and arg-reductions (argmax, argmin along
//! one axis), which share their output shape rule.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    ArgReduceOp, Cast, CompareOp, DType, Dim, InferError, NodeId, Op, ReduceOp, Shape, TensorType,
    attr_err,
};
use crate::ops::array::{Array, Out, for_each_index};
use crate::ops::check::{arity, check_axis, require_domain, require_numeric};
use crate::ops::sample::{Sampled, Sampler, axis_of, chance, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, flag};

/// Reduction over `axes` (sorted, unique, at least one). Operands: `x`. NaN propagates
/// through max and min. Over an empty axis, sum is 0, prod 1, and for floats mean is NaN and
/// max and min are −∞ and +∞.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// Function.
    pub op: ReduceOp,
    /// Axes reduced.
    pub axes: Vec<usize>,
    /// Keep reduced axes as size 1.
    pub keep_dims: bool,
}

/// Argmax/argmin along one axis, as `i64`; the first of equal best values wins. Operands:
/// `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct ArgReduce {
    /// Function.
    pub op: ArgReduceOp,
    /// Axis reduced.
    pub axis: usize,
    /// Keep the axis as size 1.
    pub keep_dims: bool,
}

impl Primitive for Reduce {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axes={:?}", self.axes));
        flag(out, self.keep_dims, "keep_dims");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Reduce(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        reduce_type(self.op, &self.axes, self.keep_dims, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        reduce_vjp(e, self.op, x[0], &self.axes, y, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        let dims = x.dims(0);
        let n = self
            .axes
            .iter()
            .map(|&a| dims.get(a).copied().unwrap_or(1))
            .product::<usize>()
            .max(1) as f64;
        let (u, scale) = (x.u, x.scale);
        match self.op {
            ReduceOp::Max | ReduceOp::Min => Bound::Exact,
            ReduceOp::Sum => x.sum(n),
            ReduceOp::Mean => Bound::Within {
                rel: 2.0 * u,
                abs: 2.0 * u * n * scale + x.tiny,
                growth: n * scale,
            },
            ReduceOp::Prod => Bound::Within {
                rel: 4.0 * u * n,
                abs: x.tiny,
                growth: scale.powf(n),
            },
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(reduce_value(
            self.op,
            &self.axes,
            self.keep_dims,
            &x[0],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_reduce(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for ArgReduce {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.keep_dims, "keep_dims");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ArgReduce(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arg_reduce_type(self.axis, self.keep_dims, inputs)
    }

    /// Its result is `i64`: the driver gives its operand nothing before asking.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::None; x.len()])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(arg_reduce_value(
            self.op,
            self.axis,
            self.keep_dims,
            &x[0],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_arg_reduce(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn reduce_type(
    op: ReduceOp,
    axes: &[usize],
    keep_dims: bool,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_domain(inputs, 0, op.domain())?;
    if axes.is_empty() {
        return Err(attr_err!("a reduction needs at least one axis"));
    }
    if !axes.windows(2).all(|w| w[0] < w[1]) {
        return Err(attr_err!("axes {axes:?} must be sorted and unique"));
    }
    for &axis in axes {
        check_axis(axis, inputs[0].rank())?;
    }
    Ok(TensorType::new(
        inputs[0].dtype,
        reduced_shape(&inputs[0].shape, axes, keep_dims),
    ))
}

fn arg_reduce_type(
    axis: usize,
    keep_dims: bool,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(TensorType::new(
        DType::I64,
        reduced_shape(&inputs[0].shape, &[axis], keep_dims),
    ))
}

fn reduce_vjp(
    e: &mut Emitter<'_>,
    op: ReduceOp,
    x: NodeId,
    axes: &[usize],
    y: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let shape = e.shape(x);
    let keep = kept(&shape, axes);
    let g_keep = e.reshape(g, keep.clone())?;
    let spread = e.broadcast(g_keep, shape.clone())?;
    let dtype = e.dtype(x);
    let grad = match op {
        ReduceOp::Sum => spread,
        ReduceOp::Mean => {
            let n = e.count(&shape, axes, dtype)?;
            e.div(spread, n)?
        }
        ReduceOp::Max | ReduceOp::Min => {
            // Split evenly between the elements equal to the extreme.
            let y_keep = e.reshape(y, keep)?;
            let hit = e.op(Op::Compare(CompareOp::Eq), &[x, y_keep])?;
            let hit = e.op(Op::Cast(Cast { to: dtype }), &[hit])?;
            let ties = e.reduce(ReduceOp::Sum, hit, axes.to_vec(), true)?;
            let share = e.div(hit, ties)?;
            e.mul(spread, share)?
        }
        ReduceOp::Prod => {
            // ∂/∂xᵢ = Π_{j≠i} xⱼ: y/xᵢ where xᵢ ≠ 0; at a zero, the product of the others
            // when it is the only zero, else 0.
            let zero = e.scalar(0.0, dtype);
            let one = e.scalar(1.0, dtype);
            let is_zero = e.op(Op::Compare(CompareOp::Eq), &[x, zero])?;
            let y_keep = e.reshape(y, keep)?;
            let others = e.div(y_keep, x)?;
            let nonzero = e.op(Op::Where, &[is_zero, one, x])?;
            let nonzero_prod = e.reduce(ReduceOp::Prod, nonzero, axes.to_vec(), true)?;
            let zeros = e.op(Op::Cast(Cast { to: dtype }), &[is_zero])?;
            let zeros = e.reduce(ReduceOp::Sum, zeros, axes.to_vec(), true)?;
            let single = e.op(Op::Compare(CompareOp::Eq), &[zeros, one])?;
            let at_zero = e.keep_where(single, nonzero_prod)?;
            let d = e.op(Op::Where, &[is_zero, at_zero, others])?;
            e.mul(spread, d)?
        }
    };
    Ok(vec![Grad::Some(grad)])
}

/// `op` over `axes` of `x`. Over nothing: 0 for a sum, 1 for a product, NaN for a mean;
/// ∓∞ for a float max/min and 0 for an integer one (integers have no identity for them).
fn reduce_value(op: ReduceOp, axes: &[usize], keep_dims: bool, x: &Array, out: &Out) -> Array {
    let float = x.dtype.is_float();
    let reduced: Vec<usize> = axes.iter().map(|a| x.shape[*a]).collect();
    // The input index an output index and an index of the reduced axes name.
    let source = |o: &[usize], r: &[usize]| -> Vec<usize> {
        let mut kept = o.iter();
        let mut red = r.iter();
        (0..x.shape.len())
            .map(|a| {
                if axes.contains(&a) {
                    if keep_dims {
                        kept.next();
                    }
                    *red.next().expect("one per reduced axis")
                } else {
                    *kept.next().expect("one per kept axis")
                }
            })
            .collect()
    };
    out.fill(|o| {
        let mut vals = Vec::new();
        for_each_index(&reduced, |r| vals.push(x.at(&source(o, r))));
        let nan = vals.iter().any(|v| v.is_nan());
        let ints = vals.iter().map(|v| *v as i64);
        // Integers wrap exactly as two's complement does: in 64 bits, then cut to the
        // output's width before float64 (which holds only 53 of the 64 bits) sees them.
        let narrow = |v: i64| match out.dtype {
            DType::I32 => f64::from(v as i32),
            DType::I8 => f64::from(v as i8),
            DType::U8 => f64::from(v as u8),
            _ => v as f64,
        };
        match op {
            ReduceOp::Sum if !float => narrow(ints.fold(0, i64::wrapping_add)),
            ReduceOp::Prod if !float => narrow(ints.fold(1, i64::wrapping_mul)),
            ReduceOp::Sum => vals.iter().sum(),
            ReduceOp::Mean => vals.iter().sum::<f64>() / vals.len() as f64,
            ReduceOp::Prod => vals.iter().product(),
            ReduceOp::Max | ReduceOp::Min if nan => f64::NAN,
            ReduceOp::Max if vals.is_empty() && !float => 0.0,
            ReduceOp::Min if vals.is_empty() && !float => 0.0,
            ReduceOp::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ReduceOp::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
        }
    })
}

/// The first position along `axis` of the largest (smallest) value, a NaN counting as
/// beyond every number.
fn arg_reduce_value(op: ArgReduceOp, axis: usize, keep_dims: bool, x: &Array, out: &Out) -> Array {
    out.fill(|o| {
        let mut at = o.to_vec();
        if !keep_dims {
            at.insert(axis, 0);
        }
        let line = x.line(&at, axis);
        let mut best = 0;
        for (k, v) in line.iter().enumerate().skip(1) {
            let cur = line[best];
            let better = match op {
                ArgReduceOp::ArgMax => v > &cur,
                ArgReduceOp::ArgMin => v < &cur,
            };
            if !cur.is_nan() && (v.is_nan() || better) {
                best = k;
            }
        }
        best as f64
    })
}

/// A random non-empty set of a numeric operand's axes.
fn random_reduce(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype != DType::Bool && t.rank() > 0)?;
    let rank = s.ty(x).rank();
    let mut axes: Vec<usize> = (0..rank).filter(|_| chance(s, 0.5)).collect();
    if axes.is_empty() {
        axes.push(s.below(rank));
    }
    let op = pick(s, &ReduceOp::ALL);
    let keep_dims = chance(s, 0.5);
    let op = Op::Reduce(Reduce {
        op,
        axes,
        keep_dims,
    });
    Some((op, vec![x]))
}

fn random_arg_reduce(s: &mut dyn Sampler) -> Sampled {
    let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
    let op = pick(s, &ArgReduceOp::ALL);
    let keep_dims = chance(s, 0.5);
    let op = Op::ArgReduce(ArgReduce {
        op,
        axis,
        keep_dims,
    });
    Some((op, vec![x]))
}

fn reduced_shape(shape: &Shape, axes: &[usize], keep_dims: bool) -> Shape {
    let mut dims = Vec::with_capacity(shape.rank());
    for (i, d) in shape.dims().iter().enumerate() {
        if !axes.contains(&i) {
            dims.push(d.clone());
        } else if keep_dims {
            dims.push(Dim::Static(1));
        }
    }
    Shape::new(dims)
}

/// `shape` with `axes` kept as size 1.
fn kept(shape: &Shape, axes: &[usize]) -> Shape {
    Shape::new(shape.dims().iter().enumerate().map(|(i, d)| {
        if axes.contains(&i) {
            Dim::Static(1)
        } else {
            d.clone()
        }
    }))
}

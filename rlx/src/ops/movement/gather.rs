//! Gather and its adjoint scatter-add: rows read and accumulated at run-time indices along
//! an axis, which share their index rules.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{ConstantData, DType, Dim, InferError, NodeId, Op, Shape, TensorType, attr_err};
use crate::ops::array::{Array, Out, for_each_index};
use crate::ops::check::{arity, check_axis, min_rank, require_index, require_numeric, same_dtype};
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Take along `axis` (`numpy.take`, embedding lookup): output dims are
/// `data[..axis] ++ indices ++ data[axis+1..]`. Operands: `data`, `indices` (`i32`/`i64`).
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    /// Axis indexed.
    pub axis: usize,
}

/// The adjoint of [`Op::Gather`]: adds `updates` into a copy of `data` at `indices` along
/// `axis`; repeated indices accumulate. Operands: `data`, `indices`, `updates` (shaped
/// like the gather output).
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterAdd {
    /// Axis indexed.
    pub axis: usize,
}

impl Primitive for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    axis_attrs!();

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Gather(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        gather_type(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        gather_vjp(e, x[0], x[1], self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        gather_value(self.axis, x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_gather(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for ScatterAdd {
    fn name(&self) -> &'static str {
        "scatter_add"
    }

    axis_attrs!();

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::ScatterAdd(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        scatter_add_type(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        scatter_add_vjp(e, x[1], self.axis, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // A sum of each position's updates.
        let n = x.dims(2).iter().product::<usize>().max(1) as f64;
        Bound::Within {
            rel: 2.0 * x.u,
            abs: 2.0 * x.u * n * x.scale + x.tiny,
            growth: n * x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        scatter_add_value(self.axis, x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_scatter_add(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn gather_type(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2 (data, indices)")?;
    require_index(inputs, 1)?;
    min_rank(inputs, 0, 1)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(TensorType::new(
        inputs[0].dtype,
        gathered_shape(&inputs[0].shape, &inputs[1].shape, axis),
    ))
}

fn scatter_add_type(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 3, "3 (data, indices, updates)")?;
    require_numeric(inputs, 0)?;
    require_index(inputs, 1)?;
    same_dtype(inputs, 0, 2)?;
    min_rank(inputs, 0, 1)?;
    check_axis(axis, inputs[0].rank())?;
    let expected = gathered_shape(&inputs[0].shape, &inputs[1].shape, axis);
    if inputs[2].shape != expected {
        return Err(attr_err!(
            "updates must have shape {expected} (data dims around axis {axis} with the index \
             dims in between), got {}",
            inputs[2].shape
        ));
    }
    Ok(inputs[0].clone())
}

/// Gathered rows send their gradient back to where they came from (summed over repeats).
fn gather_vjp(
    e: &mut Emitter<'_>,
    data: NodeId,
    indices: NodeId,
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let zeros = e.zeros_like(data)?;
    let grad = e.op(Op::ScatterAdd(ScatterAdd { axis }), &[zeros, indices, g])?;
    Ok(vec![Grad::Some(grad), Grad::Discrete])
}

/// `data` passes `g` through; each update receives `g` at the position it was added to.
fn scatter_add_vjp(
    e: &mut Emitter<'_>,
    indices: NodeId,
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let updates = e.op(Op::Gather(Gather { axis }), &[g, indices])?;
    Ok(vec![Grad::Some(g), Grad::Discrete, Grad::Some(updates)])
}

fn gather_value(axis: usize, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
    let (data, indices) = (&x[0], &x[1]);
    for i in 0..indices.data.len() {
        index(indices, i, data.shape[axis])?;
    }
    Ok(out.fill(|o| {
        let chosen = indices.data[index_position(o, axis, indices)] as usize;
        data.at(&data_index(o, axis, indices, chosen))
    }))
}

fn scatter_add_value(axis: usize, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
    let (data, indices, updates) = (&x[0], &x[1], &x[2]);
    let size = data.shape[axis];
    let mut result = data.clone();
    let strides = data.strides();
    let mut failed = None;
    for_each_index(&updates.shape, |u| {
        match index(indices, index_position(u, axis, indices), size) {
            Ok(chosen) => {
                let at = data_index(u, axis, indices, chosen);
                let flat: usize = at.iter().zip(&strides).map(|(i, s)| i * s).sum();
                let (old, update) = (result.data[flat], updates.at(u));
                result.data[flat] = if data.dtype.is_float() {
                    old + update
                } else {
                    (old as i64).wrapping_add(update as i64) as f64
                };
            }
            Err(e) => failed = failed.take().or(Some(e)),
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(out.holding(result.data)),
    }
}

/// Up to four valid indices for the case's sizes (`i32` or `i64` constants).
fn random_gather(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.rank() > 0)?;
    let axis = s.below(s.ty(x).rank());
    let size = s.sizes(x)[axis];
    let count = if size == 0 { 0 } else { s.below(5) };
    let indices: Vec<i64> = (0..count).map(|_| s.below(size) as i64).collect();
    let data = if pick(s, &[DType::I32, DType::I64]) == DType::I32 {
        let narrow: Vec<i32> = indices.iter().map(|&i| i as i32).collect();
        ConstantData::from_slice(&narrow, [count])
    } else {
        ConstantData::from_slice(&indices, [count])
    };
    let idx = s.constant(data.ok()?)?;
    Some((Op::Gather(Gather { axis }), vec![x, idx]))
}

/// Valid, sometimes repeated, indices and new updates of the fitting dims.
fn random_scatter_add(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype != DType::Bool && t.rank() > 0)?;
    let ty = s.ty(x);
    let axis = s.below(ty.rank());
    let size = s.sizes(x)[axis];
    let count = if size == 0 { 0 } else { 1 + s.below(4) };
    let indices: Vec<i64> = (0..count).map(|_| s.below(size) as i64).collect();
    let idx = s.constant(ConstantData::from_slice(&indices, [count]).ok()?)?;
    let mut updates = ty.shape.dims().to_vec();
    updates[axis] = Dim::from(count);
    let updates = s.input(ty.dtype, updates)?;
    Some((Op::ScatterAdd(ScatterAdd { axis }), vec![x, idx, updates]))
}

/// `data[..axis] ++ indices ++ data[axis+1..]`.
fn gathered_shape(data: &Shape, indices: &Shape, axis: usize) -> Shape {
    let mut dims = data.dims()[..axis].to_vec();
    dims.extend_from_slice(indices.dims());
    dims.extend_from_slice(&data.dims()[axis + 1..]);
    Shape::new(dims)
}

/// Index `i` of `indices` checked against an axis of `size`.
fn index(indices: &Array, i: usize, size: usize) -> Result<usize, ReferenceError> {
    let v = indices.data[i] as i64;
    usize::try_from(v)
        .ok()
        .filter(|v| *v < size)
        .ok_or(ReferenceError::IndexOutOfRange { index: v, size })
}

/// The flat position in `indices` of the index the output (or update) index `o` uses.
fn index_position(o: &[usize], axis: usize, indices: &Array) -> usize {
    let mut flat = 0;
    for (k, d) in indices.shape.iter().enumerate() {
        flat = flat * d + o[axis + k];
    }
    flat
}

/// The data index an output index `o` of a gather (or an update index of a scatter) reads:
/// the axes before `axis`, the chosen index, then the axes after the indices'.
fn data_index(o: &[usize], axis: usize, indices: &Array, chosen: usize) -> Vec<usize> {
    let mut at = o[..axis].to_vec();
    at.push(chosen);
    at.extend_from_slice(&o[axis + indices.shape.len()..]);
    at
}

//! Windows at run-time offsets: `dynamic_slice` reads one, `slice_update` writes one. They
//! are each other's adjoint and share the offset rule: one offset per sliced axis, given
//! as an `i32`/`i64` vector (or a scalar when one axis is sliced), and a window that must
//! lie inside the axis (an offset that puts it outside is an error, never clamped: a
//! decode step writing past its cache's capacity must fail, not overwrite the last row).
//! An empty window touches nothing and is never outside.
//!
//! Offsets of shape `[R, axes]` give each row of axis 0 (`R` of them, axis 0 not sliced)
//! a window of its own: a batch of sequences, each writing its cache at its own position.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{ConstantData, DType, Dim, InferError, NodeId, Op, Shape, TensorType, attr_err};
use crate::ops::array::{Array, Out, for_each_index};
use crate::ops::check::{arity, require_index, same_dtype};
use crate::ops::sample::{Sampled, Sampler, chance, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// A window of `x` at run-time offsets: `x[o_0 : o_0 + sizes[0], ...]` along `axes`, whole
/// along the other axes (`jax.lax.dynamic_slice`, MLX's `slice` with an array of starts).
/// Operands: `x`, `offsets` (`i32`/`i64`, shape `[axes.len()]`, or `[]` for one axis; or
/// `[x.dims[0], axes.len()]`, one row of offsets per row of axis 0, which is then not
/// sliced). An offset outside `[0, size − window]` is
/// [`RunError::WindowOutOfRange`](crate::backend::RunError).
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicSlice {
    /// The axes sliced, strictly increasing.
    pub axes: Vec<usize>,
    /// The window's size along each of `axes`.
    pub sizes: Vec<Dim>,
}

/// `x` with `update` written over the window at run-time offsets along `axes` (the
/// window's size is `update`'s along `axes`; along the other axes `update` spans `x`).
/// Operands: `x`, `update` (of `x`'s dtype and rank), `offsets` as for [`DynamicSlice`].
/// A backend may write in place when `x` has no other use (a cache row appended).
#[derive(Clone, Debug, PartialEq)]
pub struct SliceUpdate {
    /// The axes the window is placed along, strictly increasing.
    pub axes: Vec<usize>,
}

impl Primitive for DynamicSlice {
    fn name(&self) -> &'static str {
        "dynamic_slice"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        let sizes: Vec<String> = self.sizes.iter().map(|d| d.to_string()).collect();
        out.push(format!("axes={:?}, sizes=[{}]", self.axes, sizes.join(",")));
    }

    fn bind_dims(&self, out: &[usize]) -> Op {
        Op::DynamicSlice(DynamicSlice {
            axes: self.axes.clone(),
            sizes: self.axes.iter().map(|&a| Dim::Static(out[a])).collect(),
        })
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 2, "2 (x, offsets)")?;
        check_offsets(&self.axes, inputs, 1)?;
        if self.sizes.len() != self.axes.len() {
            return Err(attr_err!(
                "dynamic_slice has {} axes but {} sizes",
                self.axes.len(),
                self.sizes.len()
            ));
        }
        let mut dims = inputs[0].shape.dims().to_vec();
        for (&axis, size) in self.axes.iter().zip(&self.sizes) {
            fits("a window", size, &dims[axis], axis)?;
            dims[axis] = size.clone();
        }
        Ok(TensorType::new(inputs[0].dtype, dims))
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        // The window's cotangent, put back where it was read; zeros elsewhere.
        let zeros = e.zeros_like(x[0])?;
        let update = SliceUpdate {
            axes: self.axes.clone(),
        };
        let grad = e.op(Op::SliceUpdate(update), &[zeros, g, x[1]])?;
        Ok(vec![Grad::Some(grad), Grad::Discrete])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let (data, offsets) = (&x[0], &x[1]);
        let starts = window_starts(&self.axes, offsets, &data.shape, &out.shape)?;
        let mut at = Vec::new();
        Ok(out.fill(|o| {
            let start = &starts[o[0].min(starts.len() - 1)];
            at.clear();
            at.extend(o.iter().zip(start).map(|(i, s)| i + s));
            data.at(&at)
        }))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let x = s.operand(&|t| t.rank() > 0)?;
        let sizes = s.sizes(x);
        let axes = random_axes(s, sizes.len());
        let window: Vec<usize> = axes.iter().map(|&a| s.below(sizes[a] + 1)).collect();
        let offsets = random_offsets(s, &axes, &sizes, &window)?;
        let sizes = window.into_iter().map(Dim::Static).collect();
        Some((
            Op::DynamicSlice(DynamicSlice { axes, sizes }),
            vec![x, offsets],
        ))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for SliceUpdate {
    fn name(&self) -> &'static str {
        "slice_update"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axes={:?}", self.axes));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::SliceUpdate(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 3, "3 (x, update, offsets)")?;
        same_dtype(inputs, 0, 1)?;
        check_offsets(&self.axes, inputs, 2)?;
        let (x, update) = (&inputs[0].shape, &inputs[1].shape);
        if update.rank() != x.rank() {
            return Err(InferError::Rank {
                operand: 1,
                expected: x.rank().to_string(),
                got: update.rank(),
            });
        }
        for (axis, (u, d)) in update.dims().iter().zip(x.dims()).enumerate() {
            if self.axes.contains(&axis) {
                fits("an update", u, d, axis)?;
            } else if u != d {
                return Err(attr_err!(
                    "the update must span axis {axis} ({d}) as it is not sliced, got {u}"
                ));
            }
        }
        Ok(inputs[0].clone())
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        // `x` is overwritten inside the window, so its cotangent has zeros there; the
        // update's is the window of `g`.
        let zeros = e.zeros_like(x[1])?;
        let axes = self.axes.clone();
        let dx = e.op(
            Op::SliceUpdate(SliceUpdate { axes: axes.clone() }),
            &[g, zeros, x[2]],
        )?;
        let update = e.shape(x[1]);
        let sizes = axes.iter().map(|&a| update[a].clone()).collect();
        let window = e.op(Op::DynamicSlice(DynamicSlice { axes, sizes }), &[g, x[2]])?;
        Ok(vec![Grad::Some(dx), Grad::Some(window), Grad::Discrete])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let (data, update, offsets) = (&x[0], &x[1], &x[2]);
        let starts = window_starts(&self.axes, offsets, &data.shape, &update.shape)?;
        let mut result = data.data.clone();
        let strides = data.strides();
        for_each_index(&update.shape, |u| {
            let start = &starts[u[0].min(starts.len() - 1)];
            let flat: usize = u
                .iter()
                .zip(start)
                .zip(&strides)
                .map(|((i, s), stride)| (i + s) * stride)
                .sum();
            result[flat] = update.at(u);
        });
        Ok(out.holding(result))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let x = s.operand(&|t| t.rank() > 0)?;
        let ty = s.ty(x);
        let sizes = s.sizes(x);
        let axes = random_axes(s, sizes.len());
        let window: Vec<usize> = axes.iter().map(|&a| s.below(sizes[a] + 1)).collect();
        let mut dims = ty.shape.dims().to_vec();
        for (&axis, &w) in axes.iter().zip(&window) {
            dims[axis] = Dim::Static(w);
        }
        let update = s.input(ty.dtype, dims)?;
        let offsets = random_offsets(s, &axes, &sizes, &window)?;
        Some((
            Op::SliceUpdate(SliceUpdate { axes }),
            vec![x, update, offsets],
        ))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

/// The axes are strictly increasing axes of `x` (operand 0) and operand `at` is an index
/// vector with one offset each (a scalar for a single axis), or one such vector per row
/// of `x`'s axis 0, which is then not an axis sliced.
fn check_offsets(axes: &[usize], inputs: &[TensorType], at: usize) -> Result<(), InferError> {
    let rank = inputs[0].rank();
    if axes.is_empty() {
        return Err(attr_err!("a window needs at least one axis"));
    }
    if let Some(&axis) = axes.iter().find(|&&a| a >= rank) {
        return Err(InferError::Axis { axis, rank });
    }
    if axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(attr_err!(
            "window axes {axes:?} must be strictly increasing"
        ));
    }
    require_index(inputs, at)?;
    let offsets = &inputs[at].shape;
    let one_each = Shape::new([Dim::Static(axes.len())]);
    let per_row = Shape::new([inputs[0].shape[0].clone(), Dim::Static(axes.len())]);
    if *offsets == one_each || (offsets.rank() == 0 && axes.len() == 1) {
        Ok(())
    } else if *offsets == per_row {
        if axes[0] == 0 {
            return Err(attr_err!(
                "offsets per row of axis 0 cannot slice axis 0 as well"
            ));
        }
        Ok(())
    } else {
        Err(attr_err!(
            "offsets must have shape {one_each} (one per axis{}) or {per_row} (one per \
             axis for each row of axis 0), got {offsets}",
            if axes.len() == 1 {
                ", or be a scalar"
            } else {
                ""
            }
        ))
    }
}

/// True when offsets of `offsets` dims give each row of axis 0 a window of its own.
pub(crate) fn offsets_per_row(offsets: &[usize]) -> bool {
    offsets.len() == 2
}

/// A window (or update) of `size` fits an axis of `dim` when both are known.
fn fits(what: &str, size: &Dim, dim: &Dim, axis: usize) -> Result<(), InferError> {
    match (size.as_static(), dim.as_static()) {
        (Some(s), Some(d)) if s > d => Err(attr_err!(
            "{what} of {s} does not fit axis {axis} of size {d}"
        )),
        _ => Ok(()),
    }
}

/// The window's first index along every axis of `shape` (0 off `axes`), from `offsets`,
/// each checked to keep the window of `window` dims inside (an empty window reads and
/// writes nothing, so it is never outside): one start, or one per row of axis 0 for
/// offsets per row.
fn window_starts(
    axes: &[usize],
    offsets: &Array,
    shape: &[usize],
    window: &[usize],
) -> Result<Vec<Vec<usize>>, ReferenceError> {
    if !offsets_per_row(&offsets.shape) {
        return Ok(vec![window_start(axes, &offsets.data, shape, window)?]);
    }
    if shape[0] == 0 {
        return Ok(vec![vec![0; shape.len()]]);
    }
    offsets
        .data
        .chunks_exact(axes.len())
        .map(|row| window_start(axes, row, shape, window))
        .collect()
}

/// One window's start (see [`window_starts`]), its offsets one per axis.
fn window_start(
    axes: &[usize],
    offsets: &[f64],
    shape: &[usize],
    window: &[usize],
) -> Result<Vec<usize>, ReferenceError> {
    let mut start = vec![0; shape.len()];
    if window.contains(&0) {
        return Ok(start);
    }
    for (k, &axis) in axes.iter().enumerate() {
        let offset = offsets[k] as i64;
        let (size, len) = (shape[axis], window[axis]);
        start[axis] = usize::try_from(offset)
            .ok()
            .filter(|o| o + len <= size)
            .ok_or(ReferenceError::WindowOutOfRange {
                offset,
                window: len,
                size,
            })?;
    }
    Ok(start)
}

/// One to all axes of a rank, increasing.
fn random_axes(s: &mut dyn Sampler, rank: usize) -> Vec<usize> {
    let first = s.below(rank);
    let mut axes = vec![first];
    axes.extend((first + 1..rank).filter(|_| chance(s, 0.3)));
    axes
}

/// Valid offsets for windows of `window` along `axes` of `sizes` (`i32` or `i64`, a scalar
/// now and then for one axis, one row of offsets per row of axis 0 now and then).
fn random_offsets(
    s: &mut dyn Sampler,
    axes: &[usize],
    sizes: &[usize],
    window: &[usize],
) -> Option<NodeId> {
    // Now and then a window per row of axis 0, when axis 0 is not sliced.
    let rows = (axes[0] > 0 && chance(s, 0.3)).then_some(sizes[0]);
    let mut values: Vec<i64> = Vec::new();
    for _ in 0..rows.unwrap_or(1) {
        for (&a, &w) in axes.iter().zip(window) {
            values.push(s.below(sizes[a] - w + 1) as i64);
        }
    }
    let scalar = rows.is_none() && axes.len() == 1 && chance(s, 0.5);
    let dims = Shape::new(match rows {
        Some(r) => vec![Dim::Static(r), Dim::Static(axes.len())],
        None if scalar => vec![],
        None => vec![Dim::Static(axes.len())],
    });
    let data = if pick(s, &[DType::I32, DType::I64]) == DType::I32 {
        let narrow: Vec<i32> = values.iter().map(|&v| v as i32).collect();
        ConstantData::from_slice(&narrow, dims.clone())
    } else {
        ConstantData::from_slice(&values, dims)
    };
    s.constant(data.ok()?)
}

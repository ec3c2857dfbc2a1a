//! Stable sort, argsort and top-k along an axis: one ordering rule, one gradient (through
//! the op's own indices).

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    DType, Dim, InferError, NodeId, Op, Permute, ReduceOp, ScatterAdd, Shape, SortOutput,
    TensorType, attr_err,
};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, check_axis, require_numeric};
use crate::ops::sample::{Sampled, Sampler, axis_of, chance, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, flag};

/// The `k` largest elements along an axis, largest first. `k` is checked against a
/// symbolic axis when its size is bound. Operands: `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    /// Elements kept.
    pub k: usize,
    /// Axis searched.
    pub axis: usize,
    /// Values or `i64` indices.
    pub output: SortOutput,
}

/// Stable sort along an axis. Operands: `x` (numeric).
#[derive(Clone, Debug, PartialEq)]
pub struct Sort {
    /// Axis sorted.
    pub axis: usize,
    /// Largest first.
    pub descending: bool,
    /// Values or `i64` indices (argsort).
    pub output: SortOutput,
}

impl Primitive for TopK {
    fn name(&self) -> &'static str {
        "topk"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("k={}, axis={}", self.k, self.axis));
        flag(out, self.output == SortOutput::Indices, "indices");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::TopK(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        topk_type(self.k, self.axis, self.output, inputs)
    }

    /// Through a one-hot of the op's own indices.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let indices = Op::TopK(TopK {
            output: SortOutput::Indices,
            ..self.clone()
        });
        select_back(e, x[0], indices, self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(sorted(self.axis, true, self.output, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
        let size = s.sizes(x)[axis];
        if size == 0 {
            return None;
        }
        let k = 1 + s.below(size);
        let output = pick(s, &SortOutput::ALL);
        Some((TopK { k, axis, output }.into(), vec![x]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

impl Primitive for Sort {
    fn name(&self) -> &'static str {
        match self.output {
            SortOutput::Values => "sort",
            SortOutput::Indices => "argsort",
        }
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.descending, "descending");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Sort(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        sort_type(self.axis, self.output, inputs)
    }

    /// Through a one-hot of the op's own indices.
    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let indices = Op::Sort(Sort {
            output: SortOutput::Indices,
            ..self.clone()
        });
        select_back(e, x[0], indices, self.axis, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(sorted(self.axis, self.descending, self.output, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let (x, axis) = axis_of(s, |d| d != DType::Bool)?;
        let descending = chance(s, 0.5);
        let output = pick(s, &SortOutput::ALL);
        let op = Sort {
            axis,
            descending,
            output,
        };
        Some((op.into(), vec![x]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn topk_type(
    k: usize,
    axis: usize,
    output: SortOutput,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    if k == 0 {
        return Err(attr_err!("k must be at least 1"));
    }
    if let Some(n) = inputs[0].shape[axis].as_static()
        && k > n
    {
        return Err(attr_err!("k = {k} exceeds the size {n} of axis {axis}"));
    }
    let mut dims = inputs[0].shape.dims().to_vec();
    dims[axis] = Dim::Static(k);
    Ok(TensorType::new(sorted_dtype(inputs, output), dims))
}

fn sort_type(
    axis: usize,
    output: SortOutput,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_numeric(inputs, 0)?;
    check_axis(axis, inputs[0].rank())?;
    Ok(TensorType::new(
        sorted_dtype(inputs, output),
        inputs[0].shape.clone(),
    ))
}

fn sorted_dtype(inputs: &[TensorType], output: SortOutput) -> DType {
    match output {
        SortOutput::Values => inputs[0].dtype,
        SortOutput::Indices => DType::I64,
    }
}

/// Sorted or top-k values came from the positions the same op's indices name: each value's
/// gradient is added back there. Rows are flattened into one axis (row `r`'s position `i`
/// is `r·n + i`), so one scatter-add does every row, in time and memory linear in the
/// values.
fn select_back(
    e: &mut Emitter<'_>,
    x: NodeId,
    indices_op: Op,
    axis: usize,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let shape = e.shape(x);
    let rank = shape.rank();
    let last = rank - 1;
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(axis, last);
    // A swap of two axes is its own inverse.
    let to_last = |e: &mut Emitter<'_>, t: NodeId| {
        if axis == last {
            Ok(t)
        } else {
            e.op(Op::Permute(Permute { perm: perm.clone() }), &[t])
        }
    };
    let indices = e.op(indices_op, &[x])?;
    let indices = to_last(e, indices)?;
    let g_last = to_last(e, g)?;
    let picked = e.shape(indices);
    let lead = &picked.dims()[..last];
    let rows = lead.iter().fold(Dim::Static(1), |r, d| r.mul(d));
    let (n, k) = (shape[axis].clone(), picked[last].clone());

    // Row offsets r·n, with n counted as a value (it may be a runtime dim).
    let one = e.int(1);
    let ones = e.broadcast(one, Shape::new([n.clone()]))?;
    let n_value = e.reduce(ReduceOp::Sum, ones, vec![0], false)?;
    let row = e.iota(rows.clone())?;
    let offsets = e.mul(row, n_value)?;
    let mut column = lead.to_vec();
    column.push(Dim::Static(1));
    let offsets = e.reshape(offsets, Shape::new(column))?;
    let indices = if e.dtype(indices) == DType::I64 {
        indices
    } else {
        e.op(Op::Cast(crate::ir::Cast { to: DType::I64 }), &[indices])?
    };
    let flat = e.add(indices, offsets)?;
    let flat = e.reshape(flat, Shape::new([rows.mul(&k)]))?;
    let updates = e.reshape(g_last, Shape::new([rows.mul(&k)]))?;
    let zeros = e.zeros(e.dtype(g), Shape::new([rows.mul(&n)]))?;
    let back = e.op(
        Op::ScatterAdd(ScatterAdd { axis: 0 }),
        &[zeros, flat, updates],
    )?;
    let mut whole = lead.to_vec();
    whole.push(n);
    let back = e.reshape(back, Shape::new(whole))?;
    let back = to_last(e, back)?;
    Ok(vec![Grad::Some(back)])
}

/// Positions along `axis` at `idx` ordered by value, stably (equal values keep their
/// order), NaN above every number.
fn order(x: &Array, idx: &[usize], axis: usize, descending: bool) -> (Vec<f64>, Vec<usize>) {
    let line = x.line(idx, axis);
    let mut positions: Vec<usize> = (0..line.len()).collect();
    positions.sort_by(|&a, &b| {
        let (p, q) = (line[a], line[b]);
        let ord = match (p.is_nan(), q.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => p.partial_cmp(&q).unwrap_or(Ordering::Equal),
        };
        if descending { ord.reverse() } else { ord }
    });
    (line, positions)
}

/// Element `o[axis]` of the line through `o` after ordering: its value or source position.
fn sorted(axis: usize, descending: bool, output: SortOutput, x: &Array, out: &Out) -> Array {
    // Each line is ordered once (its elements are not adjacent unless `axis` is last).
    let mut lines: HashMap<Vec<usize>, (Vec<f64>, Vec<usize>)> = HashMap::new();
    out.fill(|o| {
        let mut start = o.to_vec();
        start[axis] = 0;
        let (line, positions) = lines
            .entry(start)
            .or_insert_with_key(|start| order(x, start, axis, descending));
        let p = positions[o[axis]];
        match output {
            SortOutput::Values => line[p],
            SortOutput::Indices => p as f64,
        }
    })
}

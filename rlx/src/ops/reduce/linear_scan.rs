//! The first-order linear recurrence `h_t = a_t ⊙ h_{t-1} + b_t` along an axis: the scan
//! state-space layers (Mamba's selective scan, gated linear recurrences) are built on.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, Pad, Scalar, Slice, TensorType};
use crate::ops::array::{Array, Out, for_each_index, strides};
use crate::ops::check::{arity, check_axis, require_float, same_dim, same_dtype};
use crate::ops::sample::{Sampled, Sampler, axis_of, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, flag};

/// `h_t = a_t · h_{t-1} + b_t` along `axis`, from `h_{-1} = 0` (from the end of the axis,
/// `h_t = a_t · h_{t+1} + b_t`, when `reverse`). Operands: `a` (the decay) and `b` (the
/// input), floats of one type; the result has that type.
///
/// Every line along the axis is an independent recurrence. A starting state `h0` enters
/// as `b_0 + a_0 · h0`. The gradient is the same scan the other way: the adjoint `λ`
/// runs `λ_t = a_{t+1} · λ_{t+1} + g_t`, and `∂b = λ`, `∂a_t = λ_t · h_{t-1}`.
///
/// ```
/// use rlx::builder::GraphBuilder;
/// use rlx::ir::{DType, LinearScan, Op};
/// let mut g = GraphBuilder::new();
/// let a = g.input("a", DType::F32, [2, 16, 8])?;
/// let b = g.input("b", DType::F32, [2, 16, 8])?;
/// let h = g.op(Op::LinearScan(LinearScan { axis: 1, reverse: false }), &[a, b])?;
/// assert_eq!(g.ty(h).unwrap().shape, [2, 16, 8].into());
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LinearScan {
    /// Axis the recurrence runs along.
    pub axis: usize,
    /// Run from the end of the axis.
    pub reverse: bool,
}

impl Primitive for LinearScan {
    fn name(&self) -> &'static str {
        "linear_scan"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("axis={}", self.axis));
        flag(out, self.reverse, "reverse");
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::LinearScan(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        linear_scan_type(self.axis, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        linear_scan_vjp(e, self.axis, self.reverse, y, x[0], g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        linear_scan_bound(x, self.axis)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(linear_scan_value(
            self.axis,
            self.reverse,
            &x[0],
            &x[1],
            out,
        ))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_linear_scan(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn linear_scan_type(axis: usize, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 2, "2 (a, b)")?;
    require_float(inputs, 0)?;
    same_dtype(inputs, 0, 1)?;
    let (a, b) = (inputs[0].shape.dims(), inputs[1].shape.dims());
    if a.len() != b.len() {
        return Err(InferError::Rank {
            operand: 1,
            expected: a.len().to_string(),
            got: b.len(),
        });
    }
    check_axis(axis, a.len())?;
    for (da, db) in a.iter().zip(b) {
        same_dim("dims of a and b", da, db)?;
    }
    Ok(inputs[0].clone())
}

/// `x` moved one step along `axis`, towards the end (`later`: `out_t = x_{t-1}`) or
/// towards the start (`out_t = x_{t+1}`), the vacated end filled with 0.
fn shifted(e: &mut Emitter<'_>, x: NodeId, axis: usize, later: bool) -> Result<NodeId, GradError> {
    let rank = e.ty(x).rank();
    let (start, stop) = if later { (0, Some(-1)) } else { (1, None) };
    let kept = e.op(
        Op::Slice(Slice {
            axis,
            start,
            stop,
            step: 1,
        }),
        &[x],
    )?;
    let mut pads = vec![(0, 0); rank];
    pads[axis] = if later { (1, 0) } else { (0, 1) };
    e.op(
        Op::Pad(Pad {
            pads,
            value: Scalar::Float(0.0),
        }),
        &[kept],
    )
}

/// The adjoint runs the recurrence the other way with the decays shifted by one (each
/// `λ_t` receives from the step that read `h_t`); `a`'s cotangent pairs `λ_t` with the
/// state `h_t` was computed from.
fn linear_scan_vjp(
    e: &mut Emitter<'_>,
    axis: usize,
    reverse: bool,
    h: NodeId,
    a: NodeId,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    // Forward runs towards the end: λ_t = a_{t+1} λ_{t+1} + g_t, a scan from the end whose
    // decay at t is a_{t+1}, and h_{t-1} is h moved one step later. Reversed, mirrored.
    let next_decay = shifted(e, a, axis, reverse)?;
    let adjoint = e.op(
        Op::LinearScan(LinearScan {
            axis,
            reverse: !reverse,
        }),
        &[next_decay, g],
    )?;
    let previous = shifted(e, h, axis, !reverse)?;
    let da = e.mul(adjoint, previous)?;
    Ok(vec![Grad::Some(da), Grad::Some(adjoint)])
}

/// `h_t` is a sum over `s ≤ t` of `b_s` times a product of up to `n` decays: each term
/// carries about `n` roundings and may grow to `n · max|b| · max(1, max|a|)^n`.
fn linear_scan_bound(x: &Operands<'_>, axis: usize) -> Bound {
    let n = x.axis_len(axis);
    let decay = x.largest(0).max(1.0);
    let growth = n * x.largest(1).max(x.tiny) * decay.powf(n);
    Bound::Within {
        rel: 4.0 * n * x.u,
        abs: 4.0 * x.u * n * n * growth + x.tiny,
        growth,
    }
}

/// The recurrence in float64, line by line.
fn linear_scan_value(axis: usize, reverse: bool, a: &Array, b: &Array, out: &Out) -> Array {
    let shape = &out.shape;
    let strides = strides(shape);
    let (step, len) = (strides[axis], shape[axis]);
    let mut data = vec![0.0; a.data.len()];
    let mut starts = shape.clone();
    starts[axis] = 1;
    for_each_index(&starts, |idx| {
        let base: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
        let mut h = 0.0;
        for k in 0..len {
            let t = if reverse { len - 1 - k } else { k };
            let at = base + t * step;
            h = a.data[at] * h + b.data[at];
            data[at] = h;
        }
    });
    out.holding(data)
}

/// Inputs: any float operand; decays: mostly a new input of its type, at times another
/// node of it; a reversed scan at times.
fn random_linear_scan(s: &mut dyn Sampler) -> Sampled {
    let (b, axis) = axis_of(s, DType::is_float)?;
    let ty = s.ty(b);
    let a = if chance(s, 0.2) {
        s.operand(&|t| *t == ty)?
    } else {
        s.input(ty.dtype, ty.shape.dims().to_vec())?
    };
    let reverse = chance(s, 0.4);
    Some((Op::LinearScan(LinearScan { axis, reverse }), vec![a, b]))
}

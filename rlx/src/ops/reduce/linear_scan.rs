//! The first-order linear recurrence `h_t = a_t ⊙ h_{t-1} + b_t` along an axis: the scan
//! state-space layers (Mamba's selective scan, gated linear recurrences) are built on.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{Concat, DType, Dim, InferError, NodeId, Op, Pad, Scalar, Slice, TensorType};
use crate::ops::array::{Array, Out, for_each_index, strides};
use crate::ops::check::{arity_range, check_axis, require_float, same_dim, same_dtype};
use crate::ops::sample::{Sampled, Sampler, axis_of, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, flag};

/// `h_t = a_t · h_{t-1} + b_t` along `axis` (from the end of the axis,
/// `h_t = a_t · h_{t+1} + b_t`, when `reverse`), from the state `h0` before the first step,
/// or 0. Operands: `a` (the decays) and `b` (the inputs), floats of one type, then
/// optionally `h0`, their type with the axis of length 1 (a state carried in from an
/// earlier chunk); the result has `a`'s type.
///
/// Every line along the axis is an independent recurrence. The gradient is the same scan
/// the other way: the adjoint `λ` runs `λ_t = a_{t+1} · λ_{t+1} + g_t`, and `∂b = λ`,
/// `∂a_t = λ_t · h_{t-1}`, `∂h0 = a_0 · λ_0`.
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
        linear_scan_vjp(e, self.axis, self.reverse, y, x, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        linear_scan_bound(x, self.axis)
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(linear_scan_value(self.axis, self.reverse, x, out))
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
    arity_range(inputs, 2..=3, "2 or 3 (a, b, h0)")?;
    require_float(inputs, 0)?;
    let a = inputs[0].shape.dims();
    check_axis(axis, a.len())?;
    for (operand, what) in [(1, "dims of a and b"), (2, "dims of a and h0")] {
        let Some(other) = inputs.get(operand) else {
            continue;
        };
        same_dtype(inputs, 0, operand)?;
        let dims = other.shape.dims();
        if dims.len() != a.len() {
            return Err(InferError::Rank {
                operand,
                expected: a.len().to_string(),
                got: dims.len(),
            });
        }
        for (i, (da, d)) in a.iter().zip(dims).enumerate() {
            if operand == 2 && i == axis {
                same_dim("the scanned axis of h0", &Dim::from(1), d)?;
            } else {
                same_dim(what, da, d)?;
            }
        }
    }
    Ok(inputs[0].clone())
}

/// `x` moved one step along `axis`, towards the end (`later`: `out_t = x_{t-1}`) or
/// towards the start (`out_t = x_{t+1}`), the vacated end filled with `fill` (a slice of
/// length 1 along `axis`) or 0.
fn shifted(
    e: &mut Emitter<'_>,
    x: NodeId,
    axis: usize,
    later: bool,
    fill: Option<NodeId>,
) -> Result<NodeId, GradError> {
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
    if let Some(fill) = fill {
        let parts = if later { [fill, kept] } else { [kept, fill] };
        return e.op(Op::Concat(Concat { axis }), &parts);
    }
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
/// state `h_t` was computed from (`h0` for the first step), and `h0`'s is what the first
/// step passes back, `a_first · λ_first`.
fn linear_scan_vjp(
    e: &mut Emitter<'_>,
    axis: usize,
    reverse: bool,
    h: NodeId,
    x: &[NodeId],
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let (a, start) = (x[0], x.get(2).copied());
    // Forward runs towards the end: λ_t = a_{t+1} λ_{t+1} + g_t, a scan from the end whose
    // decay at t is a_{t+1}, and h_{t-1} is h moved one step later. Reversed, mirrored.
    let next_decay = shifted(e, a, axis, reverse, None)?;
    let adjoint = e.op(
        Op::LinearScan(LinearScan {
            axis,
            reverse: !reverse,
        }),
        &[next_decay, g],
    )?;
    let previous = shifted(e, h, axis, !reverse, start)?;
    let da = e.mul(adjoint, previous)?;
    let mut grads = vec![Grad::Some(da), Grad::Some(adjoint)];
    if start.is_some() {
        let first = |e: &mut Emitter<'_>, v: NodeId| {
            let (start, stop) = if reverse { (-1, None) } else { (0, Some(1)) };
            e.op(
                Op::Slice(Slice {
                    axis,
                    start,
                    stop,
                    step: 1,
                }),
                &[v],
            )
        };
        let (a0, l0) = (first(e, a)?, first(e, adjoint)?);
        grads.push(Grad::Some(e.mul(a0, l0)?));
    }
    Ok(grads)
}

/// `h_t` is a sum over `s ≤ t` of `b_s` times a product of up to `n` decays: each term
/// carries about `n` roundings and may grow to `n · max|b| · max(1, max|a|)^n`.
fn linear_scan_bound(x: &Operands<'_>, axis: usize) -> Bound {
    let n = x.axis_len(axis);
    let decay = x.largest(0).max(1.0);
    let growth = n * x.largest(1).max(x.largest(2)).max(x.tiny) * decay.powf(n);
    Bound::Within {
        rel: 4.0 * n * x.u,
        abs: 4.0 * x.u * n * n * growth + x.tiny,
        growth,
    }
}

/// The recurrence in float64, line by line.
fn linear_scan_value(axis: usize, reverse: bool, x: &[Array], out: &Out) -> Array {
    let (a, b, start) = (&x[0], &x[1], x.get(2));
    let shape = &out.shape;
    let strides = strides(shape);
    let (step, len) = (strides[axis], shape[axis]);
    let mut data = vec![0.0; a.data.len()];
    let mut starts = shape.clone();
    starts[axis] = 1;
    let mut line = 0;
    for_each_index(&starts, |idx| {
        let base: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
        let mut h = start.map_or(0.0, |h0| h0.data[line]);
        line += 1;
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
/// node of it; a reversed scan and a starting state at times.
fn random_linear_scan(s: &mut dyn Sampler) -> Sampled {
    let (b, axis) = axis_of(s, DType::is_float)?;
    let ty = s.ty(b);
    let a = if chance(s, 0.2) {
        s.operand(&|t| *t == ty)?
    } else {
        s.input(ty.dtype, ty.shape.dims().to_vec())?
    };
    let mut operands = vec![a, b];
    if chance(s, 0.4) {
        let mut dims = ty.shape.dims().to_vec();
        dims[axis] = Dim::from(1);
        operands.push(s.input(ty.dtype, dims)?);
    }
    let reverse = chance(s, 0.4);
    Some((Op::LinearScan(LinearScan { axis, reverse }), operands))
}

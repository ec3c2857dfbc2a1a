//! Max and average pooling over windows, channels first.

use super::{Window, back_to_input, spatial_rank, statics, window_len, window_source};
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    Cast, ConstantData, InferError, NodeId, Op, Pad, PoolKind, Shape, Slice, TensorType, attr_err,
};
use crate::ops::array::{Array, Out, for_each_index};
use crate::ops::check::{arity, require_float};
use crate::ops::sample::{Sampled, Sampler, pick, window_padding};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// 1-D or 2-D pooling, channels first. Operands: `x` `[N, C, *spatial]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    /// Function.
    pub kind: PoolKind,
    /// Window per spatial axis.
    pub kernel: Vec<usize>,
    /// Stride per spatial axis.
    pub stride: Vec<usize>,
    /// `(before, after)` padding per spatial axis, at most half the window.
    pub padding: Vec<(usize, usize)>,
}

impl Primitive for Pool {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("kernel={:?}", self.kernel));
        out.push(format!("stride={:?}", self.stride));
        out.push(format!("padding={:?}", self.padding));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Pool(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        pool_type(&self.kernel, &self.stride, &self.padding, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        y: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        let (kernel, stride, padding) = (&self.kernel, &self.stride, &self.padding);
        pool_vjp(e, x[0], y, self.kind, kernel, stride, padding, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        match self.kind {
            PoolKind::Max => Bound::Exact,
            PoolKind::Avg => {
                let n = self.kernel.iter().product::<usize>().max(1) as f64;
                Bound::Within {
                    rel: 2.0 * x.u,
                    abs: 2.0 * x.u * n * x.scale + x.tiny,
                    growth: n * x.scale,
                }
            }
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let (kernel, stride, padding) = (&self.kernel, &self.stride, &self.padding);
        Ok(pool_value(self.kind, kernel, stride, padding, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_pool(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn pool_type(
    kernel: &[usize],
    stride: &[usize],
    padding: &[(usize, usize)],
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let s = spatial_rank(
        &[
            ("kernel", kernel.len()),
            ("stride", stride.len()),
            ("padding", padding.len()),
        ],
        &inputs[0],
        0,
    )?;
    require_float(inputs, 0)?;
    if kernel.contains(&0) || stride.contains(&0) {
        return Err(attr_err!("kernel and stride must be at least 1"));
    }
    let x = &inputs[0].shape;
    let mut dims = vec![x[0].clone(), x[1].clone()];
    for axis in 0..s {
        let (before, after) = padding[axis];
        if before.max(after) > kernel[axis] / 2 {
            return Err(attr_err!(
                "padding {before}:{after} of spatial axis {axis} exceeds half the window {}",
                kernel[axis]
            ));
        }
        dims.push(window_len(
            &x[2 + axis],
            padding[axis],
            kernel[axis],
            stride[axis],
            axis,
        )?);
    }
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// Average pooling spreads each output's gradient evenly over its window (padding included,
/// as the forward divides by the full window): a depthwise transposed conv with a constant
/// kernel. Max pooling sends it to the window's first position holding the maximum,
/// moved back per kernel tap with a one-hot transposed conv.
#[allow(clippy::too_many_arguments)]
fn pool_vjp(
    e: &mut Emitter<'_>,
    x: NodeId,
    y: NodeId,
    kind: PoolKind,
    kernel: &[usize],
    stride: &[usize],
    padding: &[(usize, usize)],
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x);
    let dtype = e.dtype(x);
    let channels = statics(e, &[xs[1].clone()])?[0];
    let ones = vec![1; kernel.len()];
    let win = Window {
        stride,
        padding,
        dilation: &ones,
        groups: channels,
    };
    let taps: usize = kernel.iter().product();
    let mut wshape = vec![channels, 1];
    wshape.extend_from_slice(kernel);
    let spread = |e: &mut Emitter<'_>, value: NodeId, weights: Vec<f64>| {
        let data: Vec<f64> = (0..channels)
            .flat_map(|_| weights.iter().copied())
            .collect();
        let w = e.constant(
            ConstantData::from_slice(&data, Shape::from(wshape.as_slice()))
                .expect("the kernel's size matches its shape"),
        );
        let w = if dtype == crate::ir::DType::F64 {
            w
        } else {
            e.op(Op::Cast(Cast { to: dtype }), &[w])?
        };
        back_to_input(e, value, w, &win, &xs.dims()[2..])
    };
    let grad = match kind {
        PoolKind::Avg => spread(e, g, vec![1.0 / taps as f64; taps])?,
        PoolKind::Max => {
            // Each window's value at tap t, read from x padded with −∞ by strided slices
            // (no arithmetic, so the comparison with y is exact on every backend); the
            // first tap equal to the maximum takes the gradient, as in PyTorch.
            let rank = xs.rank();
            let mut pads = vec![(0, 0); 2];
            pads.extend_from_slice(padding);
            let padded = e.op(
                Op::Pad(Pad {
                    pads,
                    value: crate::ir::Scalar::Float(f64::NEG_INFINITY),
                }),
                &[x],
            )?;
            let out = statics(e, &e.shape(y).dims()[2..])?;
            let mut total: Option<NodeId> = None;
            let mut free: Option<NodeId> = None;
            for tap in 0..taps {
                let mut at = tap;
                let mut offsets = vec![0; kernel.len()];
                for a in (0..kernel.len()).rev() {
                    offsets[a] = at % kernel[a];
                    at /= kernel[a];
                }
                let mut view = padded;
                for a in 0..kernel.len() {
                    let start = offsets[a];
                    let stop = start + (out[a].max(1) - 1) * stride[a] + 1;
                    let slice = Op::Slice(Slice {
                        axis: rank - kernel.len() + a,
                        start: start as i64,
                        stop: Some(stop as i64),
                        step: stride[a],
                    });
                    view = e.op(slice, &[view])?;
                }
                let hit = e.op(Op::Compare(crate::ir::CompareOp::Eq), &[view, y])?;
                let take = match free {
                    Some(f) => e.op(Op::Where, &[f, hit, f])?,
                    None => hit,
                };
                let no = e_false(e)?;
                free = Some(match free {
                    Some(f) => e.op(Op::Where, &[hit, no, f])?,
                    None => e.op(Op::Compare(crate::ir::CompareOp::Eq), &[hit, no])?,
                });
                let part = e.keep_where(take, g)?;
                let mut one_hot = vec![0.0; taps];
                one_hot[tap] = 1.0;
                let back = spread(e, part, one_hot)?;
                total = Some(match total {
                    Some(t) => e.add(t, back)?,
                    None => back,
                });
            }
            total.expect("a window has at least one tap")
        }
    };
    Ok(vec![Grad::Some(grad)])
}

/// The maximum over the window (padding never wins; a NaN does) or its mean with padded
/// positions counted as zeros.
fn pool_value(
    kind: PoolKind,
    kernel: &[usize],
    stride: &[usize],
    padding: &[(usize, usize)],
    x: &Array,
    out: &Out,
) -> Array {
    let ones = vec![1; kernel.len()];
    let win = Window {
        stride,
        padding,
        dilation: &ones,
        groups: 1,
    };
    let count: usize = kernel.iter().product();
    out.fill(|o| {
        let mut vals = Vec::with_capacity(count);
        for_each_index(kernel, |k| {
            if let Some(at) = window_source(&win, x, o[0], o[1], &o[2..], k) {
                vals.push(x.at(&at));
            }
        });
        match kind {
            PoolKind::Max if vals.iter().any(|v| v.is_nan()) => f64::NAN,
            PoolKind::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            PoolKind::Avg => vals.iter().sum::<f64>() / count as f64,
        }
    })
}

fn random_pool(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype.is_float() && (3..=4).contains(&t.rank()))?;
    let spatial = s.ty(x).rank() - 2;
    let kernel: Vec<usize> = (0..spatial).map(|_| 1 + s.below(3)).collect();
    let op = Op::Pool(Pool {
        kind: pick(s, &[PoolKind::Max, PoolKind::Avg]),
        stride: (0..spatial).map(|_| 1 + s.below(2)).collect(),
        padding: window_padding(s, &kernel),
        kernel,
    });
    Some((op, vec![x]))
}

/// A `false` scalar.
fn e_false(e: &mut Emitter<'_>) -> Result<NodeId, GradError> {
    Ok(e.constant(ConstantData::scalar(
        crate::ir::Scalar::Bool(false),
        crate::ir::DType::Bool,
    )))
}

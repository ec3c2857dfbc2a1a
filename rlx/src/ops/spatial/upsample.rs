//! Upsampling of the last two axes, nearest or bilinear (PyTorch's conventions).

use super::statics;
use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    Cast, ConstantData, Dim, InferError, NodeId, Op, ScatterAdd, Shape, TensorType, UpsampleMode,
    attr_err,
};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, exact_rank, require_float};
use crate::ops::sample::{Sampled, Sampler, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// 2-D resizing of the last two axes to `size`, channels first. Operands: `x`
/// `[N, C, H, W]` (float).
#[derive(Clone, Debug, PartialEq)]
pub struct Upsample {
    /// How output positions read input positions.
    pub mode: UpsampleMode,
    /// Output `[H, W]`, each at least 1.
    pub size: Shape,
}

impl Primitive for Upsample {
    fn name(&self) -> &'static str {
        self.mode.name()
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("size={}", self.size));
    }

    fn bind_dims(&self, out: &[usize]) -> Op {
        Op::Upsample(Upsample {
            mode: self.mode,
            size: Shape::from(&out[out.len().saturating_sub(2)..]),
        })
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        upsample_type(&self.size, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        upsample_vjp(e, x[0], self.mode, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        Bound::Within {
            rel: 4.0 * x.u,
            abs: 4.0 * x.u * x.scale + x.tiny,
            growth: x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(upsample_value(self.mode, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_upsample(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn upsample_type(size: &Shape, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    require_float(inputs, 0)?;
    exact_rank(inputs, 0, 4)?;
    if size.rank() != 2 {
        return Err(attr_err!(
            "size has {} entries; upsampling resizes the 2 spatial axes [H, W]",
            size.rank()
        ));
    }
    if let Some(zero) = size.dims().iter().find(|d| d.as_static() == Some(0)) {
        return Err(attr_err!("output size {zero} must be at least 1"));
    }
    let x = &inputs[0].shape;
    if let Some(empty) = [&x[2], &x[3]]
        .into_iter()
        .find(|d| d.as_static() == Some(0))
    {
        return Err(attr_err!(
            "cannot upsample from an empty spatial axis (size {empty})"
        ));
    }
    let dims = [x[0].clone(), x[1].clone(), size[0].clone(), size[1].clone()];
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// Each output position of an upsampling read two input positions per axis with weights
/// `1 − t` and `t`; the adjoint adds the gradient back there: two scatter-adds per axis,
/// the last axis first.
fn upsample_vjp(
    e: &mut Emitter<'_>,
    x: NodeId,
    mode: UpsampleMode,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let xs = e.shape(x);
    let sizes = statics(e, &xs.dims()[2..])?;
    let out = statics(e, &e.shape(g).dims()[2..])?;
    let dtype = e.dtype(x);
    let mut grad = g;
    for axis in [3, 2] {
        let (input, output) = (sizes[axis - 2], out[axis - 2]);
        let taps: Vec<_> = (0..output).map(|p| mode.tap(p, input, output)).collect();
        let mut target = e.shape(grad).dims().to_vec();
        target[axis] = Dim::Static(input);
        let zeros = e.zeros(dtype, Shape::new(target))?;
        let indices = |e: &mut Emitter<'_>, pick: fn(&crate::ir::UpsampleTap) -> usize| {
            let idx: Vec<i64> = taps.iter().map(|t| pick(t) as i64).collect();
            e.constant(ConstantData::from_slice(&idx, [output]).expect("one index per position"))
        };
        let weight = |e: &mut Emitter<'_>, f: fn(f64) -> f64| -> Result<NodeId, GradError> {
            let w: Vec<f64> = taps.iter().map(|t| f(t.t)).collect();
            let mut shape = vec![1; 4];
            shape[axis] = output;
            let c = e.constant(
                ConstantData::from_slice(&w, Shape::from(shape.as_slice()))
                    .expect("one weight per position"),
            );
            if dtype == crate::ir::DType::F64 {
                Ok(c)
            } else {
                e.op(Op::Cast(Cast { to: dtype }), &[c])
            }
        };
        let lo = indices(e, |t| t.lo);
        let hi = indices(e, |t| t.hi);
        let w_lo = weight(e, |t| 1.0 - t)?;
        let w_hi = weight(e, |t| t)?;
        let part_lo = e.mul(grad, w_lo)?;
        let part_hi = e.mul(grad, w_hi)?;
        let first = e.op(Op::ScatterAdd(ScatterAdd { axis }), &[zeros, lo, part_lo])?;
        grad = e.op(Op::ScatterAdd(ScatterAdd { axis }), &[first, hi, part_hi])?;
    }
    Ok(vec![Grad::Some(grad)])
}

/// Each output position blends the input positions its mode's taps name, per axis.
fn upsample_value(mode: UpsampleMode, x: &Array, out: &Out) -> Array {
    let (h, w) = (x.shape[2], x.shape[3]);
    let (oh, ow) = (out.shape[2], out.shape[3]);
    out.fill(|o| {
        let ty = mode.tap(o[2], h, oh);
        let tx = mode.tap(o[3], w, ow);
        let v = |y: usize, xx: usize| x.at(&[o[0], o[1], y, xx]);
        let top = blend(v(ty.lo, tx.lo), v(ty.lo, tx.hi), tx.t);
        let bottom = blend(v(ty.hi, tx.lo), v(ty.hi, tx.hi), tx.t);
        blend(top, bottom, ty.t)
    })
}

/// Each mode, to sizes below, equal to and above the input's.
fn random_upsample(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| t.dtype.is_float() && t.rank() == 4)?;
    let mode = pick(s, &UpsampleMode::ALL);
    let size = [1 + s.below(6), 1 + s.below(6)];
    let op = Op::Upsample(Upsample {
        mode,
        size: size.into(),
    });
    Some((op, vec![x]))
}

/// `a·(1 − t) + b·t`, exactly `a` when `t` is 0 (an infinite `b` does not leak in).
fn blend(a: f64, b: f64, t: f64) -> f64 {
    if t == 0.0 { a } else { a * (1.0 - t) + b * t }
}

//! Pad: a constant border around each axis.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, Dim, InferError, NodeId, Op, Scalar, Slice, TensorType, attr_err};
use crate::ops::array::{Array, Out, store};
use crate::ops::check::arity;
use crate::ops::sample::{Sampled, Sampler, chance};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Constant padding. Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Pad {
    /// `(before, after)` per axis.
    pub pads: Vec<(usize, usize)>,
    /// Fill value, converted to the dtype of `x`.
    pub value: Scalar,
}

impl Primitive for Pad {
    fn name(&self) -> &'static str {
        "pad"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        let pads: Vec<String> = self.pads.iter().map(|(a, b)| format!("{a}:{b}")).collect();
        out.push(format!("pads=[{}]", pads.join(",")));
        out.push(format!("value={}", self.value));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Pad(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        pad_type(&self.pads, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        pad_vjp(e, &self.pads, g)
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(pad_value(&self.pads, self.value, &x[0], out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_pad(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn pad_type(pads: &[(usize, usize)], inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    let shape = &inputs[0].shape;
    if pads.len() != shape.rank() {
        return Err(attr_err!(
            "{} (before, after) pairs given for {} axes",
            pads.len(),
            shape.rank()
        ));
    }
    let dims: Vec<Dim> = shape
        .dims()
        .iter()
        .zip(pads)
        .map(|(d, (before, after))| {
            Dim::Static(before + after)
                .checked_add(d)
                .ok_or_else(|| attr_err!("padded size of {d} is negative"))
        })
        .collect::<Result<_, _>>()?;
    Ok(TensorType::new(inputs[0].dtype, dims))
}

/// Padding's gradient is the interior of `g`.
fn pad_vjp(
    e: &mut Emitter<'_>,
    pads: &[(usize, usize)],
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let mut grad = g;
    for (axis, &(before, after)) in pads.iter().enumerate() {
        if before == 0 && after == 0 {
            continue;
        }
        let op = Op::Slice(Slice {
            axis,
            start: before as i64,
            stop: (after > 0).then(|| -(after as i64)),
            step: 1,
        });
        grad = e.op(op, &[grad])?;
    }
    Ok(vec![Grad::Some(grad)])
}

fn pad_value(pads: &[(usize, usize)], value: Scalar, x: &Array, out: &Out) -> Array {
    let fill = stored_scalar(x.dtype, value);
    let mut at = Vec::new();
    out.fill(|o| {
        at.clear();
        for ((i, (before, _)), len) in o.iter().zip(pads).zip(&x.shape) {
            match i.checked_sub(*before).filter(|i| i < len) {
                Some(i) => at.push(i),
                None => return fill,
            }
        }
        x.at(&at)
    })
}

fn random_pad(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let ty = s.ty(x);
    let pads = (0..ty.rank()).map(|_| (s.below(3), s.below(3))).collect();
    let value = match ty.dtype {
        d if d.is_float() => Scalar::Float(s.uniform(-1.0, 1.0)),
        DType::Bool => Scalar::Bool(chance(s, 0.5)),
        _ => Scalar::Int(s.below(5) as i64 - 2),
    };
    Some((Op::Pad(Pad { pads, value }), vec![x]))
}

/// `value` as a tensor of `dtype` stores it (rounded to a float, converted to an integer).
fn stored_scalar(dtype: DType, value: Scalar) -> f64 {
    match dtype {
        DType::F32 => f64::from(value.as_f64() as f32),
        DType::F16 => half::f16::from_f64(value.as_f64()).to_f64(),
        DType::BF16 => half::bf16::from_f64(value.as_f64()).to_f64(),
        DType::F64 | DType::Bool => store(dtype, value.as_f64()),
        _ => store(dtype, value.as_i64() as f64),
    }
}

//! Cast: a change of dtype, with Rust `as` semantics.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, TensorType};
use crate::ops::array::{Array, Out};
use crate::ops::check::arity;
use crate::ops::sample::{Sampled, Sampler, dtype};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// Conversion to another dtype (Rust `as` semantics). Operands: `x`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cast {
    /// Target dtype.
    pub to: DType,
}

impl Primitive for Cast {
    fn name(&self) -> &'static str {
        "cast"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("to={}", self.to));
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Cast(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        cast_type(self.to, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        cast_vjp(e, x[0], g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // One rounding to a float (a cast to an integer has an integer output: exact).
        Bound::Within {
            rel: x.u,
            abs: x.tiny,
            growth: x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        Ok(cast_value(self.to, x, out))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_cast(s)
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

fn cast_type(to: DType, inputs: &[TensorType]) -> Result<TensorType, InferError> {
    arity(inputs, 1, "1")?;
    Ok(TensorType::new(to, inputs[0].shape.clone()))
}

/// Casts between floats pass the gradient back in the operand's dtype; from an integer
/// or `bool` there is none.
fn cast_vjp(e: &mut Emitter<'_>, x: NodeId, g: NodeId) -> Result<Vec<Grad>, GradError> {
    let from = e.dtype(x);
    if !from.is_float() {
        return Ok(vec![Grad::None]);
    }
    let back = if from == e.dtype(g) {
        g
    } else {
        e.op(Op::Cast(Cast { to: from }), &[g])?
    };
    Ok(vec![Grad::Some(back)])
}

/// Rust `as`: floats keep their value (the rounding to a narrower float is the tolerance's
/// business), floats to integers truncate and saturate (NaN to 0), integers wrap, and
/// anything non-zero is `true`.
fn cast_value(to: DType, x: &[Array], out: &Out) -> Array {
    let from_float = x[0].dtype.is_float();
    let convert = |v: f64| match to {
        DType::I64 if from_float => v as i64 as f64,
        DType::I32 if from_float => f64::from(v as i32),
        DType::I8 if from_float => f64::from(v as i8),
        DType::U8 if from_float => f64::from(v as u8),
        _ => v,
    };
    out.holding(x[0].data.iter().map(|v| convert(*v)).collect())
}

/// Any operand to any dtype.
fn random_cast(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|_| true)?;
    let to = dtype(s);
    Some((Op::Cast(Cast { to }), vec![x]))
}

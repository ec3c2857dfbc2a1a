//! Random numbers as a pure function of a seed: what dropout draws its masks from.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, InferError, NodeId, Op, Shape, TensorType, attr_err};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity, exact_rank, require};
use crate::ops::sample::{Sampled, Sampler, dims};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError};

/// `f32` values uniform in `[0, 1)` of `shape`, a pure function of the seed (operand:
/// a rank-0 `i64`), the stream and each element's flat index: the same seed gives the
/// same values on every backend and every run, so a value computed again in the backward
/// pass ([`Recompute`](crate::autodiff::Recompute)) is the one the forward pass drew.
///
/// Element `i` is `(h >> 8) · 2⁻²⁴` with `h = mix(lo32(i) ⊕ mix(lo32(seed) ⊕
/// mix(stream)))`, where `mix` is the 32-bit finalizer
/// `x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16`
/// (wrapping products). Indices repeat after 2³² elements.
///
/// ```
/// use rlx::ir::{DType, Op, RandomUniform};
/// let mut b = rlx::GraphBuilder::new();
/// let seed = b.input("seed", DType::I64, [0usize; 0])?;
/// let op = Op::RandomUniform(RandomUniform { shape: [4, 8].into(), stream: 7 });
/// let u = b.op(op, &[seed])?;
/// assert_eq!(b.ty(u).unwrap().to_string(), "f32[4,8]");
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RandomUniform {
    /// The output's shape.
    pub shape: Shape,
    /// Tells draws of one seed apart (one per dropout site).
    pub stream: u32,
}

/// The 32-bit finalizer every backend mixes with.
pub(crate) fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The key of a seed and stream: what each element's index is mixed with.
pub(crate) fn random_key(seed: i64, stream: u32) -> u32 {
    mix32(seed as u32 ^ mix32(stream))
}

/// Element `index` of a draw with `key`, in `[0, 1)`.
pub(crate) fn uniform_at(key: u32, index: usize) -> f32 {
    (mix32(index as u32 ^ key) >> 8) as f32 * (1.0 / 16_777_216.0)
}

impl Primitive for RandomUniform {
    fn name(&self) -> &'static str {
        "random_uniform"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("shape={}, stream={}", self.shape, self.stream));
    }

    fn bind_dims(&self, out: &[usize]) -> Op {
        Op::RandomUniform(RandomUniform {
            shape: Shape::from(out),
            stream: self.stream,
        })
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        arity(inputs, 1, "1 (seed)")?;
        require(inputs, 0, |d| d == DType::I64, "i64 (the seed)")?;
        exact_rank(inputs, 0, 0).map_err(|_| attr_err!("the seed must be a scalar"))?;
        Ok(TensorType::new(DType::F32, self.shape.clone()))
    }

    /// The draw depends on the seed alone, which is an integer.
    fn vjp(
        &self,
        _: &mut Emitter<'_>,
        _: NodeId,
        _: &[NodeId],
        _: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        Ok(vec![Grad::Discrete])
    }

    fn tolerance(&self, _: &Operands<'_>) -> Bound {
        Bound::Exact
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        let key = random_key(x[0].data[0] as i64, self.stream);
        let n = out.shape.iter().product::<usize>();
        Ok(out.holding((0..n).map(|i| f64::from(uniform_at(key, i))).collect()))
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        let seed = s.input(DType::I64, Vec::new())?;
        let shape = match s.operand(&|_| true) {
            Some(like) => dims(s, like),
            None => vec![s.dim()],
        };
        let stream = s.below(1 << 16) as u32;
        let op = Op::RandomUniform(RandomUniform {
            shape: shape.into(),
            stream,
        });
        Some((op, vec![seed]))
    }

    /// A primitive.
    fn decompose(&self, _: &mut GraphBuilder, _: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        None
    }
}

//! Rotary position embedding, a composite: its decomposition into elementwise ops is its
//! reference and its lowering on a backend without a kernel for it.

use crate::autodiff::{Emitter, Grad, GradError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    BinaryOp, ConstantData, Cumsum, DType, Dim, InferError, NodeId, Op, Shape, Slice, TensorType,
    UnaryOp, attr_err,
};
use crate::ops::array::{Array, Out};
use crate::ops::check::{arity_range, min_rank, require_float, require_index};
use crate::ops::sample::{Sampled, Sampler, chance, dims, pick};
use crate::ops::tolerance::{Bound, Operands};
use crate::ops::{Primitive, ReferenceError, composite};

/// Rotary position embedding on the first `dims` features of the last axis; positions
/// run along the second-to-last axis starting at the optional `offset`. Operands: `x`
/// (float, rank ≥ 2), then `offset` (`i32`/`i64`) when present: a scalar, or for `x` of
/// rank 3 or more a vector with one offset per row of axis 0 (a batch of sequences, each
/// at its own position).
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// Features rotated (even, at most the last dim).
    pub dims: usize,
    /// Frequency base, e.g. 10000: pair `i` turns by `base^(−2i/dims)` radians per position.
    pub base: f64,
    /// Positions are multiplied by this.
    pub scale: f64,
    /// Rotate adjacent pairs `(2i, 2i+1)` instead of the two halves.
    pub traditional: bool,
    /// Each pair's frequency (radians per position), `dims / 2` of them, in place of
    /// `base`'s: the scaled frequencies of Llama 3's and YaRN's long-context rotations.
    pub freqs: Option<std::sync::Arc<[f64]>>,
}

impl Rope {
    /// The frequency of every pair: `freqs`, else `base^(−2i/dims)`.
    pub fn frequencies(&self) -> Vec<f64> {
        match &self.freqs {
            Some(f) => f.to_vec(),
            None => (0..self.dims / 2)
                .map(|i| self.base.powf(-2.0 * i as f64 / self.dims as f64))
                .collect(),
        }
    }
}

impl Primitive for Rope {
    fn name(&self) -> &'static str {
        "rope"
    }

    fn attrs(&self, out: &mut Vec<String>) {
        out.push(format!("dims={}, base={}", self.dims, self.base));
        if self.scale != 1.0 {
            out.push(format!("scale={}", self.scale));
        }
        if self.traditional {
            out.push("traditional".into());
        }
        if let Some(f) = &self.freqs {
            let shown: Vec<String> = f.iter().take(4).map(|v| format!("{v:.4e}")).collect();
            let more = if f.len() > 4 { ", .." } else { "" };
            out.push(format!("freqs=[{}{more}]", shown.join(", ")));
        }
    }

    fn bind_dims(&self, _: &[usize]) -> Op {
        Op::Rope(self.clone())
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<TensorType, InferError> {
        if let Some(f) = &self.freqs {
            if f.len() != self.dims / 2 {
                return Err(attr_err!(
                    "{} frequencies for {} rotated features: one per pair is needed",
                    f.len(),
                    self.dims
                ));
            }
            if let Some(bad) = f.iter().find(|v| !v.is_finite()) {
                return Err(attr_err!("frequencies must be finite, got {bad}"));
            }
        }
        rope_type(self.dims, self.base, self.scale, inputs)
    }

    fn vjp(
        &self,
        e: &mut Emitter<'_>,
        _: NodeId,
        x: &[NodeId],
        g: NodeId,
    ) -> Result<Vec<Grad>, GradError> {
        rope_vjp(e, x, self, g)
    }

    fn tolerance(&self, x: &Operands<'_>) -> Bound {
        // Angles up to `position * |factor|` carry an f32 rounding each (MLX computes them
        // in f32), which sin and cos turn into absolute errors.
        let dims = x.dims(0);
        let rows = dims.get(dims.len().wrapping_sub(2)).copied().unwrap_or(1) as f64;
        let offset = x.values.get(1).map_or(0.0, |o| {
            o.to_f64_vec().iter().fold(0.0f64, |m, v| m.max(v.abs()))
        });
        let fastest = self
            .freqs
            .as_ref()
            .map_or(1.0, |f| f.iter().fold(1.0f64, |m, v| m.max(v.abs())));
        let angle = (rows + offset) * self.scale.abs().max(1.0) * fastest;
        Bound::Within {
            rel: 8.0 * x.u,
            abs: 16.0 * x.u * x.scale * (1.0 + angle) + x.tiny,
            growth: x.scale,
        }
    }

    fn reference(&self, x: &[Array], out: &Out) -> Result<Array, ReferenceError> {
        composite::reference(&Op::Rope(self.clone()), x, out)
    }

    fn sample(s: &mut dyn Sampler) -> Sampled {
        random_rope(s)
    }

    fn decompose(&self, b: &mut GraphBuilder, x: &[NodeId]) -> Option<Result<NodeId, BuildError>> {
        Some(rope_decomposition(self, b, x))
    }
}

fn rope_type(
    dims: usize,
    base: f64,
    scale: f64,
    inputs: &[TensorType],
) -> Result<TensorType, InferError> {
    arity_range(inputs, 1..=2, "1 or 2 (x, offset)")?;
    require_float(inputs, 0)?;
    min_rank(inputs, 0, 2)?;
    if !(base.is_finite() && base > 0.0) {
        return Err(attr_err!("base must be finite and positive, got {base}"));
    }
    if !scale.is_finite() {
        return Err(attr_err!("scale must be finite, got {scale}"));
    }
    let x = &inputs[0].shape;
    let features = &x[x.rank() - 1];
    let fits = features.as_static().is_some_and(|n| dims <= n);
    if dims == 0 || !dims.is_multiple_of(2) || !fits {
        return Err(attr_err!(
            "rotary dims must be even, positive and at most the feature size {features}, \
             got {dims}"
        ));
    }
    if inputs.len() == 2 {
        require_index(inputs, 1)?;
        let offset = &inputs[1].shape;
        let per_row = offset.rank() == 1 && x.rank() >= 3 && offset[0] == x[0];
        if offset.rank() != 0 && !per_row {
            return Err(attr_err!(
                "the offset must be a scalar, or a vector of one offset per row of axis 0 \
                 ({}) of an operand of rank 3 or more, got {offset}",
                x[0]
            ));
        }
    }
    Ok(inputs[0].clone())
}

/// A rotation's adjoint is the opposite rotation: the same op with the angles negated.
fn rope_vjp(
    e: &mut Emitter<'_>,
    x: &[NodeId],
    op: &Rope,
    g: NodeId,
) -> Result<Vec<Grad>, GradError> {
    let back = Op::Rope(Rope {
        scale: -op.scale,
        ..op.clone()
    });
    let mut operands = vec![g];
    operands.extend(x.get(1).copied());
    let grad = e.op(back, &operands)?;
    let mut grads = vec![Grad::Some(grad)];
    if x.len() > 1 {
        grads.push(Grad::Discrete);
    }
    Ok(grads)
}

/// Some even number of a float operand's features, a constant offset now and then.
fn random_rope(s: &mut dyn Sampler) -> Sampled {
    let x = s.operand(&|t| {
        let last = t.shape.dims().last().and_then(Dim::as_static);
        t.dtype.is_float() && t.rank() >= 2 && last.is_some_and(|n| n >= 2)
    })?;
    let features = dims(s, x).last().and_then(Dim::as_static)?;
    let rotated = 2 * (1 + s.below(features / 2));
    let mut operands = vec![x];
    if chance(s, 0.4) {
        let sizes = s.sizes(x);
        // A vector of offsets, one per row of axis 0, now and then.
        let data = if sizes.len() >= 3 && chance(s, 0.4) {
            let offsets: Vec<i64> = (0..sizes[0]).map(|_| s.below(6) as i64).collect();
            ConstantData::from_slice(&offsets, [sizes[0]])
        } else {
            ConstantData::from_slice(&[s.below(4) as i64], [0usize; 0])
        };
        operands.push(s.constant(data.ok()?)?);
    }
    // Now and then frequencies of their own, as Llama 3's scaling makes them.
    let freqs = chance(s, 0.25).then(|| {
        (0..rotated / 2)
            .map(|i| 10000f64.powf(-2.0 * i as f64 / rotated as f64) / (1 + i % 3) as f64)
            .collect()
    });
    let op = Op::Rope(Rope {
        dims: rotated,
        base: 10000.0,
        scale: pick(s, &[1.0, 0.5]),
        traditional: chance(s, 0.5),
        freqs,
    });
    Some((op, operands))
}

/// `x` of `[.., S, D]` with feature pairs `(p, q)` of its first `dims` turned by the angle
/// `θ = (offset + s)·scale·f_i` of position `s` and pair `i` (`f_i` = `freqs[i]`, else
/// `base^(−2i/dims)`):
/// `(x_p cos θ − x_q sin θ, x_p sin θ + x_q cos θ)`, where the pairs are `(i, i + dims/2)`,
/// or `(2i, 2i + 1)` when `traditional`. Angles and products are computed in float32
/// (float64 for float64 `x`) and rounded to `x`'s dtype once.
fn rope_decomposition(op: &Rope, b: &mut GraphBuilder, x: &[NodeId]) -> Result<NodeId, BuildError> {
    let ty = b
        .ty(x[0])
        .cloned()
        .expect("operands are nodes of the builder");
    let compute = if ty.dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let r = ty.rank();
    let (rows, width) = (ty.shape[r - 2].clone(), ty.shape[r - 1].clone());
    let half = op.dims / 2;
    let xc = b.cast(x[0], compute)?;

    // Positions 0, 1, … down the rows: an exclusive running sum of ones, shifted by the
    // offset when there is one.
    let one = b.constant(ConstantData::scalar(1.0, compute));
    let one = b.reshape(one, [1, 1])?;
    let ones = b.op(
        Op::Broadcast(crate::ir::Broadcast {
            shape: Shape::from(vec![rows.clone(), 1.into()]),
        }),
        &[one],
    )?;
    let cumsum = Cumsum {
        axis: 0,
        exclusive: true,
        reverse: false,
    };
    let mut position = b.op(Op::Cumsum(cumsum), &[ones])?;
    if let Some(&offset) = x.get(1) {
        let mut offset = b.cast(offset, compute)?;
        if b.ty(offset).is_some_and(|t| t.rank() == 1) {
            // One offset per row of axis 0: positions of shape [R, 1, .., S, 1].
            let mut per_row = vec![ty.shape[0].clone()];
            per_row.resize(r, Dim::Static(1));
            offset = b.reshape(offset, per_row)?;
        }
        position = b.add(position, offset)?;
    }
    let scale = b.scalar(op.scale, compute);
    let position = b.mul(position, scale)?;

    // One frequency per pair, computed here in float64.
    let frequencies = op.frequencies();
    let frequencies = match compute {
        DType::F64 => ConstantData::from_slice(&frequencies, [1, half]),
        _ => {
            let narrow: Vec<f32> = frequencies.iter().map(|f| *f as f32).collect();
            ConstantData::from_slice(&narrow, [1, half])
        }
    }
    .expect("the frequencies fill their shape");
    let frequencies = b.constant(frequencies);
    let angle = b.mul(position, frequencies)?;
    let (cos, sin) = (b.unary(UnaryOp::Cos, angle)?, b.unary(UnaryOp::Sin, angle)?);

    let last = r - 1;
    let (x1, x2) = if op.traditional {
        (
            features(b, xc, last, 0, op.dims, 2)?,
            features(b, xc, last, 1, op.dims, 2)?,
        )
    } else {
        (
            features(b, xc, last, 0, half, 1)?,
            features(b, xc, last, half, op.dims, 1)?,
        )
    };
    let (pc, qs) = (b.mul(x1, cos)?, b.mul(x2, sin)?);
    let first = b.binary(BinaryOp::Sub, pc, qs)?;
    let (ps, qc) = (b.mul(x1, sin)?, b.mul(x2, cos)?);
    let second = b.add(ps, qc)?;
    let rotated = if op.traditional {
        // Interleave back: pairs side by side on a new last axis, then flattened.
        let mut paired = ty.shape.dims()[..last].to_vec();
        paired.extend([half.into(), 1.into()]);
        let first = b.reshape(first, paired.clone())?;
        let second = b.reshape(second, paired)?;
        let both = b.concat(&[first, second], r)?;
        let mut flat = ty.shape.dims()[..last].to_vec();
        flat.push(op.dims.into());
        b.reshape(both, flat)?
    } else {
        b.concat(&[first, second], last)?
    };
    let whole = if width.as_static() == Some(op.dims) {
        rotated
    } else {
        let rest = b.op(
            Op::Slice(Slice {
                axis: last,
                start: op.dims as i64,
                stop: None,
                step: 1,
            }),
            &[xc],
        )?;
        b.concat(&[rotated, rest], last)?
    };
    b.cast(whole, ty.dtype)
}

/// Features `start..stop` (by `step`) of the last axis of `x`.
fn features(
    b: &mut GraphBuilder,
    x: NodeId,
    axis: usize,
    start: usize,
    stop: usize,
    step: usize,
) -> Result<NodeId, BuildError> {
    let slice = Slice {
        axis,
        start: start as i64,
        stop: Some(stop as i64),
        step,
    };
    b.op(Op::Slice(slice), &[x])
}

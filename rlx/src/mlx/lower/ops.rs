//! Each op's MLX lowering: mostly one call of an [`Array`] method (`mlx/ops.rs`), which
//! wraps one MLX function or one function of the shim.

use super::{Lower, NodeFailure, NodeInput};
use crate::ir::{self, AttentionMask, BinaryOp, CompareOp, ConstantData, ReduceOp, UnaryOp};
use crate::mlx::array::{Array, MlxError};
use crate::mlx::ops::MaskArg;
use crate::ops::{
    After, Checkpoint, DeltaRule, DeltaRuleGrad, Input, Param, Solve, State, StopGradient, Where,
};
use crate::tensor::TensorRef;

type Lowered = Result<Array, NodeFailure>;

/// Leaves are supplied by the caller, never lowered.
impl Lower for Input {
    fn lower(&self, _: &mut NodeInput<'_>) -> Lowered {
        Err(MlxError::new("a leaf was not supplied").into())
    }
}

impl Lower for Param {
    fn lower(&self, _: &mut NodeInput<'_>) -> Lowered {
        Err(MlxError::new("a leaf was not supplied").into())
    }
}

impl Lower for State {
    fn lower(&self, _: &mut NodeInput<'_>) -> Lowered {
        Err(MlxError::new("a leaf was not supplied").into())
    }
}

/// Uploaded once per binding.
impl Lower for ConstantData {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.lowering.constants.0[n.id.index()]
            .clone()
            .ok_or_else(|| MlxError::new("constant not uploaded"))?)
    }
}

impl Lower for UnaryOp {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].unary(*self)?)
    }
}

impl Lower for BinaryOp {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].binary(*self, n.x[1])?)
    }
}

impl Lower for CompareOp {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].compare(*self, n.x[1])?)
    }
}

impl Lower for Where {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].select(n.x[1], n.x[2])?)
    }
}

impl Lower for ir::Cast {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].cast(self.to)?)
    }
}

impl Lower for ir::MatMul {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].matmul(n.x[1], self.transpose_a, self.transpose_b)?)
    }
}

impl Lower for ir::Reduce {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].reduce(self.op, &self.axes, self.keep_dims)?)
    }
}

impl Lower for ir::ArgReduce {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].arg_reduce(self.op, self.axis, self.keep_dims)?)
    }
}

impl Lower for ir::Cumsum {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].cumsum(self.axis, self.exclusive, self.reverse)?)
    }
}

/// MLX has no linear recurrence: a Hillis–Steele scan over the affine maps
/// `h ↦ a_t h + b_t`, composing each position with the one `d` before it for `d` = 1, 2,
/// 4, … (`⌈log2 n⌉` rounds of a few elementwise ops, which `mx::compile` fuses), in
/// place of `n` dependent steps. The maps before the first position are the identity;
/// a starting state goes through each position's composed map (`h0` broadcasts along
/// the axis).
impl Lower for ir::LinearScan {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let one = scalar_of(n, ir::Scalar::Float(1.0))?;
        let zero = scalar_of(n, ir::Scalar::Float(0.0))?;
        let (axis, len) = (self.axis, n.shape[self.axis]);
        // `x` moved `d` positions along the scan (later positions read earlier ones), the
        // first `d` filled with `fill`.
        let shifted = |x: &Array, d: usize, fill: &Array| -> Result<Array, MlxError> {
            let mut start = vec![0; n.shape.len()];
            let mut stop = n.shape.to_vec();
            let mut pads = vec![(0, 0); n.shape.len()];
            if self.reverse {
                start[axis] = d;
                pads[axis] = (0, d);
            } else {
                stop[axis] = len - d;
                pads[axis] = (d, 0);
            }
            x.slice(&start, &stop, &vec![1; n.shape.len()])?
                .pad(&pads, fill)
        };
        let (mut a, mut b) = (n.x[0].clone(), n.x[1].clone());
        // With a starting state, `h_t = A_t·h0 + B_t`: the decays' running product is
        // needed to the end.
        let start = n.x.get(2);
        let mut d = 1;
        while d < len {
            b = a
                .binary(BinaryOp::Mul, &shifted(&b, d, &zero)?)?
                .binary(BinaryOp::Add, &b)?;
            if 2 * d < len || start.is_some() {
                a = a.binary(BinaryOp::Mul, &shifted(&a, d, &one)?)?;
            }
            d *= 2;
        }
        match start {
            Some(h0) => Ok(a.binary(BinaryOp::Mul, h0)?.binary(BinaryOp::Add, &b)?),
            None => Ok(b),
        }
    }
}

impl Lower for ir::Softmax {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].softmax(self.axis, self.log)?)
    }
}

impl Lower for ir::LayerNorm {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let w = self.has_weight.then(|| n.x[1]);
        let b = self.has_bias.then(|| n.x[1 + usize::from(self.has_weight)]);
        Ok(n.x[0].layer_norm(w, b, self.eps)?)
    }
}

impl Lower for ir::RmsNorm {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].rms_norm(self.has_weight.then(|| n.x[1]), self.eps)?)
    }
}

impl Lower for ir::Reshape {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].reshape(n.shape)?)
    }
}

impl Lower for StopGradient {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].clone())
    }
}

impl Lower for Checkpoint {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].clone())
    }
}

/// MLX's `depends`: the value, scheduled after the token, and never merged by
/// `mlx::compile` with an equal computation that does not wait for it.
impl Lower for After {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].after(n.x[1])?)
    }
}

impl Lower for ir::Permute {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].permute(&self.perm)?)
    }
}

/// MLX's strided slice, its stop made from the output's length.
impl Lower for ir::Slice {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let (axis, step) = (self.axis, self.step);
        let input = &n.lowering.shapes[n.node.inputs[0].index()];
        let len = input[axis] as i64;
        let first = if self.start < 0 {
            self.start + len
        } else {
            self.start
        } as usize;
        let count = n.shape[axis];
        let mut starts = vec![0; input.len()];
        let mut stops = input.clone();
        let mut steps = vec![1; input.len()];
        starts[axis] = first;
        stops[axis] = if count == 0 {
            first
        } else {
            first + (count - 1) * step + 1
        };
        steps[axis] = step;
        Ok(n.x[0].slice(&starts, &stops, &steps)?)
    }
}

impl Lower for ir::Concat {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(Array::concat(n.x, self.axis)?)
    }
}

impl Lower for ir::Broadcast {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].broadcast(n.shape)?)
    }
}

/// `value` as a scalar array of the node's dtype on the lowering's device.
fn scalar_of(n: &NodeInput<'_>, value: ir::Scalar) -> Result<Array, MlxError> {
    let dtype = n.node.ty.dtype;
    let bytes = value.to_bytes(dtype);
    let value = TensorRef {
        dtype,
        shape: &[],
        bytes: &bytes,
    };
    Array::from_tensor_on(value, n.lowering.device)
}

impl Lower for ir::Pad {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let fill = scalar_of(n, self.value)?;
        Ok(n.x[0].pad(&self.pads, &fill)?)
    }
}

/// Its indices are checked after evaluation (`Lowering::verify_indices`).
impl Lower for ir::Gather {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let (out, bad) = n.x[0].gather(n.x[1], self.axis)?;
        n.check_indices(bad, 1);
        Ok(out)
    }
}

/// Its indices are checked after evaluation, as a gather's.
impl Lower for ir::GatherMatMul {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let (out, bad) = n.x[0].gather_matmul(n.x[1], n.x[2], self.transpose_b)?;
        n.check_indices(bad, 2);
        Ok(out)
    }
}

/// Its indices are checked after evaluation, as a gather's.
impl Lower for ir::ScatterMatMul {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let (out, bad) = n.x[0].scatter_matmul(n.x[1], n.x[2], self.groups, self.transpose)?;
        n.check_indices(bad, 2);
        Ok(out)
    }
}

/// Its indices are checked after evaluation, as a gather's.
impl Lower for ir::ScatterAdd {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let (out, bad) = n.x[0].scatter_add(n.x[1], n.x[2], self.axis)?;
        n.check_indices(bad, 1);
        Ok(out)
    }
}

/// Its offsets are checked after evaluation, as a gather's indices.
impl Lower for ir::DynamicSlice {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let start = n.window_start(1, n.shape, &self.axes)?;
        Ok(n.x[0].dynamic_slice_at(&start, &self.axes, n.shape)?)
    }
}

/// Its offsets are checked after evaluation, as a gather's indices.
impl Lower for ir::SliceUpdate {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let window = &n.lowering.shapes[n.node.inputs[1].index()];
        let start = n.window_start(2, window, &self.axes)?;
        Ok(n.x[0].slice_update_at(n.x[1], &start, &self.axes)?)
    }
}

/// With a key length `n`, `n` is checked after evaluation, and on an NVIDIA GPU a few query
/// rows (a decoding step) attend the first `n` keys in one kernel of ours; otherwise (MLX
/// has no attention over a run-time length) the keys from `n` on are masked out, the causal
/// alignment moved to `n`.
impl Lower for ir::Attention {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        if self.key_length {
            let kernel_mask = match self.mask {
                AttentionMask::None => Some(MaskArg::None),
                AttentionMask::Causal => Some(MaskArg::Causal),
                AttentionMask::SlidingWindow(w) => Some(MaskArg::Window(w)),
                AttentionMask::Tensor => None,
            };
            if let Some(mask) = kernel_mask {
                let length = n.x[n.x.len() - 1];
                if let Some(out) =
                    n.x[0].attention_prefix(n.x[1], n.x[2], self.scale, length, mask)?
                {
                    // A repeat's length is the first's, checked there.
                    if !n.repeats_earlier() {
                        self.check_length(n)?;
                    }
                    return Ok(out);
                }
            }
            // A tensor mask is part of the mask built: only the other kinds are shared.
            let shared = self.mask != AttentionMask::Tensor;
            let allowed = match n.known_shared().filter(|_| shared) {
                Some(mask) => mask,
                None => {
                    let mask = self.length_mask(n)?;
                    if shared {
                        n.remember_shared(&mask);
                    }
                    mask
                }
            };
            return Ok(n.x[0].attention(n.x[1], n.x[2], self.scale, MaskArg::Array(&allowed))?);
        }
        let mask = match self.mask {
            AttentionMask::None => MaskArg::None,
            AttentionMask::Causal => MaskArg::Causal,
            AttentionMask::SlidingWindow(w) => MaskArg::Window(w),
            AttentionMask::Tensor => MaskArg::Array(n.x[3]),
        };
        Ok(n.x[0].attention(n.x[1], n.x[2], self.scale, mask)?)
    }
}

impl ir::Attention {
    /// Flags a key length (the last operand) outside `0..=Sk` for the check after
    /// evaluation, and returns it as `i64`: a scalar as it is, lengths per row of axis 0
    /// as `[R, 1, .., 1]` of q's rank (as they broadcast against the scores).
    fn check_length(&self, n: &mut NodeInput<'_>) -> Result<Array, NodeFailure> {
        let (lowering, node) = (n.lowering, n.node);
        let k = &lowering.shapes[node.inputs[1].index()];
        let q_rank = lowering.shapes[node.inputs[0].index()].len();
        let seq_k = k[k.len() - 2];
        let ints = |values: Vec<i64>| lowering.index_arrays.get(values, &[1, 1], lowering.device);
        let last = n.x.len() - 1;
        let lengths = &lowering.shapes[node.inputs[last].index()];
        let mut length = n.x[last].cast(ir::DType::I64)?;
        let bad = length.compare(CompareOp::Lt, &ints(vec![0])?)?.binary(
            BinaryOp::Max,
            &length.compare(CompareOp::Gt, &ints(vec![seq_k as i64])?)?,
        )?;
        // One flag for every length (the checks of a run are scalars).
        let bad = match lengths[..] {
            [] => bad.reshape(&[])?,
            _ => bad
                .cast(ir::DType::U8)?
                .reshape(&[lengths.iter().product()])?
                .reduce(ReduceOp::Max, &[0], false)?
                .cast(ir::DType::Bool)?,
        };
        n.check_indices(bad, last);
        if let [rows] = lengths[..] {
            let mut per_row = vec![1; q_rank];
            per_row[0] = rows;
            length = length.reshape(&per_row)?;
        }
        Ok(length)
    }

    /// The mask of an attention over its first `n` keys (its last operand): `bool [Sq, Sk]`
    /// with the causal or window rule aligned to `n`, or the tensor mask where `j < n`.
    fn length_mask(&self, n: &mut NodeInput<'_>) -> Result<Array, NodeFailure> {
        let (lowering, node) = (n.lowering, n.node);
        let q = &lowering.shapes[node.inputs[0].index()];
        let k = &lowering.shapes[node.inputs[1].index()];
        let rank = q.len();
        let (seq_q, seq_k) = (q[rank - 2], k[rank - 2]);
        let ints = |values: Vec<i64>, dims: [usize; 2]| {
            lowering.index_arrays.get(values, &dims, lowering.device)
        };
        let length = self.check_length(n)?;
        let keys = ints((0..seq_k as i64).collect(), [1, seq_k])?;
        let mut allowed = keys.compare(CompareOp::Lt, &length)?;
        if let AttentionMask::Causal | AttentionMask::SlidingWindow(_) = self.mask {
            // Query i sits at key position i + n − Sq.
            let rows = ints((0..seq_q as i64).collect(), [seq_q, 1])?;
            let shift = length.binary(BinaryOp::Sub, &ints(vec![seq_q as i64], [1, 1])?)?;
            let pos = rows.binary(BinaryOp::Add, &shift)?;
            let seen = keys.compare(CompareOp::Le, &pos)?;
            allowed = seen.select(&allowed, &seen)?;
            if let AttentionMask::SlidingWindow(w) = self.mask {
                let reach = keys.binary(BinaryOp::Add, &ints(vec![w as i64], [1, 1])?)?;
                let inside = reach.compare(CompareOp::Gt, &pos)?;
                allowed = inside.select(&allowed, &inside)?;
            }
        }
        if self.mask != AttentionMask::Tensor {
            return Ok(allowed);
        }
        let mask = n.x[3];
        if mask.dtype()? == ir::DType::Bool {
            return Ok(allowed.select(mask, &allowed)?);
        }
        let dtype = mask.dtype()?;
        let blocked = crate::tensor::HostTensor::from_vec(vec![f32::NEG_INFINITY], [1, 1])
            .map_err(|e| MlxError::new(e.to_string()))?;
        let blocked = Array::from_tensor_on(blocked.view(), lowering.device)?.cast(dtype)?;
        Ok(allowed.select(mask, &blocked)?)
    }
}

impl Lower for ir::Rope {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let offset = n.x.get(1).copied();
        let periods = n.lowering.rope_periods(self)?;
        Ok(n.x[0].rope(
            self.dims,
            self.base,
            self.scale,
            self.traditional,
            offset,
            periods.as_ref(),
        )?)
    }
}

impl Lower for ir::Conv {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let ir::Conv {
            stride,
            padding,
            dilation,
            groups,
        } = self;
        let bias = n.x.get(2).copied();
        Ok(n.x[0].conv(n.x[1], bias, stride, padding, dilation, *groups)?)
    }
}

impl Lower for ir::Pool {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].pool(self.kind, &self.kernel, &self.stride, &self.padding)?)
    }
}

impl Lower for ir::ConvTranspose {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let ir::ConvTranspose {
            stride,
            padding,
            output_padding,
            dilation,
            groups,
        } = self;
        let bias = n.x.get(2).copied();
        Ok(n.x[0].conv_transpose(
            n.x[1],
            bias,
            stride,
            padding,
            output_padding,
            dilation,
            *groups,
        )?)
    }
}

impl Lower for ir::Upsample {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].upsample(self.mode, [n.shape[2], n.shape[3]])?)
    }
}

impl Lower for ir::TopK {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].topk(self.k, self.axis, self.output)?)
    }
}

impl Lower for ir::Sort {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].sort(self.axis, self.descending, self.output)?)
    }
}

impl Lower for Solve {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].solve(n.x[1])?)
    }
}

impl Lower for DeltaRule {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(Array::delta_rule(n.x)?)
    }
}

impl Lower for DeltaRuleGrad {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(Array::delta_rule_grad(n.x)?)
    }
}

impl Lower for ir::BlockDequantize {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].block_dequantize(self.format.id())?)
    }
}

impl Lower for ir::RandomUniform {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        Ok(n.x[0].random_uniform(self.stream, n.shape)?)
    }
}

impl Lower for ir::Dequantize {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let x = n.x;
        Ok(x[0].dequantize(x[1], x[2], self.bits, self.group_size)?)
    }
}

impl Lower for ir::BlockMatMul {
    /// Always the exact product: MLX has no int8-activation path, and the exact value meets
    /// the int8 bound too.
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let x = n.x;
        Ok(x[0].block_matmul(x[1], self.format.id())?)
    }
}

impl Lower for ir::QuantizedMatMul {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let x = n.x;
        Ok(x[0].quantized_matmul(x[1], x[2], x[3], self.bits, self.group_size)?)
    }
}

/// The kernel the backend's registry holds for the op's name; its error is the op's.
impl Lower for ir::Custom {
    fn lower(&self, n: &mut NodeInput<'_>) -> Lowered {
        let kernel = n.lowering.custom[n.id.index()]
            .as_ref()
            .ok_or_else(|| MlxError::new(format!("no MLX kernel for {:?}", self.name)))?;
        let inputs: Vec<Array> = n.x.iter().map(|a| (*a).clone()).collect();
        kernel
            .lower(&self.attrs, &inputs, self.output.dtype, n.shape)
            .map_err(|message| {
                NodeFailure::Run(crate::backend::RunError::Custom {
                    name: self.name.clone(),
                    message,
                })
            })
    }
}

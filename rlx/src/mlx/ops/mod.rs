//! The ops of the shim as methods of [`Array`], one each, in the IR's families: each
//! builds a lazy MLX array (nothing is computed until [`Array::eval`] or a read).

use std::ptr;

use rlx_mlx_sys as sys;

use super::array::{Array, MlxError, check, dims_i64, ints, make, make_optional};
use super::codes;
use crate::ir::{
    ArgReduceOp, BinaryOp, CompareOp, DType, PoolKind, ReduceOp, SortOutput, UnaryOp, UpsampleMode,
    UpsampleTap,
};
use crate::tensor::{HostTensor, TensorError};

mod indexing;
mod quantized;

pub(crate) use quantized::block_prepared_parts;

/// `(before, after)` pairs as the shim's two arrays.
fn split_pads(pads: &[(usize, usize)]) -> (Vec<i32>, Vec<i32>) {
    pads.iter().map(|&(lo, hi)| (lo as i32, hi as i32)).unzip()
}

/// Which keys attention may see, as the shim takes it.
#[derive(Clone, Copy, Debug)]
pub enum MaskArg<'a> {
    /// Every key.
    None,
    /// Keys at or before the query's position (aligned at the end).
    Causal,
    /// Causal and within the last `window` positions.
    Window(usize),
    /// A `bool` or additive mask broadcastable to the scores.
    Array(&'a Array),
}

impl Array {
    /// `f(x)` for an IR unary op.
    pub fn unary(&self, op: UnaryOp) -> Result<Array, MlxError> {
        let kind = codes::unary(op);
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_unary(kind, self.ptr(), out) })
    }

    /// `f(self, other)` with broadcasting, for an IR binary op.
    pub fn binary(&self, op: BinaryOp, other: &Array) -> Result<Array, MlxError> {
        let kind = codes::binary(op);
        // SAFETY: both handles are live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_binary(kind, self.ptr(), other.ptr(), out) })
    }

    /// A comparison to `bool` with broadcasting.
    pub fn compare(&self, op: CompareOp, other: &Array) -> Result<Array, MlxError> {
        let kind = codes::compare(op);
        // SAFETY: both handles are live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_compare(kind, self.ptr(), other.ptr(), out) })
    }

    /// `cond ? a : b` with `self` as the condition.
    pub fn select(&self, a: &Array, b: &Array) -> Result<Array, MlxError> {
        // SAFETY: the handles are live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_where(self.ptr(), a.ptr(), b.ptr(), out) })
    }

    /// The same values stored with the last two axes swapped in memory (rank >= 2): what
    /// a GPU's matrix products prefer for a right operand, whose rows then run along the
    /// reduced axis. A lazy op, like the others.
    pub(crate) fn k_major(&self) -> Result<Array, MlxError> {
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_k_major(self.ptr(), out) })
    }

    /// Conversion with Rust `as` semantics.
    pub fn cast(&self, to: DType) -> Result<Array, MlxError> {
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_cast(self.ptr(), codes::dtype(to), out) })
    }

    /// Batched matrix product; the flags say an operand is stored with its last two axes
    /// swapped.
    pub fn matmul(
        &self,
        b: &Array,
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<Array, MlxError> {
        // SAFETY: both handles are live; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_matmul(self.ptr(), b.ptr(), transpose_a, transpose_b, out)
        })
    }

    /// `self·b` plus `bias` (`[N]`) on every row: one GEMM with a bias epilogue on a GPU.
    pub fn matmul_bias(
        &self,
        b: &Array,
        bias: &Array,
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<Array, MlxError> {
        // SAFETY: the three handles are live; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_matmul_bias(
                self.ptr(),
                b.ptr(),
                bias.ptr(),
                transpose_a,
                transpose_b,
                out,
            )
        })
    }

    /// A reduction over `axes`.
    pub fn reduce(&self, op: ReduceOp, axes: &[usize], keep_dims: bool) -> Result<Array, MlxError> {
        let kind = codes::reduce(op);
        let axes = ints(axes);
        // SAFETY: the handle is live; `axes` holds the count passed.
        make(|out| unsafe {
            sys::rlx_mlx_reduce(kind, self.ptr(), axes.as_ptr(), axes.len(), keep_dims, out)
        })
    }

    /// Argmax or argmin along `axis`, as `i64`.
    pub fn arg_reduce(
        &self,
        op: ArgReduceOp,
        axis: usize,
        keep_dims: bool,
    ) -> Result<Array, MlxError> {
        let kind = codes::arg_reduce(op);
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_arg_reduce(kind, self.ptr(), axis as i32, keep_dims, out)
        })
    }

    /// Running sum along `axis`.
    pub fn cumsum(&self, axis: usize, exclusive: bool, reverse: bool) -> Result<Array, MlxError> {
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_cumsum(self.ptr(), axis as i32, exclusive, reverse, out) })
    }

    /// Softmax or log-softmax along `axis`.
    pub fn softmax(&self, axis: usize, log: bool) -> Result<Array, MlxError> {
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_softmax(self.ptr(), axis as i32, log, out) })
    }

    /// Layer normalization over the last axis.
    pub fn layer_norm(
        &self,
        weight: Option<&Array>,
        bias: Option<&Array>,
        eps: f64,
    ) -> Result<Array, MlxError> {
        let w = weight.map_or(ptr::null_mut(), Array::ptr);
        let b = bias.map_or(ptr::null_mut(), Array::ptr);
        // SAFETY: the handles are live or null (allowed); `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_layer_norm(self.ptr(), w, b, eps, out) })
    }

    /// RMS normalization over the last axis.
    pub fn rms_norm(&self, weight: Option<&Array>, eps: f64) -> Result<Array, MlxError> {
        let w = weight.map_or(ptr::null_mut(), Array::ptr);
        // SAFETY: the handles are live or null (allowed); `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_rms_norm(self.ptr(), w, eps, out) })
    }

    /// `self + other` (one shape) and its RMS normalization over the last axis with
    /// `weight`: a residual add and the next sublayer's norm, one kernel on an NVIDIA GPU.
    pub(crate) fn add_rms_norm(
        &self,
        other: &Array,
        weight: &Array,
        eps: f64,
    ) -> Result<(Array, Array), MlxError> {
        let (mut sum, mut out) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: the handles are live; `sum` and `out` are valid slots the shim fills.
        let status = unsafe {
            sys::rlx_mlx_add_rms_norm(
                self.ptr(),
                other.ptr(),
                weight.ptr(),
                eps,
                &mut sum,
                &mut out,
            )
        };
        // Wrap before checking so a partial result is freed either way.
        let (sum, out) = (Array::from_raw(sum), Array::from_raw(out));
        check(status)?;
        match (sum, out) {
            (Some(sum), Some(out)) => Ok((sum, out)),
            _ => Err(MlxError::new("add_rms_norm left an output unset")),
        }
    }

    /// Same data, new dims.
    pub fn reshape(&self, dims: &[usize]) -> Result<Array, MlxError> {
        let dims = dims_i64(dims);
        // SAFETY: the handle is live; `dims` holds the count passed.
        make(|out| unsafe { sys::rlx_mlx_reshape(self.ptr(), dims.as_ptr(), dims.len(), out) })
    }

    /// Output axis `i` is input axis `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Array, MlxError> {
        let perm = ints(perm);
        // SAFETY: the handle is live; `perm` holds the count passed.
        make(|out| unsafe { sys::rlx_mlx_permute(self.ptr(), perm.as_ptr(), perm.len(), out) })
    }

    /// `x[start:stop:step]` per axis, all bounds in range.
    pub fn slice(
        &self,
        start: &[usize],
        stop: &[usize],
        step: &[usize],
    ) -> Result<Array, MlxError> {
        let (a, b, c) = (dims_i64(start), dims_i64(stop), dims_i64(step));
        if a.len() != b.len() || a.len() != c.len() {
            return Err(MlxError::new("slice bounds of different lengths"));
        }
        // SAFETY: the handle is live; the three slices hold the count passed.
        make(|out| unsafe {
            sys::rlx_mlx_slice(self.ptr(), a.as_ptr(), b.as_ptr(), c.as_ptr(), a.len(), out)
        })
    }

    /// Joins arrays along `axis`.
    pub fn concat(parts: &[&Array], axis: usize) -> Result<Array, MlxError> {
        let raw: Vec<*mut sys::rlx_mlx_array> = parts.iter().map(|a| a.ptr()).collect();
        // SAFETY: every handle is live; `raw` holds the count passed.
        make(|out| unsafe { sys::rlx_mlx_concat(raw.as_ptr(), raw.len(), axis as i32, out) })
    }

    /// Numpy broadcast to `dims`.
    pub fn broadcast(&self, dims: &[usize]) -> Result<Array, MlxError> {
        let dims = dims_i64(dims);
        // SAFETY: the handle is live; `dims` holds the count passed.
        make(|out| unsafe { sys::rlx_mlx_broadcast(self.ptr(), dims.as_ptr(), dims.len(), out) })
    }

    /// Constant padding; `value` is a scalar of this array's dtype.
    pub fn pad(&self, pads: &[(usize, usize)], value: &Array) -> Result<Array, MlxError> {
        let (low, high): (Vec<i64>, Vec<i64>) =
            pads.iter().map(|&(lo, hi)| (lo as i64, hi as i64)).unzip();
        // SAFETY: the handles are live; `low` and `high` hold the count passed.
        make(|out| unsafe {
            sys::rlx_mlx_pad(
                self.ptr(),
                low.as_ptr(),
                high.as_ptr(),
                low.len(),
                value.ptr(),
                out,
            )
        })
    }

    /// `softmax(q kᵀ · scale + mask) v` with `self` as `q`; rows that see no key are zero.
    pub fn attention(
        &self,
        k: &Array,
        v: &Array,
        scale: f64,
        mask: MaskArg<'_>,
    ) -> Result<Array, MlxError> {
        let (kind, window, m) = match mask {
            MaskArg::None => (sys::RLX_MLX_MASK_NONE, 0, ptr::null_mut()),
            MaskArg::Causal => (sys::RLX_MLX_MASK_CAUSAL, 0, ptr::null_mut()),
            MaskArg::Window(w) => (sys::RLX_MLX_MASK_WINDOW, w as i64, ptr::null_mut()),
            MaskArg::Array(a) => (sys::RLX_MLX_MASK_ARRAY, 0, a.ptr()),
        };
        // SAFETY: the handles are live or null where the kind allows; `out` is valid.
        make(|out| unsafe {
            sys::rlx_mlx_attention(self.ptr(), k.ptr(), v.ptr(), scale, kind, window, m, out)
        })
    }

    /// [`Array::attention`] over the first `length` keys (a scalar integer array, checked
    /// by the caller) under `mask` (not an array), by RLX's decoding kernel on an NVIDIA
    /// GPU; `None` where that kernel does not apply and the caller masks the keys instead.
    pub(crate) fn attention_prefix(
        &self,
        k: &Array,
        v: &Array,
        scale: f64,
        length: &Array,
        mask: MaskArg<'_>,
    ) -> Result<Option<Array>, MlxError> {
        let (kind, window) = match mask {
            MaskArg::None => (sys::RLX_MLX_MASK_NONE, 0),
            MaskArg::Causal => (sys::RLX_MLX_MASK_CAUSAL, 0),
            MaskArg::Window(w) => (sys::RLX_MLX_MASK_WINDOW, w as i64),
            MaskArg::Array(_) => return Ok(None),
        };
        // SAFETY: the handles are live; `out` is a valid slot the shim fills or leaves null.
        make_optional(|out| unsafe {
            sys::rlx_mlx_attention_prefix(
                self.ptr(),
                k.ptr(),
                v.ptr(),
                scale,
                length.ptr(),
                kind,
                window,
                out,
            )
        })
    }

    /// Rotary position embedding of the first `dims` features; with `periods` (`dims / 2`
    /// floats), pair `i` turns by `1 / periods[i]` radians per position instead of by
    /// `base`'s frequency.
    pub fn rope(
        &self,
        dims: usize,
        base: f64,
        scale: f64,
        traditional: bool,
        offset: Option<&Array>,
        periods: Option<&Array>,
    ) -> Result<Array, MlxError> {
        let o = offset.map_or(ptr::null_mut(), Array::ptr);
        let p = periods.map_or(ptr::null_mut(), Array::ptr);
        // SAFETY: the handles are live or null (allowed); `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_rope(self.ptr(), dims as i32, base, scale, traditional, o, p, out)
        })
    }

    /// The query and key heads packed along the last axis of `self` (`[B, S, W]`, float),
    /// each group's columns split into `[B, heads, S, head_dim]` and rotated as
    /// [`Array::rope`] rotates it: one kernel on an NVIDIA GPU (a block's joined q/k/v
    /// product straight to its rotated heads), the views and two ropes elsewhere.
    pub(crate) fn rope_heads(
        &self,
        groups: &HeadGroups,
        offset: &Array,
        periods: Option<&Array>,
    ) -> Result<(Array, Array), MlxError> {
        let groups = groups.raw()?;
        let p = periods.map_or(ptr::null_mut(), Array::ptr);
        let (mut q, mut k) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: the handles are live or null (allowed for `periods`); `groups` outlives
        // the call; `q` and `k` are valid slots the shim fills.
        let status = unsafe {
            sys::rlx_mlx_rope_heads(self.ptr(), &groups, offset.ptr(), p, &mut q, &mut k)
        };
        // Wrap before checking so a partial result is freed either way.
        let (q, k) = (Array::from_raw(q), Array::from_raw(k));
        check(status)?;
        match (q, k) {
            (Some(q), Some(k)) => Ok((q, k)),
            _ => Err(MlxError::new("rope_heads left an output unset")),
        }
    }

    /// Channels-first convolution.
    pub fn conv(
        &self,
        w: &Array,
        bias: Option<&Array>,
        stride: &[usize],
        padding: &[(usize, usize)],
        dilation: &[usize],
        groups: usize,
    ) -> Result<Array, MlxError> {
        let n = stride.len();
        if padding.len() != n || dilation.len() != n {
            return Err(MlxError::new("conv attributes of different lengths"));
        }
        let (s, d) = (ints(stride), ints(dilation));
        let (lo, hi) = split_pads(padding);
        let b = bias.map_or(ptr::null_mut(), Array::ptr);
        // SAFETY: the handles are live or null (allowed); the four slices hold `n` values.
        make(|out| unsafe {
            sys::rlx_mlx_conv(
                self.ptr(),
                w.ptr(),
                b,
                s.as_ptr(),
                lo.as_ptr(),
                hi.as_ptr(),
                d.as_ptr(),
                n,
                groups as i32,
                out,
            )
        })
    }

    /// Channels-first transposed convolution, weight `[C, O/groups, *kernel]`.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose(
        &self,
        w: &Array,
        bias: Option<&Array>,
        stride: &[usize],
        padding: &[(usize, usize)],
        output_padding: &[usize],
        dilation: &[usize],
        groups: usize,
    ) -> Result<Array, MlxError> {
        let n = stride.len();
        if padding.len() != n || output_padding.len() != n || dilation.len() != n {
            return Err(MlxError::new(
                "conv_transpose attributes of different lengths",
            ));
        }
        let (s, op, d) = (ints(stride), ints(output_padding), ints(dilation));
        let (lo, hi) = split_pads(padding);
        let b = bias.map_or(ptr::null_mut(), Array::ptr);
        // SAFETY: the handles are live or null (allowed); the five slices hold `n` values.
        make(|out| unsafe {
            sys::rlx_mlx_conv_transpose(
                self.ptr(),
                w.ptr(),
                b,
                s.as_ptr(),
                lo.as_ptr(),
                hi.as_ptr(),
                op.as_ptr(),
                d.as_ptr(),
                n,
                groups as i32,
                out,
            )
        })
    }

    /// 2-D resize of the last two axes to `size`: a gather of each axis's `lo` taps (and,
    /// for bilinear, of its `hi` taps and a blend), with the taps of [`UpsampleMode::tap`]
    /// that the CPU backend uses too. Halves are blended in f32.
    pub fn upsample(&self, mode: UpsampleMode, size: [usize; 2]) -> Result<Array, MlxError> {
        let shape = self.shape()?;
        let dtype = self.dtype()?;
        if shape.len() != 4 {
            return Err(MlxError::new("upsampling needs [N, C, H, W]"));
        }
        let work = match dtype {
            DType::F16 | DType::BF16 => DType::F32,
            other => other,
        };
        let mut y = self.cast(work)?;
        for (axis, out) in [(2, size[0]), (3, size[1])] {
            let taps: Vec<UpsampleTap> =
                (0..out).map(|at| mode.tap(at, shape[axis], out)).collect();
            let positions = |pick: fn(&UpsampleTap) -> usize| {
                let idx: Vec<i32> = taps.iter().map(|t| pick(t) as i32).collect();
                host_array(HostTensor::from_vec(idx, [out]))
            };
            let (lo, _) = y.gather(&positions(|t| t.lo)?, axis)?;
            if taps.iter().all(|t| t.t == 0.0) {
                y = lo;
                continue;
            }
            let (hi, _) = y.gather(&positions(|t| t.hi)?, axis)?;
            let weights: Vec<f64> = taps.iter().map(|t| t.t).collect();
            let weight_shape = if axis == 2 { vec![out, 1] } else { vec![out] };
            // Made in the working dtype on the host: a GPU has no float64 to cast from.
            let t = match work {
                DType::F64 => host_array(HostTensor::from_vec(weights, weight_shape))?,
                _ => {
                    let narrow: Vec<f32> = weights.iter().map(|w| *w as f32).collect();
                    host_array(HostTensor::from_vec(narrow, weight_shape))?.cast(work)?
                }
            };
            let step = hi.binary(BinaryOp::Sub, &lo)?.binary(BinaryOp::Mul, &t)?;
            y = lo.binary(BinaryOp::Add, &step)?;
        }
        y.cast(dtype)
    }

    /// Channels-first max or average pooling.
    pub fn pool(
        &self,
        kind: PoolKind,
        kernel: &[usize],
        stride: &[usize],
        padding: &[(usize, usize)],
    ) -> Result<Array, MlxError> {
        let n = kernel.len();
        if stride.len() != n || padding.len() != n {
            return Err(MlxError::new("pool attributes of different lengths"));
        }
        let (k, s) = (ints(kernel), ints(stride));
        let (lo, hi) = split_pads(padding);
        // SAFETY: the handle is live; the four slices hold `n` values.
        make(|out| unsafe {
            sys::rlx_mlx_pool(
                codes::pool(kind),
                self.ptr(),
                k.as_ptr(),
                s.as_ptr(),
                lo.as_ptr(),
                hi.as_ptr(),
                n,
                out,
            )
        })
    }

    /// Stable sort along `axis`: values, or their `i64` indices.
    pub fn sort(
        &self,
        axis: usize,
        descending: bool,
        output: SortOutput,
    ) -> Result<Array, MlxError> {
        let output = codes::sort_output(output);
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_sort(self.ptr(), axis as i32, descending, output, out) })
    }

    /// The `k` largest along `axis`, largest first (ties in index order).
    pub fn topk(&self, k: usize, axis: usize, output: SortOutput) -> Result<Array, MlxError> {
        let output = codes::sort_output(output);
        // SAFETY: the handle is live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_topk(self.ptr(), k as i32, axis as i32, output, out) })
    }

    /// Solves `self · x = b`.
    pub fn solve(&self, b: &Array) -> Result<Array, MlxError> {
        // SAFETY: both handles are live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_solve(self.ptr(), b.ptr(), out) })
    }

    /// The gated delta rule over `operands` (`q, k, v, g, beta` and optionally `s0`): the
    /// outputs then the final state (see the IR op).
    pub fn delta_rule(operands: &[&Array]) -> Result<Array, MlxError> {
        let raw: Vec<*mut sys::rlx_mlx_array> = operands.iter().map(|a| a.ptr()).collect();
        // SAFETY: every handle is live; `raw` holds the count passed.
        make(|out| unsafe { sys::rlx_mlx_delta_rule(raw.as_ptr(), raw.len(), out) })
    }

    /// The gated delta rule's packed cotangents: `operands` are the rule's, then the
    /// cotangent of its result (see the IR op).
    pub fn delta_rule_grad(operands: &[&Array]) -> Result<Array, MlxError> {
        let raw: Vec<*mut sys::rlx_mlx_array> = operands.iter().map(|a| a.ptr()).collect();
        // SAFETY: every handle is live; `raw` holds the count passed.
        make(|out| unsafe { sys::rlx_mlx_delta_rule_grad(raw.as_ptr(), raw.len(), out) })
    }
}

impl Array {
    /// Uniform `f32` values of `dims` drawn from the seed `self` (see the IR op).
    pub fn random_uniform(&self, stream: u32, dims: &[usize]) -> Result<Array, MlxError> {
        let dims = dims_i64(dims);
        // SAFETY: the handle is live; `dims` holds the count passed; `out` is a valid slot.
        make(|out| unsafe {
            sys::rlx_mlx_random_uniform(self.ptr(), stream, dims.as_ptr(), dims.len(), out)
        })
    }

    /// `self`, computed only after `token` (MLX's `depends`).
    pub fn after(&self, token: &Array) -> Result<Array, MlxError> {
        // SAFETY: the handles are live; `out` is a valid slot.
        make(|out| unsafe { sys::rlx_mlx_after(self.ptr(), token.ptr(), out) })
    }
}

/// An array holding a host tensor made on the spot.
fn host_array(t: Result<HostTensor, TensorError>) -> Result<Array, MlxError> {
    let t = t.map_err(|e| MlxError::new(e.to_string()))?;
    Array::from_tensor(t.view())
}

/// Two groups of heads packed along the last axis of a `[B, S, W]` array, and how
/// [`Array::rope_heads`] rotates them (as [`crate::ir::Rope`] does).
pub(crate) struct HeadGroups {
    /// The queries' first column and heads.
    pub q: (usize, usize),
    /// The keys' first column and heads.
    pub k: (usize, usize),
    pub head_dim: usize,
    /// Features rotated.
    pub dims: usize,
    pub base: f64,
    pub scale: f64,
    pub traditional: bool,
}

impl HeadGroups {
    /// The groups as the shim takes them.
    pub(crate) fn raw(&self) -> Result<sys::rlx_mlx_head_groups, MlxError> {
        let int = |v: usize| i32::try_from(v).map_err(|_| MlxError::new("head groups too large"));
        let col = |v: usize| i64::try_from(v).map_err(|_| MlxError::new("head groups too large"));
        Ok(sys::rlx_mlx_head_groups {
            q_col: col(self.q.0)?,
            q_heads: int(self.q.1)?,
            k_col: col(self.k.0)?,
            k_heads: int(self.k.1)?,
            head_dim: int(self.head_dim)?,
            dims: int(self.dims)?,
            base: self.base,
            scale: self.scale,
            traditional: self.traditional,
        })
    }
}

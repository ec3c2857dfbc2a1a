//! The primitive op vocabulary of the IR.
//!
//! Kept deliberately small (DESIGN §4): composites are built from these by the frontends, and
//! backends implement exactly this list. Elementwise families are one op with a kind.

use std::collections::BTreeMap;
use std::fmt;

use super::constant::{ConstantData, Scalar};
use super::dtype::DType;
pub use super::fused::{ElementwiseArg, ElementwiseStep, MatMulEpilogue};
pub use super::kinds::{
    ArgReduceOp, BinaryOp, CompareOp, PoolKind, ReduceOp, SortOutput, UnaryOp, UpsampleMode,
};
use super::shape::{Shape, TensorType};

/// Which keys a query may attend to.
///
/// For `Causal` and `SlidingWindow` the query and key sequences are aligned at their ends:
/// query `i` of `Sq` sits at key position `i + Sk - Sq`, which is what a decoder with a
/// key/value cache needs (and plain causal masking when `Sq == Sk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionMask {
    /// Every query sees every key.
    None,
    /// A query sees keys at its own position and before.
    Causal,
    /// Causal, and only the last `window` positions (including its own).
    SlidingWindow(usize),
    /// An extra operand: `bool` (true = may attend) or an additive float mask in the dtype
    /// of the queries, broadcastable to `[.., Sq, Sk]`.
    Tensor,
}

/// A value in a custom op's attribute map.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{v:?}"),
            AttrValue::Str(v) => write!(f, "{v:?}"),
            AttrValue::Ints(v) => write!(f, "{v:?}"),
            AttrValue::Floats(v) => write!(f, "{v:?}"),
        }
    }
}

/// One operation of the IR. Operands are listed per variant; shape and dtype rules live in
/// [`Op::infer`](crate::ir::Op::infer).
///
/// ```
/// use rlx::ir::{DType, Op, TensorType, UnaryOp};
/// let x = TensorType::new(DType::F32, [4, 8]);
/// assert_eq!(Op::Unary(UnaryOp::Exp).infer(&[x.clone()]).unwrap(), x);
/// assert_eq!(Op::Unary(UnaryOp::Exp).to_string(), "exp");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input, supplied on every run; its node's name is unique among inputs.
    /// No operands.
    Input,
    /// A weight, bound once per executable; its node's name (a dotted path such as
    /// `encoder.layer.0.weight`) is unique among params. No operands.
    Param,
    /// Data embedded in the graph. No operands.
    Constant(ConstantData),
    /// `f(x)`. Operands: `x`.
    Unary(UnaryOp),
    /// `f(a, b)` with broadcasting. Operands: `a`, `b` of one dtype.
    Binary(BinaryOp),
    /// Comparison to `bool` with broadcasting. Operands: `a`, `b` of one dtype.
    Compare(CompareOp),
    /// `cond ? a : b` with broadcasting of all three. Operands: `cond` (`bool`), `a`, `b`.
    Where,
    /// Conversion to another dtype (Rust `as` semantics). Operands: `x`.
    Cast {
        /// Target dtype.
        to: DType,
    },
    /// Batched matrix product `[.., M, K] x [.., K, N] -> [.., M, N]`; batch dims broadcast.
    /// Operands: `a`, `b` (float, one dtype). A transpose flag means that operand is stored
    /// with its last two axes swapped, so no transposed copy is needed.
    MatMul {
        /// `a` is stored as `[.., K, M]`.
        transpose_a: bool,
        /// `b` is stored as `[.., N, K]` (PyTorch `Linear` weights).
        transpose_b: bool,
    },
    /// A matmul and the elementwise ops that consumed it, in one kernel:
    /// `activation(a·b + bias) + residual`. Made by
    /// [`fuse_matmul_epilogues`](crate::passes::fuse_matmul_epilogues), not by frontends.
    /// Operands: `a`, `b`, then `bias` `[N]` if `epilogue.bias`, then `residual` (the
    /// output's type) if `epilogue.residual`; one float dtype.
    FusedMatMul {
        /// As in [`Op::MatMul`].
        transpose_a: bool,
        /// As in [`Op::MatMul`].
        transpose_b: bool,
        /// What is applied to the product.
        epilogue: MatMulEpilogue,
    },
    /// A chain of elementwise float ops evaluated in one pass over memory: each step reads
    /// the fused node's operands and earlier steps' results, and the last step's is the
    /// output. Made by [`fuse_elementwise`](crate::passes::fuse_elementwise), not by
    /// frontends. Operands: one float dtype, each of the output's shape or a scalar (every
    /// dim a static 1).
    FusedElementwise {
        /// The ops, in evaluation order (at least one).
        steps: Vec<ElementwiseStep>,
    },
    /// Reduction over `axes` (sorted, unique, at least one). Operands: `x`.
    Reduce {
        /// Function.
        op: ReduceOp,
        /// Axes reduced.
        axes: Vec<usize>,
        /// Keep reduced axes as size 1.
        keep_dims: bool,
    },
    /// Argmax/argmin along one axis, as `i64`. Operands: `x` (numeric).
    ArgReduce {
        /// Function.
        op: ArgReduceOp,
        /// Axis reduced.
        axis: usize,
        /// Keep the axis as size 1.
        keep_dims: bool,
    },
    /// Running sum along an axis. Operands: `x` (numeric).
    Cumsum {
        /// Axis summed along.
        axis: usize,
        /// Exclude the current element (the first output is 0).
        exclusive: bool,
        /// Sum from the end of the axis.
        reverse: bool,
    },
    /// Softmax (or log-softmax) along an axis. Operands: `x` (float).
    Softmax {
        /// Axis normalized.
        axis: usize,
        /// Produce log-softmax.
        log: bool,
    },
    /// Layer normalization over the last axis. Operands: `x`, then `weight` and `bias`
    /// (each `[last]`, dtype of `x`) when present.
    LayerNorm {
        /// Added to the variance.
        eps: f64,
        /// A `weight` operand follows `x`.
        has_weight: bool,
        /// A `bias` operand follows.
        has_bias: bool,
    },
    /// RMS normalization over the last axis. Operands: `x`, then `weight` (`[last]`) when
    /// present.
    RmsNorm {
        /// Added to the mean square.
        eps: f64,
        /// A `weight` operand follows `x`.
        has_weight: bool,
    },
    /// `x` unchanged, but the autodiff transform sends no gradient through it
    /// (`stop_gradient`, PyTorch's `detach`). Operands: `x`.
    StopGradient,
    /// Same data, new dims; element counts must be provably equal. Operands: `x`.
    Reshape {
        /// Target shape.
        shape: Shape,
    },
    /// Axis permutation: output axis `i` is input axis `perm[i]`. Operands: `x`.
    Permute {
        /// A permutation of `0..rank`.
        perm: Vec<usize>,
    },
    /// `x[start:stop:step]` along one axis. Negative `start`/`stop` count from the end;
    /// bounds are never clamped: out-of-range slices are errors. Operands: `x`.
    Slice {
        /// Axis sliced.
        axis: usize,
        /// First index (negative: from the end).
        start: i64,
        /// One past the last index (negative: from the end); `None` is the end.
        stop: Option<i64>,
        /// Stride, at least 1.
        step: usize,
    },
    /// Concatenation along an axis. Operands: one or more tensors of one dtype and rank.
    Concat {
        /// Axis joined.
        axis: usize,
    },
    /// Numpy broadcast to `shape` (size-1 or missing leading dims stretch). Operands: `x`.
    Broadcast {
        /// Target shape.
        shape: Shape,
    },
    /// Constant padding. Operands: `x`.
    Pad {
        /// `(before, after)` per axis.
        pads: Vec<(usize, usize)>,
        /// Fill value, converted to the dtype of `x`.
        value: Scalar,
    },
    /// Take along `axis` (`numpy.take`, embedding lookup): output dims are
    /// `data[..axis] ++ indices ++ data[axis+1..]`. Operands: `data`, `indices` (`i32`/`i64`).
    Gather {
        /// Axis indexed.
        axis: usize,
    },
    /// The adjoint of [`Op::Gather`]: adds `updates` into a copy of `data` at `indices` along
    /// `axis`; repeated indices accumulate. Operands: `data`, `indices`, `updates` (shaped
    /// like the gather output).
    ScatterAdd {
        /// Axis indexed.
        axis: usize,
    },
    /// Scaled dot-product attention `softmax(q kᵀ · scale + mask) v`. Operands: `q`
    /// `[.., Sq, D]`, `k` `[.., Sk, D]`, `v` `[.., Sk, Dv]`, then the mask for
    /// [`AttentionMask::Tensor`]. With rank ≥ 3 the axis before the sequence is heads: `q`
    /// may have a multiple of `k`'s heads (grouped-query attention).
    Attention {
        /// Multiplies the scores, typically `1/sqrt(D)`.
        scale: f64,
        /// Masking.
        mask: AttentionMask,
    },
    /// Rotary position embedding on the first `dims` features of the last axis; positions
    /// run along the second-to-last axis starting at the optional `offset`. Operands: `x`
    /// (float, rank ≥ 2), then `offset` (`i32`/`i64` scalar) when present.
    Rope {
        /// Features rotated (even, at most the last dim).
        dims: usize,
        /// Frequency base, e.g. 10000.
        base: f64,
        /// Positions are multiplied by this.
        scale: f64,
        /// Rotate adjacent pairs `(2i, 2i+1)` instead of the two halves.
        traditional: bool,
    },
    /// 1-D or 2-D convolution, channels first. Operands: `x` `[N, C, *spatial]`,
    /// `w` `[O, C/groups, *kernel]`, then `bias` `[O]` when present.
    Conv {
        /// Stride per spatial axis.
        stride: Vec<usize>,
        /// `(before, after)` zero padding per spatial axis.
        padding: Vec<(usize, usize)>,
        /// Dilation per spatial axis.
        dilation: Vec<usize>,
        /// Channel groups; divides `C` and `O`.
        groups: usize,
    },
    /// 1-D or 2-D transposed convolution (the adjoint of [`Op::Conv`]), channels first.
    /// Operands: `x` `[N, C, *spatial]`, `w` `[C, O/groups, *kernel]` (PyTorch's layout),
    /// then `bias` `[O]` when present. Input position `i` and tap `k` add into output
    /// position `i·stride + k·dilation − padding.0`; each output axis has
    /// `(in − 1)·stride + dilation·(kernel − 1) + 1 + output_padding − padding.0 − padding.1`
    /// positions.
    ConvTranspose {
        /// Stride per spatial axis.
        stride: Vec<usize>,
        /// `(before, after)` positions cropped from the full output per spatial axis.
        padding: Vec<(usize, usize)>,
        /// Positions added after the end per spatial axis (less than stride or dilation):
        /// picks one of the input sizes a strided conv maps to the same output size.
        output_padding: Vec<usize>,
        /// Dilation per spatial axis.
        dilation: Vec<usize>,
        /// Channel groups; divides `C` and `O`.
        groups: usize,
    },
    /// 1-D or 2-D pooling, channels first. Operands: `x` `[N, C, *spatial]`.
    Pool {
        /// Function.
        kind: PoolKind,
        /// Window per spatial axis.
        kernel: Vec<usize>,
        /// Stride per spatial axis.
        stride: Vec<usize>,
        /// `(before, after)` padding per spatial axis, at most half the window.
        padding: Vec<(usize, usize)>,
    },
    /// 2-D resizing of the last two axes to `size`, channels first. Operands: `x`
    /// `[N, C, H, W]` (float).
    Upsample {
        /// How output positions read input positions.
        mode: UpsampleMode,
        /// Output `[H, W]`, each at least 1.
        size: Shape,
    },
    /// The `k` largest elements along an axis, largest first. `k` is checked against a
    /// symbolic axis when its size is bound. Operands: `x` (numeric).
    TopK {
        /// Elements kept.
        k: usize,
        /// Axis searched.
        axis: usize,
        /// Values or `i64` indices.
        output: SortOutput,
    },
    /// Stable sort along an axis. Operands: `x` (numeric).
    Sort {
        /// Axis sorted.
        axis: usize,
        /// Largest first.
        descending: bool,
        /// Values or `i64` indices (argsort).
        output: SortOutput,
    },
    /// Solves `a x = b` for square `a`. Operands: `a` `[.., N, N]`, `b` `[.., N, K]` (float,
    /// same batch dims).
    Solve,
    /// `x · dequant(w)ᵀ` with group-wise affine dequantization
    /// `w = scale * q + bias` per `group_size` consecutive inputs. Operands: `x` `[.., K]`
    /// (float), `w` `[N, K*bits/8]` (`u8`, little-endian packing: for 4 bits the low nibble
    /// is the first element), `scales` and `biases` `[N, K/group_size]` in the dtype of `x`.
    QuantizedMatMul {
        /// 4 or 8.
        bits: u8,
        /// Inputs sharing one scale and bias: 32, 64 or 128.
        group_size: usize,
    },
    /// A user op with kernels registered per backend under `name`. Any operands; the
    /// output type is declared when the node is made.
    Custom {
        /// Registry key.
        name: String,
        /// Attributes passed to the kernels.
        attrs: BTreeMap<String, AttrValue>,
        /// The declared result type.
        output: TensorType,
    },
}

impl Op {
    /// The op's name without attributes (`matmul`, `exp`, `custom`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Param => "param",
            Op::Constant(_) => "const",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Where => "where",
            Op::Cast { .. } => "cast",
            Op::MatMul { .. } => "matmul",
            Op::FusedMatMul { .. } => "fused_matmul",
            Op::FusedElementwise { .. } => "fused_elementwise",
            Op::Reduce { op, .. } => op.name(),
            Op::ArgReduce { op, .. } => op.name(),
            Op::Cumsum { .. } => "cumsum",
            Op::Softmax { log: false, .. } => "softmax",
            Op::Softmax { log: true, .. } => "log_softmax",
            Op::LayerNorm { .. } => "layer_norm",
            Op::RmsNorm { .. } => "rms_norm",
            Op::StopGradient => "stop_gradient",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Broadcast { .. } => "broadcast",
            Op::Pad { .. } => "pad",
            Op::Gather { .. } => "gather",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::Attention { .. } => "attention",
            Op::Rope { .. } => "rope",
            Op::Conv { .. } => "conv",
            Op::ConvTranspose { .. } => "conv_transpose",
            Op::Pool { kind, .. } => kind.name(),
            Op::Upsample { mode, .. } => mode.name(),
            Op::TopK { .. } => "topk",
            Op::Sort {
                output: SortOutput::Values,
                ..
            } => "sort",
            Op::Sort {
                output: SortOutput::Indices,
                ..
            } => "argsort",
            Op::Solve => "solve",
            Op::QuantizedMatMul { .. } => "quantized_matmul",
            Op::Custom { .. } => "custom",
        }
    }

    /// True for the leaves: inputs, params and constants.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input | Op::Param | Op::Constant(_))
    }

    /// This op with the dims its attributes hold (reshape and broadcast targets, upsampling
    /// sizes, a custom op's declared output) replaced by `out`, the node's output dims
    /// once its runtime dims are bound; ops without dims in their attributes are returned
    /// unchanged. Backends re-check each node's rules on bound shapes with it.
    ///
    /// ```
    /// use rlx::ir::{Dim, Op, Shape};
    /// let op = Op::Reshape { shape: Shape::new([Dim::sym("batch"), Dim::Static(4)]) };
    /// assert_eq!(op.bind_dims(&[2, 4]), Op::Reshape { shape: Shape::from([2, 4]) });
    /// ```
    pub fn bind_dims(&self, out: &[usize]) -> Op {
        let bound = Shape::from(out);
        match self {
            Op::Reshape { .. } => Op::Reshape { shape: bound },
            Op::Broadcast { .. } => Op::Broadcast { shape: bound },
            Op::Upsample { mode, .. } => Op::Upsample {
                mode: *mode,
                size: Shape::from(&out[out.len().saturating_sub(2)..]),
            },
            Op::Custom {
                name,
                attrs,
                output,
            } => Op::Custom {
                name: name.clone(),
                attrs: attrs.clone(),
                output: TensorType::new(output.dtype, bound),
            },
            Op::Input
            | Op::Param
            | Op::Constant(_)
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Where
            | Op::Cast { .. }
            | Op::MatMul { .. }
            | Op::FusedMatMul { .. }
            | Op::FusedElementwise { .. }
            | Op::Reduce { .. }
            | Op::ArgReduce { .. }
            | Op::Cumsum { .. }
            | Op::Softmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. }
            | Op::StopGradient
            | Op::Permute { .. }
            | Op::Slice { .. }
            | Op::Concat { .. }
            | Op::Pad { .. }
            | Op::Gather { .. }
            | Op::ScatterAdd { .. }
            | Op::Attention { .. }
            | Op::Rope { .. }
            | Op::Conv { .. }
            | Op::ConvTranspose { .. }
            | Op::Pool { .. }
            | Op::TopK { .. }
            | Op::Sort { .. }
            | Op::Solve
            | Op::QuantizedMatMul { .. } => self.clone(),
        }
    }
}

/// Writes `name` then the non-default attributes as `[k=v, ...]`.
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut attrs: Vec<String> = Vec::new();
        match self {
            Op::Input
            | Op::Param
            | Op::Constant(_)
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Where
            | Op::StopGradient
            | Op::Solve => {}
            Op::Cast { to } => attrs.push(format!("to={to}")),
            Op::FusedElementwise { steps } => {
                attrs.extend(steps.iter().map(|step| step.name().to_string()));
            }
            Op::MatMul {
                transpose_a,
                transpose_b,
            }
            | Op::FusedMatMul {
                transpose_a,
                transpose_b,
                ..
            } => {
                if *transpose_a {
                    attrs.push("transpose_a".into());
                }
                if *transpose_b {
                    attrs.push("transpose_b".into());
                }
                if let Op::FusedMatMul { epilogue, .. } = self {
                    if epilogue.bias {
                        attrs.push("+bias".into());
                    }
                    if let Some(act) = epilogue.activation {
                        attrs.push(act.name().into());
                    }
                    if epilogue.residual {
                        attrs.push("+residual".into());
                    }
                }
            }
            Op::Reduce {
                axes, keep_dims, ..
            } => {
                attrs.push(format!("axes={axes:?}"));
                if *keep_dims {
                    attrs.push("keep_dims".into());
                }
            }
            Op::ArgReduce {
                axis, keep_dims, ..
            } => {
                attrs.push(format!("axis={axis}"));
                if *keep_dims {
                    attrs.push("keep_dims".into());
                }
            }
            Op::Cumsum {
                axis,
                exclusive,
                reverse,
            } => {
                attrs.push(format!("axis={axis}"));
                if *exclusive {
                    attrs.push("exclusive".into());
                }
                if *reverse {
                    attrs.push("reverse".into());
                }
            }
            Op::Softmax { axis, .. } => attrs.push(format!("axis={axis}")),
            Op::LayerNorm {
                eps,
                has_weight,
                has_bias,
            } => {
                attrs.push(format!("eps={eps:e}"));
                if !has_weight {
                    attrs.push("no_weight".into());
                }
                if !has_bias {
                    attrs.push("no_bias".into());
                }
            }
            Op::RmsNorm { eps, has_weight } => {
                attrs.push(format!("eps={eps:e}"));
                if !has_weight {
                    attrs.push("no_weight".into());
                }
            }
            Op::Reshape { shape } => attrs.push(format!("shape={shape}")),
            Op::Permute { perm } => attrs.push(format!("perm={perm:?}")),
            Op::Slice {
                axis,
                start,
                stop,
                step,
            } => {
                let stop = stop.map(|s| s.to_string()).unwrap_or_default();
                let step = if *step == 1 {
                    String::new()
                } else {
                    format!(":{step}")
                };
                attrs.push(format!("axis={axis}, {start}:{stop}{step}"));
            }
            Op::Concat { axis } | Op::Gather { axis } | Op::ScatterAdd { axis } => {
                attrs.push(format!("axis={axis}"))
            }
            Op::Broadcast { shape } => attrs.push(format!("shape={shape}")),
            Op::Pad { pads, value } => {
                let pads: Vec<String> = pads.iter().map(|(a, b)| format!("{a}:{b}")).collect();
                attrs.push(format!("pads=[{}]", pads.join(",")));
                attrs.push(format!("value={value}"));
            }
            Op::Attention { scale, mask } => {
                attrs.push(format!("scale={scale}"));
                match mask {
                    AttentionMask::None => {}
                    AttentionMask::Causal => attrs.push("causal".into()),
                    AttentionMask::SlidingWindow(w) => attrs.push(format!("window={w}")),
                    AttentionMask::Tensor => attrs.push("mask".into()),
                }
            }
            Op::Rope {
                dims,
                base,
                scale,
                traditional,
            } => {
                attrs.push(format!("dims={dims}, base={base}"));
                if *scale != 1.0 {
                    attrs.push(format!("scale={scale}"));
                }
                if *traditional {
                    attrs.push("traditional".into());
                }
            }
            Op::Conv {
                stride,
                padding,
                dilation,
                groups,
            } => {
                attrs.push(format!("stride={stride:?}"));
                attrs.push(format!("padding={padding:?}"));
                if dilation.iter().any(|d| *d != 1) {
                    attrs.push(format!("dilation={dilation:?}"));
                }
                if *groups != 1 {
                    attrs.push(format!("groups={groups}"));
                }
            }
            Op::ConvTranspose {
                stride,
                padding,
                output_padding,
                dilation,
                groups,
            } => {
                attrs.push(format!("stride={stride:?}"));
                attrs.push(format!("padding={padding:?}"));
                if output_padding.iter().any(|p| *p != 0) {
                    attrs.push(format!("output_padding={output_padding:?}"));
                }
                if dilation.iter().any(|d| *d != 1) {
                    attrs.push(format!("dilation={dilation:?}"));
                }
                if *groups != 1 {
                    attrs.push(format!("groups={groups}"));
                }
            }
            Op::Upsample { size, .. } => attrs.push(format!("size={size}")),
            Op::Pool {
                kernel,
                stride,
                padding,
                ..
            } => {
                attrs.push(format!("kernel={kernel:?}"));
                attrs.push(format!("stride={stride:?}"));
                attrs.push(format!("padding={padding:?}"));
            }
            Op::TopK { k, axis, output } => {
                attrs.push(format!("k={k}, axis={axis}"));
                if *output == SortOutput::Indices {
                    attrs.push("indices".into());
                }
            }
            Op::Sort {
                axis, descending, ..
            } => {
                attrs.push(format!("axis={axis}"));
                if *descending {
                    attrs.push("descending".into());
                }
            }
            Op::QuantizedMatMul { bits, group_size } => {
                attrs.push(format!("bits={bits}, group_size={group_size}"))
            }
            Op::Custom {
                name,
                attrs: custom,
                output,
            } => {
                attrs.push(format!("{name:?}"));
                attrs.extend(custom.iter().map(|(k, v)| format!("{k}={v}")));
                attrs.push(format!("-> {output}"));
            }
        }
        if !attrs.is_empty() {
            write!(f, "[{}]", attrs.join(", "))?;
        }
        Ok(())
    }
}

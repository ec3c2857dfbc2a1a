//! Lowering: one node with concrete shapes and planned views becomes a few thunks.

mod geometry;
mod scratch;

use crate::ir::{Concat, LayerNorm, Pad, Permute, RmsNorm, Slice, TopK};
use scratch::attention_tiling;
pub(crate) use scratch::scratch_requests;

use super::fuse::{Fusion, MatMulEpilogue};
use super::kernels::gemm::{GemmPlan, kernel_shape};
use super::kernels::layout::{Strided, contiguous_strides};
use super::kernels::linalg::QuantDims;
use super::kernels::nn::{AttentionDims, HeadLayout, KeyRange, MaskLayout, RopeDims};
use super::kernels::numeric::accumulator;
use super::kernels::reduce::NormKind;
use super::thunks::{self, Thunk, View};
use crate::backend::NodeSite;
use crate::ir::{AttentionMask, DType, Node, NodeId, Op};
use crate::ops::Lowerable;
use geometry::{axis3, batch_workers, conv_geometry, matmul_layout, numel, resize, window};

/// What lowering needs to know about one node.
pub(crate) struct LowerInput<'a> {
    pub id: NodeId,
    pub node: &'a Node,
    /// How the CPU fuses the node (its operands are then the fusion's).
    pub fusion: Option<&'a Fusion>,
    /// Concrete dims of each operand, then of the output.
    pub operand_shapes: Vec<&'a [usize]>,
    pub out_shape: &'a [usize],
    pub operand_views: Vec<View>,
    pub operand_dtypes: Vec<DType>,
    pub out_view: View,
    /// Scratch views requested by [`scratch_requests`], in order.
    pub scratch: Vec<View>,
    pub threads: usize,
    /// The kernel of a custom op, looked up in the backend's registry.
    pub custom: Option<std::sync::Arc<dyn super::custom::CustomKernel>>,
    /// For a matmul whose `b` is a weight: its packing in the static region.
    pub packed_b: Option<View>,
    /// For an attention: which of q, k, v and the output are stored `[.., S, H, D]` (the
    /// plan dropped the permute that would have made them `[.., H, S, D]`).
    pub sequence_major: [bool; 4],
}

/// The thunks computing `input.node`. Empty outputs need none; reshapes are views.
pub(crate) fn lower(input: LowerInput<'_>) -> Vec<Thunk> {
    let LowerInput {
        id,
        node,
        fusion,
        operand_shapes: shapes,
        out_shape,
        operand_views: views,
        operand_dtypes,
        out_view: out,
        scratch,
        threads,
        custom,
        packed_b,
        sequence_major,
    } = input;
    let dtype = node.ty.dtype;
    if out.len == 0 {
        return Vec::new();
    }
    let operand_dtype = |i: usize| operand_dtypes[i];
    let site = NodeSite::of(id, node);
    let gemm = |transpose_a: bool, transpose_b: bool, epilogue: Option<&MatMulEpilogue>| {
        let (dims, batches) =
            matmul_layout(transpose_a, transpose_b, shapes[0], shapes[1], out_shape);
        let plan = GemmPlan::new(dims, threads, kernel_shape(accumulator(dtype)));
        let epilogue = epilogue.map(|epilogue| {
            let mut extra = views[2..].iter().copied();
            thunks::EpilogueViews {
                bias: epilogue.bias.then(|| extra.next()).flatten(),
                activation: epilogue.activation,
                residual: epilogue.residual.then(|| extra.next()).flatten(),
            }
        });
        vec![boxed(thunks::MatMul {
            dtype,
            batch_workers: batch_workers(&plan, batches.len(), threads),
            plan,
            batches,
            a: views[0],
            b: views[1],
            out,
            scratch: scratch[0],
            wide_out: scratch.get(1).copied(),
            packed_b,
            epilogue,
        })]
    };
    match fusion {
        None => {}
        Some(Fusion::Absorbed) => return Vec::new(),
        Some(Fusion::MatMul {
            transpose_a,
            transpose_b,
            epilogue,
            ..
        }) => return gemm(*transpose_a, *transpose_b, Some(epilogue)),
        Some(Fusion::Elementwise { steps, .. }) => {
            return vec![boxed(thunks::FusedElementwise {
                steps: steps.clone(),
                dtype,
                operands: views
                    .iter()
                    .zip(shapes)
                    .map(|(view, shape)| (*view, numel(shape) == 1 && numel(out_shape) != 1))
                    .collect(),
                out,
            })];
        }
    }
    match node.op.lowerable() {
        Lowerable::Input
        | Lowerable::Param
        | Lowerable::Constant(_)
        | Lowerable::Reshape(_)
        | Lowerable::StopGradient => Vec::new(),
        Lowerable::Unary(kind) => vec![boxed(thunks::Unary {
            kind: *kind,
            dtype,
            x: views[0],
            out,
        })],
        Lowerable::Binary(kind) => vec![boxed(thunks::Binary {
            kind: *kind,
            dtype,
            layout: Strided::broadcast(out_shape, [shapes[0], shapes[1]]),
            a: views[0],
            b: views[1],
            out,
        })],
        Lowerable::Compare(kind) => vec![boxed(thunks::Compare {
            kind: *kind,
            dtype: operand_dtype(0),
            layout: Strided::broadcast(out_shape, [shapes[0], shapes[1]]),
            a: views[0],
            b: views[1],
            out,
        })],
        Lowerable::Where => vec![boxed(thunks::Select {
            dtype,
            layout: Strided::broadcast(out_shape, [shapes[0], shapes[1], shapes[2]]),
            cond: views[0],
            a: views[1],
            b: views[2],
            out,
        })],
        Lowerable::Cast(crate::ir::Cast { to }) => vec![boxed(thunks::Cast {
            from: operand_dtype(0),
            to: *to,
            x: views[0],
            out,
        })],
        Lowerable::MatMul(crate::ir::MatMul {
            transpose_a,
            transpose_b,
        }) => gemm(*transpose_a, *transpose_b, None),
        Lowerable::Reduce(crate::ir::Reduce { op, axes, .. }) => {
            let (first, last) = (axes[0], axes[axes.len() - 1]);
            debug_assert_eq!(
                last - first + 1,
                axes.len(),
                "legalize splits reductions into blocks"
            );
            vec![boxed(thunks::Reduce {
                op: *op,
                dtype,
                shape: axis3(shapes[0], first, last),
                x: views[0],
                out,
            })]
        }
        Lowerable::ArgReduce(crate::ir::ArgReduce { op, axis, .. }) => {
            vec![boxed(thunks::ArgReduce {
                op: *op,
                dtype: operand_dtype(0),
                shape: axis3(shapes[0], *axis, *axis),
                x: views[0],
                out,
            })]
        }
        Lowerable::Cumsum(crate::ir::Cumsum {
            axis,
            exclusive,
            reverse,
        }) => vec![boxed(thunks::Cumsum {
            dtype,
            shape: axis3(shapes[0], *axis, *axis),
            exclusive: *exclusive,
            reverse: *reverse,
            x: views[0],
            out,
        })],
        Lowerable::Composite(Op::Softmax(crate::ir::Softmax { axis, log })) => {
            vec![boxed(thunks::Softmax {
                log: *log,
                dtype,
                shape: axis3(shapes[0], *axis, *axis),
                x: views[0],
                out,
            })]
        }
        Lowerable::Composite(Op::LayerNorm(LayerNorm {
            eps,
            has_weight,
            has_bias,
        })) => {
            let weight = has_weight.then(|| views[1]);
            let bias = has_bias.then(|| views[1 + usize::from(*has_weight)]);
            vec![norm(
                NormKind::Layer,
                *eps,
                dtype,
                out_shape,
                views[0],
                weight,
                bias,
                out,
            )]
        }
        Lowerable::Composite(Op::RmsNorm(RmsNorm { eps, has_weight })) => {
            let weight = has_weight.then(|| views[1]);
            vec![norm(
                NormKind::Rms,
                *eps,
                dtype,
                out_shape,
                views[0],
                weight,
                None,
                out,
            )]
        }
        Lowerable::Permute(Permute { perm }) => {
            let src = contiguous_strides(shapes[0]);
            let layout = Strided {
                dims: out_shape.to_vec(),
                strides: [
                    contiguous_strides(out_shape),
                    perm.iter().map(|p| src[*p]).collect(),
                ],
            };
            vec![copy(dtype, layout, 0, 0, views[0], out)]
        }
        Lowerable::Slice(Slice {
            axis, start, step, ..
        }) => {
            let size = shapes[0][*axis] as i64;
            let first = if *start < 0 { size + start } else { *start } as usize;
            let mut src = contiguous_strides(shapes[0]);
            let src_at = first * src[*axis];
            src[*axis] *= step;
            let layout = Strided {
                dims: out_shape.to_vec(),
                strides: [contiguous_strides(out_shape), src],
            };
            vec![copy(dtype, layout, 0, src_at, views[0], out)]
        }
        Lowerable::Broadcast(_) => {
            let layout = Strided::broadcast(out_shape, [out_shape, shapes[0]]);
            vec![copy(dtype, layout, 0, 0, views[0], out)]
        }
        Lowerable::Concat(Concat { axis }) => {
            let dst = contiguous_strides(out_shape);
            let mut offset = 0;
            let mut thunks = Vec::new();
            for (shape, view) in shapes.iter().zip(&views) {
                if view.len > 0 {
                    let layout = Strided {
                        dims: shape.to_vec(),
                        strides: [dst.clone(), contiguous_strides(shape)],
                    };
                    thunks.push(copy(dtype, layout, offset * dst[*axis], 0, *view, out));
                }
                offset += shape[*axis];
            }
            thunks
        }
        Lowerable::Pad(Pad { pads, value }) => {
            let dst = contiguous_strides(out_shape);
            let mut pattern = [0u8; 8];
            let bytes = value.to_bytes(dtype);
            pattern[..bytes.len()].copy_from_slice(&bytes);
            let mut thunks = vec![boxed(thunks::Fill {
                dtype,
                pattern: u64::from_le_bytes(pattern),
                dst: out,
            })];
            if views[0].len > 0 {
                let at = pads
                    .iter()
                    .zip(&dst)
                    .map(|((before, _), s)| before * s)
                    .sum();
                let layout = Strided {
                    dims: shapes[0].to_vec(),
                    strides: [dst, contiguous_strides(shapes[0])],
                };
                thunks.push(copy(dtype, layout, at, 0, views[0], out));
            }
            thunks
        }
        Lowerable::Gather(crate::ir::Gather { axis }) => {
            let s = axis3(shapes[0], *axis, *axis);
            vec![boxed(thunks::Gather {
                dtype,
                index: operand_dtype(1),
                outer: s.outer,
                axis_len: s.len,
                inner: s.inner,
                data: views[0],
                indices: views[1],
                out,
                at: site,
            })]
        }
        Lowerable::ScatterAdd(crate::ir::ScatterAdd { axis }) => {
            let s = axis3(shapes[0], *axis, *axis);
            let layout = Strided {
                dims: vec![out.len],
                strides: [vec![1], vec![1]],
            };
            vec![
                copy(dtype, layout, 0, 0, views[0], out),
                boxed(thunks::ScatterAdd {
                    dtype,
                    index: operand_dtype(1),
                    outer: s.outer,
                    axis_len: s.len,
                    inner: s.inner,
                    indices: views[1],
                    updates: views[2],
                    out,
                    at: site,
                }),
            ]
        }
        Lowerable::TopK(TopK { k, axis, output }) => {
            vec![sort(
                operand_dtype(0),
                shapes[0],
                *axis,
                true,
                *k,
                *output,
                views[0],
                out,
                scratch[0],
            )]
        }
        Lowerable::Sort(crate::ir::Sort {
            axis,
            descending,
            output,
        }) => {
            let keep = shapes[0][*axis];
            vec![sort(
                operand_dtype(0),
                shapes[0],
                *axis,
                *descending,
                keep,
                *output,
                views[0],
                out,
                scratch[0],
            )]
        }
        Lowerable::Composite(Op::Rope(crate::ir::Rope {
            dims,
            base,
            scale,
            traditional,
        })) => {
            let rank = out_shape.len();
            vec![boxed(thunks::Rope {
                dtype,
                dims: RopeDims {
                    batches: numel(&out_shape[..rank - 2]),
                    seq: out_shape[rank - 2],
                    features: out_shape[rank - 1],
                    dims: *dims,
                    base: *base,
                    scale: *scale,
                    traditional: *traditional,
                },
                offset: (views.len() > 1).then(|| (views[1], operand_dtype(1))),
                x: views[0],
                out,
            })]
        }
        Lowerable::Attention(crate::ir::Attention { scale, mask }) => {
            let (q, k) = (shapes[0], shapes[1]);
            let rank = q.len();
            let heads = numel(&q[..rank - 2]);
            let (q_heads_axis, group) = if rank >= 3 {
                (q[rank - 3], q[rank - 3] / k[rank - 3])
            } else {
                (1, 1)
            };
            let mut scores_shape = q[..rank - 1].to_vec();
            scores_shape.push(k[rank - 2]);
            let mask_layout = (*mask == AttentionMask::Tensor).then(|| {
                // The mask broadcasts (right-aligned) to [lead.., Sq, Sk]; each flattened head
                // gets its own offset, since a mask may vary with some leading axes only
                // (e.g. a [B, 1, 1, Sk] padding mask).
                let m = shapes[3];
                let own = contiguous_strides(m);
                let offset = scores_shape.len() - m.len();
                let stride = |axis: usize| -> usize {
                    if axis < offset || m[axis - offset] == 1 {
                        0
                    } else {
                        own[axis - offset]
                    }
                };
                let lead = &q[..rank - 2];
                let head_offsets = (0..heads)
                    .map(|flat| {
                        let (mut rest, mut at) = (flat, 0);
                        for axis in (0..lead.len()).rev() {
                            at += (rest % lead[axis]) * stride(axis);
                            rest /= lead[axis];
                        }
                        at
                    })
                    .collect();
                MaskLayout {
                    head_offsets,
                    query_stride: stride(rank - 2),
                    key_stride: stride(rank - 1),
                }
            });
            let keys = match mask {
                AttentionMask::Causal => KeyRange::Causal { window: None },
                AttentionMask::SlidingWindow(w) => KeyRange::Causal { window: Some(*w) },
                AttentionMask::None | AttentionMask::Tensor => KeyRange::All,
            };
            vec![boxed(thunks::Attention {
                dtype,
                tiling: attention_tiling(dtype, q, k, out_shape, threads),
                dims: AttentionDims {
                    heads,
                    group,
                    seq_q: q[rank - 2],
                    seq_k: k[rank - 2],
                    head_dim: q[rank - 1],
                    value_dim: out_shape[rank - 1],
                    scale: *scale,
                    keys,
                    mask: mask_layout,
                    q_heads_axis,
                    layouts: std::array::from_fn(|i| {
                        let shape = if i < 3 { shapes[i] } else { out_shape };
                        if sequence_major[i] {
                            HeadLayout::sequence_major(shape)
                        } else {
                            HeadLayout::contiguous(shape)
                        }
                    }),
                },
                q: views[0],
                k: views[1],
                v: views[2],
                mask: (*mask == AttentionMask::Tensor).then(|| (views[3], operand_dtype(3))),
                out,
                scratch: scratch[0],
            })]
        }
        Lowerable::Pool(crate::ir::Pool {
            kind,
            kernel,
            stride,
            padding,
        }) => {
            let ones = vec![1; kernel.len()];
            vec![boxed(thunks::Pool {
                dtype,
                window: window(shapes[0], out_shape, kernel, stride, padding, &ones),
                kind: *kind,
                x: views[0],
                out,
            })]
        }
        Lowerable::Conv(_) | Lowerable::ConvTranspose(_) => {
            let geometry = conv_geometry(&node.op, dtype, shapes[0], shapes[1], out_shape, threads);
            let (direction, _) = geometry.expect("a conv node has a conv geometry");
            vec![boxed(thunks::Conv {
                dtype,
                direction,
                x: views[0],
                w: views[1],
                bias: views.get(2).copied(),
                out,
                col: scratch[0],
                scratch: scratch[1],
                wide_out: scratch.get(2).copied(),
            })]
        }
        Lowerable::Upsample(crate::ir::Upsample { mode, .. }) => vec![boxed(thunks::Upsample {
            dtype,
            resize: resize(*mode, shapes[0], out_shape),
            x: views[0],
            out,
        })],
        Lowerable::Solve => {
            let a = shapes[0];
            let rank = a.len();
            let (n, k) = (a[rank - 1], shapes[1][rank - 1]);
            vec![boxed(thunks::Solve {
                dtype,
                batch: numel(&a[..rank - 2]),
                n,
                k,
                a: views[0],
                b: views[1],
                out,
                work: scratch[0],
                at: site,
            })]
        }
        Lowerable::QuantizedMatMul(crate::ir::QuantizedMatMul { bits, group_size }) => {
            let x = shapes[0];
            let k = x[x.len() - 1];
            vec![boxed(thunks::QuantizedMatMul {
                dtype,
                dims: QuantDims {
                    rows: numel(&x[..x.len() - 1]),
                    n: shapes[1][0],
                    k,
                    bits: *bits,
                    group: *group_size,
                },
                x: views[0],
                w: views[1],
                scales: views[2],
                biases: views[3],
                out,
            })]
        }
        Lowerable::Custom(crate::ir::Custom { name, attrs, .. }) => vec![boxed(thunks::Custom {
            name: name.clone(),
            kernel: custom.expect("compile checks the registry"),
            attrs: attrs.clone(),
            inputs: views
                .iter()
                .zip(&operand_dtypes)
                .zip(&shapes)
                .map(|((v, d), s)| (*v, *d, s.to_vec()))
                .collect(),
            out,
            out_dtype: dtype,
            out_shape: out_shape.to_vec(),
        })],
        Lowerable::Composite(op) => {
            unreachable!("{op}: a composite without a CPU kernel is decomposed at compile time")
        }
    }
}

/// Whether the CPU lowers `op` by a kernel of its own: every primitive, and the composites
/// with an arm in [`lower`]. The other composites are decomposed at compile time.
pub(crate) fn has_kernel(op: &Op) -> bool {
    !op.is_composite()
        || matches!(
            op,
            Op::Softmax(_) | Op::LayerNorm(_) | Op::RmsNorm(_) | Op::Rope(_)
        )
}

#[allow(clippy::too_many_arguments)]
fn norm(
    kind: NormKind,
    eps: f64,
    dtype: DType,
    shape: &[usize],
    x: View,
    weight: Option<View>,
    bias: Option<View>,
    out: View,
) -> Thunk {
    boxed(thunks::Norm {
        kind,
        eps,
        dtype,
        features: *shape.last().unwrap_or(&1),
        x,
        weight,
        bias,
        out,
    })
}

/// Sort, argsort or top-k: the first `keep` positions of each line along `axis`.
#[allow(clippy::too_many_arguments)]
fn sort(
    dtype: DType,
    shape: &[usize],
    axis: usize,
    descending: bool,
    keep: usize,
    output: crate::ir::SortOutput,
    x: View,
    out: View,
    order: View,
) -> Thunk {
    boxed(thunks::Sort {
        dtype,
        shape: axis3(shape, axis, axis),
        descending,
        keep,
        output,
        x,
        out,
        order: View {
            len: shape[axis],
            ..order
        },
    })
}

/// A planned kernel call.
fn boxed(kernel: impl thunks::Kernel + 'static) -> Thunk {
    Box::new(kernel)
}

fn copy(
    dtype: DType,
    layout: Strided<2>,
    dst_at: usize,
    src_at: usize,
    src: View,
    dst: View,
) -> Thunk {
    boxed(thunks::StridedCopy {
        dtype,
        layout: layout.coalesced(),
        dst_at,
        src_at,
        src,
        dst,
    })
}

//! Rope and attention thunks.

use super::geometry::numel;
use super::{Lower, LowerInput, Sizes, boxed};
use crate::backend::RunError;
use crate::cpu::kernels::attention::{
    self, AttentionDims, AttentionTiling, HeadLayout, KeyRange, MaskLayout, MaskValues, Rows,
};
use crate::cpu::kernels::gemm::GemmAcc;
use crate::cpu::kernels::gemm::kernel_shape;
use crate::cpu::kernels::layout::contiguous_strides;
use crate::cpu::kernels::numeric::{FloatStore, accumulator};
use crate::cpu::kernels::positions::RowPositions;
use crate::cpu::kernels::rope::{self, RopeDims};
use crate::cpu::thunk::Thunk;
use crate::cpu::thunk::{Accesses, Kernel, float_type};
use crate::cpu::view::{Memory, View};
use crate::ir::{self, AttentionMask, DType};

/// Rotary position embedding; the position offset is an optional `i32`/`i64` scalar.
#[derive(Clone, Debug)]
pub(crate) struct Rope {
    pub dtype: DType,
    pub dims: RopeDims,
    pub offset: Option<(View, DType)>,
    pub x: View,
    pub out: View,
}

impl Kernel for Rope {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let mut reads = vec![(self.x, s)];
        reads.extend(self.offset.map(|(v, d)| (v, d.size_bytes())));
        Accesses {
            writes: vec![(self.out, s)],
            reads,
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let offsets = match self.offset {
            None => RowPositions::One(0),
            Some(offset) => positions(mem, offset),
        };
        float_type!(self.dtype, |T| rope::rope::<T>(
            &self.dims,
            offsets,
            mem.src(self.x),
            mem.dst(self.out)
        ));
        Ok(())
    }
}

/// A run-time position operand: a scalar for every row, or a vector of one per row of
/// axis 0.
pub(super) fn positions<'m>(mem: &'m Memory<'_>, (view, dtype): (View, DType)) -> RowPositions<'m> {
    match (dtype, view.len) {
        (DType::I32, 1) => RowPositions::One(i64::from(mem.src::<i32>(view)[0])),
        (DType::I32, _) => RowPositions::I32(mem.src(view)),
        (_, 1) => RowPositions::One(mem.src::<i64>(view)[0]),
        _ => RowPositions::I64(mem.src(view)),
    }
}

/// Scaled dot-product attention, blocked as its tiling says.
#[derive(Clone, Debug)]
pub(crate) struct Attention {
    pub dtype: DType,
    pub dims: AttentionDims,
    pub tiling: AttentionTiling,
    pub q: View,
    pub k: View,
    pub v: View,
    pub mask: Option<(View, DType)>,
    /// The number of keys attended, read at run time (at most the keys' length).
    pub key_length: Option<(View, DType)>,
    pub out: View,
    pub at: crate::backend::NodeSite,
    /// One slot per worker, in the accumulator type.
    pub scratch: View,
    /// For int8 keys and values (`k` and `v` then views of `i8`): their scales per row,
    /// and the workers' blocks of rows scaled back.
    pub int8: Option<Int8Rows>,
}

/// Where an attention over int8 rows finds their scales and its scratch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Int8Rows {
    pub key_scales: Option<View>,
    pub value_scales: Option<View>,
    pub scratch: View,
}

impl Attention {
    fn run<T: FloatStore>(&self, mem: &Memory, keys: RowPositions<'_>)
    where
        T::Acc: GemmAcc,
    {
        let mask = match self.mask {
            None => MaskValues::None,
            Some((v, DType::Bool)) => MaskValues::Bool(mem.src::<u8>(v)),
            Some((v, _)) => MaskValues::Additive(mem.src::<T>(v)),
        };
        let rows = |values: View, scales: Option<View>| match scales {
            None => Rows::Float(mem.src::<T>(values)),
            Some(scales) => Rows::Int8 {
                values: mem.src::<i8>(values),
                scales: mem.src::<f32>(scales),
            },
        };
        let scales = self
            .int8
            .map_or([None; 2], |i| [i.key_scales, i.value_scales]);
        let rows_scratch: &mut [T] = match self.int8 {
            Some(i) => mem.dst(i.scratch),
            None => &mut [],
        };
        attention::attention::<T>(
            &self.dims,
            keys,
            &self.tiling,
            mem.src(self.q),
            rows(self.k, scales[0]),
            rows(self.v, scales[1]),
            mask,
            mem.dst(self.out),
            mem.dst(self.scratch),
            rows_scratch,
        )
    }
}

impl Kernel for Attention {
    fn accesses(&self) -> Accesses {
        let s = self.dtype.size_bytes();
        let scales = self
            .int8
            .map_or([None; 2], |i| [i.key_scales, i.value_scales]);
        let row_size = |scale: Option<View>| if scale.is_some() { 1 } else { s };
        let mut reads = vec![
            (self.q, s),
            (self.k, row_size(scales[0])),
            (self.v, row_size(scales[1])),
        ];
        reads.extend(self.mask.map(|(v, d)| (v, d.size_bytes())));
        reads.extend(self.key_length.map(|(v, d)| (v, d.size_bytes())));
        reads.extend(scales.into_iter().flatten().map(|v| (v, 4)));
        let mut writes = vec![
            (self.out, s),
            (self.scratch, accumulator(self.dtype).size_bytes()),
        ];
        writes.extend(self.int8.map(|i| (i.scratch, s)));
        Accesses { writes, reads }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let size = self.dims.seq_k;
        let keys = match self.key_length {
            None => RowPositions::One(size as i64),
            Some(length) => positions(mem, length),
        };
        // The first `keys` rows of k and v, where they are, for each row of axis 0.
        if let Some(n) = keys.iter().find(|n| !(0..=size as i64).contains(n)) {
            return Err(RunError::WindowOutOfRange {
                at: self.at,
                offset: n.min(0),
                window: n.max(0) as usize,
                size,
            });
        }
        float_type!(self.dtype, |T| self.run::<T>(mem, keys));
        Ok(())
    }
}

/// How an attention of these sizes is blocked: decided alike for its scratch and its thunk.
fn attention_tiling(n: &Sizes<'_>) -> AttentionTiling {
    let (q, k) = (n.operands[0], n.operands[1]);
    let rank = q.len();
    AttentionTiling::new(
        numel(&q[..rank - 2]),
        q[rank - 2],
        k[rank - 2],
        q[rank - 1],
        n.out[rank - 1],
        n.threads,
        kernel_shape(accumulator(n.dtype)),
    )
}

/// The rope kernel, over `[.., seq, features]`.
impl Lower for ir::Rope {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let rank = n.out_shape.len();
        vec![boxed(Rope {
            dtype: n.dtype(),
            dims: RopeDims {
                batches: numel(&n.out_shape[..rank - 2]),
                seq: n.out_shape[rank - 2],
                features: n.out_shape[rank - 1],
                dims: self.dims,
                base: self.base,
                scale: self.scale,
                traditional: self.traditional,
                freqs: self.freqs.clone(),
            },
            offset: (n.views.len() > 1).then(|| (n.views[1], n.dtypes[1])),
            x: n.views[0],
            out: n.out,
        })]
    }
}

/// The blocked attention kernel: one row of scores per worker, the mask read where it
/// broadcasts from.
impl Lower for ir::Attention {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        let tiling = attention_tiling(n);
        vec![(accumulator(n.dtype), tiling.workers * tiling.slot_len)]
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        lower_attention(self, n, [false; 2])
    }
}

/// The scratch of an attention reading int8 keys (`int8[0]`) or values (`int8[1]`): its
/// slots, then each worker's block of rows scaled back.
pub(super) fn int8_attention_scratch(n: &Sizes<'_>, int8: [bool; 2]) -> Vec<(DType, usize)> {
    let tiling = attention_tiling(n);
    let rank = n.out.len();
    let rows = attention::int8_rows_len(&tiling, n.operands[0][rank - 1], n.out[rank - 1]);
    let mut scratch = vec![(accumulator(n.dtype), tiling.workers * tiling.slot_len)];
    if int8 != [false; 2] {
        scratch.push((n.dtype, tiling.workers * rows));
    }
    scratch
}

/// The attention thunk; `int8` says which of the keys and values are int8 rows whose
/// scales follow the attention's operands (an attention fused over them).
pub(super) fn lower_attention(
    op: &ir::Attention,
    n: &LowerInput<'_>,
    int8: [bool; 2],
) -> Vec<Thunk> {
    let dtype = n.dtype();
    let mask = op.mask;
    let (q, k) = (n.shapes[0], n.shapes[1]);
    let rank = q.len();
    let heads = numel(&q[..rank - 2]);
    let (q_heads_axis, group) = if rank >= 3 {
        (q[rank - 3], q[rank - 3] / k[rank - 3])
    } else {
        (1, 1)
    };
    let mut scores_shape = q[..rank - 1].to_vec();
    scores_shape.push(k[rank - 2]);
    let mask_layout = (mask == AttentionMask::Tensor).then(|| {
        // The mask broadcasts (right-aligned) to [lead.., Sq, Sk]; each flattened head
        // gets its own offset, since a mask may vary with some leading axes only
        // (e.g. a [B, 1, 1, Sk] padding mask).
        let m = n.shapes[3];
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
        let head_offsets: Vec<usize> = (0..heads)
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
            head_offsets: head_offsets.into(),
            query_stride: stride(rank - 2),
            key_stride: stride(rank - 1),
        }
    });
    let keys = match mask {
        AttentionMask::Causal => KeyRange::Causal { window: None },
        AttentionMask::SlidingWindow(w) => KeyRange::Causal { window: Some(w) },
        AttentionMask::None | AttentionMask::Tensor => KeyRange::All,
    };
    vec![boxed(Attention {
        dtype,
        tiling: attention_tiling(&n.sizes()),
        dims: AttentionDims {
            heads,
            group,
            seq_q: q[rank - 2],
            seq_k: k[rank - 2],
            head_dim: q[rank - 1],
            value_dim: n.out_shape[rank - 1],
            scale: op.scale,
            keys,
            mask: mask_layout,
            q_heads_axis,
            layouts: std::array::from_fn(|i| {
                let shape = if i < 3 { n.shapes[i] } else { n.out_shape };
                if n.sequence_major[i] {
                    HeadLayout::sequence_major(shape)
                } else {
                    HeadLayout::contiguous(shape)
                }
            }),
        },
        q: n.views[0],
        k: n.views[1],
        v: n.views[2],
        mask: (mask == AttentionMask::Tensor).then(|| (n.views[3], n.dtypes[3])),
        key_length: op.key_length.then(|| {
            let at = 3 + usize::from(mask == AttentionMask::Tensor);
            (n.views[at], n.dtypes[at])
        }),
        out: n.out,
        at: n.site(),
        scratch: n.scratch[0],
        int8: (int8 != [false; 2]).then(|| {
            // The scales follow the attention's own operands, keys' first.
            let first = 3 + usize::from(mask == AttentionMask::Tensor) + usize::from(op.key_length);
            let mut scales = n.views[first..].iter().copied();
            Int8Rows {
                key_scales: if int8[0] { scales.next() } else { None },
                value_scales: if int8[1] { scales.next() } else { None },
                scratch: n.scratch[1],
            }
        }),
    })]
}

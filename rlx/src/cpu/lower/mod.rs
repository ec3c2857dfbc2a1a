//! Lowering: one node with concrete shapes and planned views becomes a few thunks.
//!
//! Each op's lowering is its impl of [`Lower`] in the file of its family, beside the thunk
//! types it makes: the scratch memory it asks the planner for and the thunks that compute
//! it. The impl is found from the op by `ops::lowering_of!`, so there is no list of ops
//! here: a primitive without an impl does not compile. The fusions of `cpu::fuse` are
//! lowered here, before an op's own lowering is asked.

mod custom;
mod delta_rule;
mod elementwise;
mod gathered;
mod geometry;
mod linalg;
mod movement;
mod nn;
mod random;
mod reduce;
mod sample;
mod sort;
mod spatial;

use std::sync::Arc;

use super::custom::CustomKernel;
use super::fuse::Fusion;
use super::kernels::layout::Strided;
use super::thunk::{Kernel, Thunk};
use super::view::View;
use crate::backend::NodeSite;
use crate::ir::{ConstantData, DType, Node, NodeId, Op};
use crate::ops::{Input, Param, State};
use geometry::numel;

/// How the CPU computes one op: a kernel call or a few, over views the planner places.
pub(crate) trait Lower {
    /// Scratch buffers `(dtype, elements)` the node needs while it runs (GEMM packing,
    /// attention tiles, im2col columns, sort orders, LU workspace). Most kernels need none;
    /// one that needs some and does not ask fails the op table at its first lowering.
    fn scratch(&self, _: &Sizes<'_>) -> Vec<(DType, usize)> {
        Vec::new()
    }

    /// The thunks computing the node, in order.
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk>;
}

/// The concrete sizes of one node, from which its scratch is decided.
pub(crate) struct Sizes<'a> {
    pub op: &'a Op,
    /// The output's dtype.
    pub dtype: DType,
    /// Dims of each operand.
    pub operands: &'a [&'a [usize]],
    pub out: &'a [usize],
    pub threads: usize,
}

/// What lowering needs to know about one node.
pub(crate) struct LowerInput<'a> {
    pub id: NodeId,
    pub node: &'a Node,
    /// How the CPU fuses the node (its operands are then the fusion's).
    pub fusion: Option<&'a Fusion>,
    /// Concrete dims of each operand.
    pub shapes: Vec<&'a [usize]>,
    /// Concrete dims of the output.
    pub out_shape: &'a [usize],
    /// Where each operand lies, and its dtype.
    pub views: Vec<View>,
    pub dtypes: Vec<DType>,
    pub out: View,
    /// Scratch views requested by [`Lower::scratch`], in order.
    pub scratch: Vec<View>,
    pub threads: usize,
    /// The kernel of a custom op, looked up in the backend's registry.
    pub custom: Option<Arc<dyn CustomKernel>>,
    /// For a matmul whose `b` is a weight: its packing in the static region.
    pub packed_b: Option<View>,
    /// For an attention: which of q, k, v and the output are stored `[.., S, H, D]` (the
    /// plan dropped the permute that would have made them `[.., H, S, D]`).
    pub sequence_major: [bool; 4],
    /// For a [`Fusion::Products`] node: where each member's output lies, in order (the
    /// last is `out`).
    pub joined_outs: Vec<View>,
}

impl LowerInput<'_> {
    /// The output's dtype.
    pub(crate) fn dtype(&self) -> DType {
        self.node.ty.dtype
    }

    /// The sizes its scratch was decided from: what a lowering reads to make the same
    /// choices (GEMM blocking, conv geometry, attention tiling) again.
    pub(crate) fn sizes(&self) -> Sizes<'_> {
        Sizes {
            op: &self.node.op,
            dtype: self.dtype(),
            operands: &self.shapes,
            out: self.out_shape,
            threads: self.threads,
        }
    }

    /// The node, for errors a kernel reports at run time.
    pub(crate) fn site(&self) -> NodeSite {
        NodeSite::of(self.id, self.node)
    }
}

/// The CPU's lowering of `op`: every primitive's, and the composites' that have a kernel
/// here (the others are decomposed at compile time).
fn lowering(op: &Op) -> Option<&dyn Lower> {
    crate::ops::lowering_of!(op, Lower).or(match op {
        Op::Softmax(op) => Some(op),
        Op::LayerNorm(op) => Some(op),
        Op::RmsNorm(op) => Some(op),
        Op::Rope(op) => Some(op),
        Op::SampleToken(op) => Some(op),
        _ => None,
    })
}

/// Whether the CPU lowers `op` by a kernel of its own: every primitive, and the composites
/// [`lowering`] names.
pub(crate) fn has_kernel(op: &Op) -> bool {
    lowering(op).is_some()
}

/// Scratch buffers `(dtype, elements)` the node needs while it runs.
pub(crate) fn scratch_requests(
    node: &Node,
    fusion: Option<&Fusion>,
    operands: &[&[usize]],
    out: &[usize],
    threads: usize,
) -> Vec<(DType, usize)> {
    if numel(out) == 0 {
        return Vec::new();
    }
    let sizes = Sizes {
        op: &node.op,
        dtype: node.ty.dtype,
        operands,
        out,
        threads,
    };
    match fusion {
        None => lowering(&node.op)
            .expect("compile decomposes what the CPU has no kernel for")
            .scratch(&sizes),
        Some(Fusion::MatMul {
            transpose_a,
            transpose_b,
            ..
        }) => linalg::gemm_scratch(&sizes, *transpose_a, *transpose_b),
        Some(
            Fusion::Absorbed
            | Fusion::Elementwise { .. }
            | Fusion::Products { .. }
            | Fusion::ProductOf(_),
        ) => Vec::new(),
        Some(Fusion::Attention { int8, .. }) => nn::int8_attention_scratch(&sizes, *int8),
    }
}

/// The thunks computing `n.node`. Empty outputs need none (unless the node computes other
/// nodes' outputs too); reshapes are views.
pub(crate) fn lower(n: LowerInput<'_>) -> Vec<Thunk> {
    if n.out.len == 0 && n.joined_outs.iter().all(|v| v.len == 0) {
        return Vec::new();
    }
    match n.fusion {
        None => lowering(&n.node.op)
            .expect("compile decomposes what the CPU has no kernel for")
            .lower(&n),
        Some(Fusion::Absorbed | Fusion::ProductOf(_)) => Vec::new(),
        Some(Fusion::Products { .. }) => linalg::joined_block_matmul(&n),
        Some(Fusion::MatMul {
            transpose_a,
            transpose_b,
            epilogue,
            ..
        }) => linalg::gemm(&n, *transpose_a, *transpose_b, Some(epilogue)),
        Some(Fusion::Elementwise { steps, .. }) => elementwise::fused(&n, steps),
        Some(Fusion::Attention { int8, .. }) => match &n.node.op {
            crate::ir::Op::Attention(op) => nn::lower_attention(op, &n, *int8),
            _ => unreachable!("only attentions fuse so"),
        },
    }
}

/// Leaves are bound, not computed.
impl Lower for Input {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

impl Lower for Param {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

impl Lower for State {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

/// Constants sit in the static region, written once per binding.
impl Lower for ConstantData {
    fn lower(&self, _: &LowerInput<'_>) -> Vec<Thunk> {
        Vec::new()
    }
}

/// A planned kernel call.
fn boxed(kernel: impl Kernel + 'static) -> Thunk {
    Box::new(kernel)
}

/// A copy of all of `src` into `dst` (of as many elements).
pub(crate) fn whole_copy(dtype: DType, src: View, dst: View) -> Thunk {
    let layout = Strided {
        dims: vec![src.len],
        strides: [vec![1], vec![1]],
    };
    copy(dtype, layout, 0, 0, src, dst)
}

/// A strided copy of `src` (from element `src_at`) into `dst` (from element `dst_at`).
fn copy(
    dtype: DType,
    layout: Strided<2>,
    dst_at: usize,
    src_at: usize,
    src: View,
    dst: View,
) -> Thunk {
    boxed(movement::StridedCopy {
        dtype,
        layout: layout.coalesced(),
        dst_at,
        src_at,
        src,
        dst,
    })
}

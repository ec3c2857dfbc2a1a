//! Ops that move values: reshape, permute, slice, concat, broadcast, pad, gather,
//! scatter-add, windows at run-time offsets (dynamic slice, slice update), the gradient cut `stop_gradient`, and the identities of recomputation (`checkpoint`, `after`). One file per op (gather and
//! scatter-add share theirs), each holding the op's whole meaning.

/// The `Primitive` methods of an op whose only attribute is an axis.
macro_rules! axis_attrs {
    () => {
        fn attrs(&self, out: &mut Vec<String>) {
            out.push(format!("axis={}", self.axis));
        }
    };
}

mod broadcast;
mod concat;
mod dynamic_slice;
mod gather;
mod pad;
mod permute;
mod recompute;
mod reshape;
mod slice;
mod stop_gradient;

pub use broadcast::Broadcast;
pub use concat::Concat;
pub(crate) use dynamic_slice::offsets_per_row;
pub use dynamic_slice::{DynamicSlice, SliceUpdate};
pub use gather::{Gather, ScatterAdd};
pub use pad::Pad;
pub use permute::Permute;
pub(crate) use recompute::{After, Checkpoint};
pub use reshape::Reshape;
pub use slice::Slice;
pub(crate) use stop_gradient::StopGradient;

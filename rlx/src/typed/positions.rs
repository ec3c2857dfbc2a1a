//! Positions read at run time (a window's offset, a rotation's first position, how many
//! keys an attention reads), given once for every row of a tensor or once per row of its
//! axis 0: a batch of sequences, each at a position of its own.

use super::dim::{Const, Dim};
use super::movement::Index;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::ir::NodeId;

/// Shapes with at least one axis; `First` is the dim of axis 0.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no axis 0",
    label = "positions per row need a tensor with a first axis"
)]
pub trait FirstDim: Shape {
    /// The dim of axis 0.
    type First: Dim;
}

macro_rules! first_dim {
    ($first:ident $(, $rest:ident)*) => {
        #[diagnostic::do_not_recommend]
        impl<$first: Dim $(, $rest: Dim)*> FirstDim for ($first, $($rest,)*) {
            type First = $first;
        }
    };
}

first_dim!(A);
first_dim!(A, B);
first_dim!(A, B, C);
first_dim!(A, B, C, D);
first_dim!(A, B, C, D, F);

/// A run-time position for the rows of a tensor whose axis 0 is `L`: a scalar
/// `Tensor<(), X>` serves every row; a vector `Tensor<(L,), X>` gives each row of axis 0 its
/// own (`X` is `i32` or `i64`).
///
/// ```
/// use rlx::typed::{Axis, Const, Rope, Tensor, build};
/// let graph = build(|g| {
///     // Two sequences, each writing one new row of its cache at its own position.
///     let cache: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("cache");
///     let rows: Tensor<(Const<2>, Const<1>, Const<8>)> = g.input("rows");
///     let pos: Tensor<(Const<2>,), i64> = g.input("pos");
///     g.output("cache", cache.slice_update(Axis::<1>, rows, pos));
///     // The same position for both.
///     let shared: Tensor<(), i64> = g.input("shared");
///     g.output("again", cache.slice_update(Axis::<1>, rows, shared));
/// })?;
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a position for rows of `{L}`",
    label = "expected a scalar `Tensor<(), i32 or i64>` or a vector `Tensor<({L},), i32 or i64>`"
)]
pub trait Positions<'g, L: Dim>: sealed::Sealed {
    /// The operand as a rotation or an attention takes it: the scalar, or the vector.
    #[doc(hidden)]
    fn position_id(self) -> Option<NodeId>;
    /// The operand as a window along one axis takes it: the scalar, or `[L, 1]`.
    #[doc(hidden)]
    fn window_offsets_id(self) -> Option<NodeId>;
}

/// Only the two forms above are positions: what the methods build depends on it.
mod sealed {
    pub trait Sealed {}
}

impl<X: Index> sealed::Sealed for Tensor<'_, (), X> {}
impl<L: Dim, X: Index> sealed::Sealed for Tensor<'_, (L,), X> {}

impl<'g, L: Dim, X: Index> Positions<'g, L> for Tensor<'g, (), X> {
    fn position_id(self) -> Option<NodeId> {
        self.id()
    }

    fn window_offsets_id(self) -> Option<NodeId> {
        self.id()
    }
}

impl<'g, L: Dim, X: Index> Positions<'g, L> for Tensor<'g, (L,), X> {
    fn position_id(self) -> Option<NodeId> {
        self.id()
    }

    #[track_caller]
    fn window_offsets_id(self) -> Option<NodeId> {
        self.reshape::<(L, Const<1>)>().id()
    }
}

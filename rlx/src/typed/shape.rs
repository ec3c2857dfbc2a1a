//! Shapes at the type level: tuples of dims, and the axis arithmetic of typed ops.

use super::dim::{Dim, DimKind};

/// A tuple of [`Dim`]s: `()`, `(N,)`, `(Batch, Const<384>)`, up to rank 6.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a shape",
    label = "expected a tuple of dims",
    note = "shapes are tuples of dims such as `(Batch, Const<384>)`, up to rank 6"
)]
pub trait Shape: Copy + Default + Send + Sync + 'static {
    /// Number of dims.
    const RANK: usize;
    /// The dims, outermost first.
    const DIMS: &'static [DimKind];
}

macro_rules! one {
    ($d:ident) => {
        1
    };
}

macro_rules! tuple_shape {
    ($($d:ident),*) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> Shape for ($($d,)*) {
            const RANK: usize = 0 $(+ one!($d))*;
            const DIMS: &'static [DimKind] = &[$($d::KIND),*];
        }
    };
}

tuple_shape!();
tuple_shape!(A);
tuple_shape!(A, B);
tuple_shape!(A, B, C);
tuple_shape!(A, B, C, D);
tuple_shape!(A, B, C, D, E);
tuple_shape!(A, B, C, D, E, F);

/// Names axis `I` as a value, for ops whose other type parameters are all inferred:
/// `x.concat(Axis::<1>, y)`, `x.take(Axis::<0>, ids)`.
///
/// ```
/// use rlx::typed::{Axis, Const, Tensor, build};
/// let graph = build(|g| {
///     let x: Tensor<(Const<2>, Const<3>)> = g.input("x");
///     let twice: Tensor<(Const<2>, Const<6>)> = x.concat(Axis::<1>, x);
///     g.output("twice", twice);
/// })?;
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Axis<const I: usize>;

/// The shape with axis `I` removed (what a reduction over axis `I` produces).
#[diagnostic::on_unimplemented(
    message = "axis {I} does not exist in a tensor of shape `{Self}`",
    label = "no axis {I} here",
    note = "axes count from 0"
)]
pub trait RemoveAxis<const I: usize>: Shape {
    /// The remaining dims.
    type Out: Shape;
}

/// The shape with axis `I` kept as size 1.
#[diagnostic::on_unimplemented(
    message = "axis {I} does not exist in a tensor of shape `{Self}`",
    label = "no axis {I} here"
)]
pub trait HasAxis<const I: usize>: Shape {
    /// The dims with axis `I` set to 1.
    type Kept: Shape;
}

macro_rules! axis {
    ($i:literal; ($($d:ident),*) -> ($($o:ty),*); ($($k:ty),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> RemoveAxis<$i> for ($($d,)*) {
            type Out = ($($o,)*);
        }
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> HasAxis<$i> for ($($d,)*) {
            type Kept = ($($k,)*);
        }
    };
}

use super::dim::Const;
type One = Const<1>;

axis!(0; (A) -> (); (One));
axis!(0; (A, B) -> (B); (One, B));
axis!(1; (A, B) -> (A); (A, One));
axis!(0; (A, B, C) -> (B, C); (One, B, C));
axis!(1; (A, B, C) -> (A, C); (A, One, C));
axis!(2; (A, B, C) -> (A, B); (A, B, One));
axis!(0; (A, B, C, D) -> (B, C, D); (One, B, C, D));
axis!(1; (A, B, C, D) -> (A, C, D); (A, One, C, D));
axis!(2; (A, B, C, D) -> (A, B, D); (A, B, One, D));
axis!(3; (A, B, C, D) -> (A, B, C); (A, B, C, One));

/// Shapes whose trailing dims are `Rhs`: `(B, N) + (N,)` adds a bias along the last axis.
#[diagnostic::on_unimplemented(
    message = "cannot broadcast `{Rhs}` onto `{Self}`",
    label = "`{Rhs}` is not a suffix of `{Self}`",
    note = "typed broadcasting matches trailing dims only, e.g. `(Batch, N) + (N,)`; use `broadcast_to` for anything else"
)]
pub trait SuffixOf<Rhs: Shape>: Shape {}

macro_rules! suffix {
    (($($d:ident),*) : ($($s:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> SuffixOf<($($s,)*)> for ($($d,)*) {}
    };
}

suffix!((A) : ());
suffix!((A, B) : ());
suffix!((A, B) : (B));
suffix!((A, B, C) : ());
suffix!((A, B, C) : (C));
suffix!((A, B, C) : (B, C));
suffix!((A, B, C, D) : ());
suffix!((A, B, C, D) : (D));
suffix!((A, B, C, D) : (C, D));
suffix!((A, B, C, D) : (B, C, D));

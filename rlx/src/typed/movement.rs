//! Ops that move, select or join data: reshape, broadcast, permute, slice, pad, concat,
//! gather and scatter, and windows at run-time offsets.
//!
//! Axes are checked by rustc. A result dim the types cannot compute (a concat's joined
//! axis, a strided slice's length) comes from the result's type, written or inferred as for
//! any Rust value, and is checked against the op when the graph is built; [`Dyn`] accepts
//! whatever the op gives.
//!
//! [`Dyn`]: super::Dyn

use super::dim::{Dim, DimKind, describe};
use super::element::{Element, Numeric};
use super::positions::{FirstDim, Positions};
use super::shape::{Axis, Shape};
use super::tensor::Tensor;
use crate::ir::{
    Broadcast, Concat, DynamicSlice, Gather, Pad, Permute, Reshape, ScatterAdd, Slice, SliceUpdate,
};
use crate::ir::{Dim as IrDim, NodeId, Op, Scalar};

impl<'g, S: Shape, E: Element> Tensor<'g, S, E> {
    /// The same elements in shape `S2`. The element counts must match; that is checked when
    /// the graph is built (it needs arithmetic on dims), and reported with this call's line.
    /// One [`Dyn`](super::Dyn) dim in `S2` takes the size that makes the counts match.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<6>)> = g.input("x");
    ///     g.output("y", x.reshape::<(Batch, Const<2>, Const<3>)>());
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn reshape<S2: Shape>(self) -> Tensor<'g, S2, E> {
        let scope = self.scope();
        let unknown = S2::DIMS
            .iter()
            .filter(|k| **k == DimKind::Anonymous)
            .count();
        let mut dims = Vec::with_capacity(S2::RANK);
        for &kind in S2::DIMS {
            match kind {
                DimKind::Anonymous => dims.push(None),
                _ => match scope.dim(kind) {
                    Some(dim) => dims.push(Some(dim)),
                    None => return Tensor::from_id(scope, None),
                },
            }
        }
        if unknown == 0 {
            let shape: Vec<IrDim> = dims.into_iter().flatten().collect();
            return self.then(
                Op::Reshape(Reshape {
                    shape: shape.into(),
                }),
                &[],
            );
        }
        if unknown > 1 {
            let reason = format!("a reshape can infer one `Dyn` dim, not {unknown}");
            return Tensor::from_id(scope, scope.reject("reshape", self.id(), reason));
        }
        let Some(from) = self.id().and_then(|id| scope.ty(id)) else {
            return Tensor::from_id(scope, None);
        };
        let numel = from.shape.numel();
        let Some(inferred) = numel.div_exact(&IrDim::product(dims.iter().flatten())) else {
            let reason = format!(
                "no `Dyn` size reshapes {} ({numel} elements) to {}",
                from.shape,
                describe(S2::DIMS)
            );
            return Tensor::from_id(scope, scope.reject("reshape", self.id(), reason));
        };
        let shape: Vec<IrDim> = dims
            .into_iter()
            .map(|d| d.unwrap_or_else(|| inferred.clone()))
            .collect();
        self.then(
            Op::Reshape(Reshape {
                shape: shape.into(),
            }),
            &[],
        )
    }

    /// The same values repeated to shape `S2` (numpy rules: dims of size 1 stretch, leading
    /// dims are added). Checked when the graph is built.
    #[track_caller]
    pub fn broadcast<S2: Shape>(self) -> Tensor<'g, S2, E> {
        match self.scope().shape(S2::DIMS) {
            Some(shape) => self.then(Op::Broadcast(Broadcast { shape }), &[]),
            None => Tensor::from_id(self.scope(), None),
        }
    }

    /// Axes `A` and `B` swapped (both checked at compile time).
    #[track_caller]
    pub fn swap_axes<const A: usize, const B: usize>(
        self,
    ) -> Tensor<'g, <S as SwapAxes<A, B>>::Out, E>
    where
        S: SwapAxes<A, B>,
    {
        let mut perm: Vec<usize> = (0..S::RANK).collect();
        perm.swap(A, B);
        self.then(Op::Permute(Permute { perm }), &[])
    }

    /// `L` entries of axis `I` starting at `start` (`L` a static dim). Bounds are checked when
    /// the graph is built, or against a runtime axis when the graph runs.
    #[track_caller]
    pub fn narrow<const I: usize, L: Dim>(
        self,
        start: usize,
    ) -> Tensor<'g, <S as Replace<I, L>>::Out, E>
    where
        S: Replace<I, L>,
    {
        let Some(len) = self
            .scope()
            .static_size("narrow", self.id(), L::KIND, "length")
        else {
            return Tensor::from_id(self.scope(), None);
        };
        self.then(
            Op::Slice(Slice {
                axis: I,
                start: start as i64,
                stop: Some((start + len) as i64),
                step: 1,
            }),
            &[],
        )
    }

    /// `x[start:stop:step]` along axis `I`, numpy style: a negative `start` or `stop` counts
    /// from the end, `None` is the end. Out-of-range bounds are errors, never clamped. The
    /// result's dim on axis `I` comes from its type.
    ///
    /// ```
    /// use rlx::typed::{Axis, Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let x: Tensor<(Const<2>, Const<8>)> = g.input("x");
    ///     let odd: Tensor<(Const<2>, Const<4>)> = x.slice(Axis::<1>, 1, None, 2);
    ///     g.output("odd", odd);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn slice<const I: usize, L: Dim>(
        self,
        _axis: Axis<I>,
        start: i64,
        stop: Option<i64>,
        step: usize,
    ) -> Tensor<'g, <S as Replace<I, L>>::Out, E>
    where
        S: Replace<I, L>,
    {
        let op = Op::Slice(Slice {
            axis: I,
            start,
            stop,
            step,
        });
        self.declared("slice", op, &[])
    }

    /// Pads axis `I` with `before` and `after` copies of `value`; the result's dim on axis
    /// `I` comes from its type.
    ///
    /// ```
    /// use rlx::typed::{Axis, Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let x: Tensor<(Const<2>, Const<3>)> = g.input("x");
    ///     let p: Tensor<(Const<2>, Const<6>)> = x.pad(Axis::<1>, 1, 2, 0.0);
    ///     g.output("p", p);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn pad<const I: usize, L: Dim>(
        self,
        _axis: Axis<I>,
        before: usize,
        after: usize,
        value: E,
    ) -> Tensor<'g, <S as Replace<I, L>>::Out, E>
    where
        S: Replace<I, L>,
        E: Into<Scalar>,
    {
        let mut pads = vec![(0, 0); S::RANK];
        pads[I] = (before, after);
        let op = Op::Pad(Pad {
            pads,
            value: value.into(),
        });
        self.declared("pad", op, &[])
    }

    /// `self` and `other` joined along axis `I`. Every other dim must be the same (checked by
    /// rustc); the joined dim comes from the result's type.
    ///
    /// ```
    /// use rlx::typed::{Axis, Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let a: Tensor<(Batch, Const<3>)> = g.input("a");
    ///     let b: Tensor<(Batch, Const<5>)> = g.input("b");
    ///     let ab: Tensor<(Batch, Const<8>)> = a.concat(Axis::<1>, b);
    ///     g.output("ab", ab);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn concat<const I: usize, R: Shape, L: Dim>(
        self,
        _axis: Axis<I>,
        other: Tensor<'g, R, E>,
    ) -> Tensor<'g, <S as Joins<I, R>>::Out<L>, E>
    where
        S: Joins<I, R>,
    {
        self.declared("concat", Op::Concat(Concat { axis: I }), &[other.id()])
    }

    /// The entries of axis `I` at `indices` (`numpy.take`); repeated indices repeat entries.
    /// Indices are checked against the axis when the graph runs.
    ///
    /// ```
    /// use rlx::typed::{Axis, Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let x: Tensor<(Const<4>, Const<10>)> = g.input("x");
    ///     let cols: Tensor<(Const<3>,), i64> = g.input("cols");
    ///     g.output("picked", x.take(Axis::<1>, cols)); // (4, 3)
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn take<const I: usize, N: Dim, X: Index>(
        self,
        _axis: Axis<I>,
        indices: Tensor<'g, (N,), X>,
    ) -> Tensor<'g, <S as Replace<I, N>>::Out, E>
    where
        S: Replace<I, N>,
    {
        self.then(Op::Gather(Gather { axis: I }), &[indices.id()])
    }
}

impl<'g, S: Shape, E: Element> Tensor<'g, S, E> {
    /// The `W` entries of axis `I` from the run-time `offset` on (the other axes whole):
    /// a window of a cache at a position that is data, not a shape. `W` comes from the
    /// result's type. `offset` is a scalar, or a vector with one offset per row of axis 0
    /// (each row's window at its own offset; see [`Positions`]). An offset that puts the window outside the axis fails the run with
    /// [`RunError::WindowOutOfRange`](crate::backend::RunError::WindowOutOfRange).
    ///
    /// ```
    /// use rlx::typed::{Axis, Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let cache: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("cache");
    ///     let pos: Tensor<(), i64> = g.input("pos");
    ///     let rows: Tensor<(Const<2>, Const<4>, Const<8>)> = cache.dynamic_slice(Axis::<1>, pos);
    ///     g.output("rows", rows);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn dynamic_slice<const I: usize, W: Dim, P: Positions<'g, S::First>>(
        self,
        _axis: Axis<I>,
        offset: P,
    ) -> Tensor<'g, <S as Replace<I, W>>::Out, E>
    where
        S: Replace<I, W> + FirstDim,
    {
        let Some(size) = self.scope().dim(W::KIND) else {
            return Tensor::from_id(self.scope(), None);
        };
        let op = Op::DynamicSlice(DynamicSlice {
            axes: vec![I],
            sizes: vec![size],
        });
        self.then(op, &[offset.window_offsets_id()])
    }

    /// `self` with `update` written over axis `I` from the run-time `offset` on: one new
    /// row appended to a cache at its current length. `offset` is a scalar, or a vector
    /// with one offset per row of axis 0 (see [`Positions`]). Along the other axes `update` has
    /// `self`'s dims (checked by rustc); along `I` it must fit, checked when the graph is
    /// built and, for the offset, when it runs.
    ///
    /// ```
    /// use rlx::typed::{Axis, Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let cache: Tensor<(Const<2>, Const<16>, Const<8>)> = g.input("cache");
    ///     let row: Tensor<(Const<2>, Const<1>, Const<8>)> = g.input("row");
    ///     let pos: Tensor<(), i32> = g.input("pos");
    ///     g.output("cache", cache.slice_update(Axis::<1>, row, pos));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn slice_update<const I: usize, N: Dim, P: Positions<'g, S::First>>(
        self,
        _axis: Axis<I>,
        update: Tensor<'g, <S as Replace<I, N>>::Out, E>,
        offset: P,
    ) -> Self
    where
        S: Replace<I, N> + FirstDim,
    {
        let op = Op::SliceUpdate(SliceUpdate { axes: vec![I] });
        self.then(op, &[update.id(), offset.window_offsets_id()])
    }
}

impl<'g, S: Shape, E: Numeric> Tensor<'g, S, E> {
    /// The adjoint of [`take`](Self::take): a copy of `self` with each slice of `updates`
    /// added at its index along axis `I`; repeated indices accumulate.
    ///
    /// ```
    /// use rlx::typed::{Axis, Const, Tensor, build};
    /// let graph = build(|g| {
    ///     let totals: Tensor<(Const<5>, Const<2>)> = g.input("totals");
    ///     let rows: Tensor<(Const<3>,), i32> = g.input("rows");
    ///     let values: Tensor<(Const<3>, Const<2>)> = g.input("values");
    ///     g.output("sums", totals.scatter_add(Axis::<0>, rows, values));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn scatter_add<const I: usize, N: Dim, X: Index>(
        self,
        _axis: Axis<I>,
        indices: Tensor<'g, (N,), X>,
        updates: Tensor<'g, <S as Replace<I, N>>::Out, E>,
    ) -> Self
    where
        S: Replace<I, N>,
    {
        self.then(
            Op::ScatterAdd(ScatterAdd { axis: I }),
            &[indices.id(), updates.id()],
        )
    }
}

impl<'g, V: Dim, D: Dim, E: Element> Tensor<'g, (V, D), E> {
    /// Embedding lookup: the rows of this `(V, D)` table at `ids`.
    #[track_caller]
    pub fn embed<S: Shape + AppendDim<D>, I: Index>(
        self,
        ids: Tensor<'g, S, I>,
    ) -> Tensor<'g, <S as AppendDim<D>>::Out, E> {
        self.then(Op::Gather(Gather { axis: 0 }), &[ids.id()])
    }
}

impl<'g, S: Shape> Tensor<'g, S, u8> {
    /// The float32 values of rows of GGUF blocks in `format` (`Q8_0`, `Q4_*`, `Q5_*`):
    /// `self`'s last dim is bytes, whole blocks of them; the result's last dim, named by
    /// `T`, is their values (checked when the graph is built).
    ///
    /// ```
    /// use rlx::gguf::GgmlType;
    /// use rlx::params::ParamPath;
    /// use rlx::typed::{Const, build};
    /// let graph = build(|g| {
    ///     let at = ParamPath::root().field("table");
    ///     let rows = g.block_param_at::<Const<4>>(&at, 64, GgmlType::Q4_0); // (4, 2 * 18 bytes)
    ///     g.output("values", rows.block_dequantize::<(Const<4>, Const<64>)>(GgmlType::Q4_0));
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn block_dequantize<T: Shape>(self, format: crate::gguf::GgmlType) -> Tensor<'g, T, f32> {
        let op = Op::BlockDequantize(crate::ir::BlockDequantize { format });
        let made: Tensor<'g, T, f32> = self.then(op, &[]);
        let id = self
            .scope()
            .declared("block_dequantize", self.id(), made.id(), T::DIMS);
        Tensor::from_id(self.scope(), id)
    }
}

impl<'g, S: Shape, E: Element> Tensor<'g, S, E> {
    /// `op` applied to `self` and `others`, whose result dims the types cannot compute:
    /// checked against the result type `S2` when the graph is built.
    #[track_caller]
    pub(super) fn declared<S2: Shape>(
        self,
        name: &str,
        op: Op,
        others: &[Option<NodeId>],
    ) -> Tensor<'g, S2, E> {
        let made: Tensor<'g, S2, E> = self.then(op, others);
        let id = self.scope().declared(name, self.id(), made.id(), S2::DIMS);
        Tensor::from_id(self.scope(), id)
    }
}

/// Permutations of a rank-2 shape.
#[diagnostic::on_unimplemented(
    message = "`permute::<{P0}, {P1}>` is not a permutation of the axes of `{Self}`",
    label = "each axis 0..2 must appear exactly once"
)]
pub trait Permute2<const P0: usize, const P1: usize>: Shape {
    /// The reordered dims.
    type Out: Shape;
}

/// Permutations of a rank-3 shape.
#[diagnostic::on_unimplemented(
    message = "`permute::<{P0}, {P1}, {P2}>` is not a permutation of the axes of `{Self}`",
    label = "each axis 0..3 must appear exactly once"
)]
pub trait Permute3<const P0: usize, const P1: usize, const P2: usize>: Shape {
    /// The reordered dims.
    type Out: Shape;
}

/// Permutations of a rank-4 shape.
#[diagnostic::on_unimplemented(
    message = "`permute::<{P0}, {P1}, {P2}, {P3}>` is not a permutation of the axes of `{Self}`",
    label = "each axis 0..4 must appear exactly once"
)]
pub trait Permute4<const P0: usize, const P1: usize, const P2: usize, const P3: usize>:
    Shape
{
    /// The reordered dims.
    type Out: Shape;
}

impl<'g, A: Dim, B: Dim, E: Element> Tensor<'g, (A, B), E> {
    /// The axes reordered: output axis `i` is input axis `P_i`. That the `P_i` are a
    /// permutation is checked by rustc.
    #[track_caller]
    pub fn permute<const P0: usize, const P1: usize>(
        self,
    ) -> Tensor<'g, <(A, B) as Permute2<P0, P1>>::Out, E>
    where
        (A, B): Permute2<P0, P1>,
    {
        self.then(Op::Permute(Permute { perm: vec![P0, P1] }), &[])
    }
}

impl<'g, A: Dim, B: Dim, C: Dim, E: Element> Tensor<'g, (A, B, C), E> {
    /// The axes reordered: output axis `i` is input axis `P_i`. That the `P_i` are a
    /// permutation is checked by rustc.
    #[track_caller]
    pub fn permute<const P0: usize, const P1: usize, const P2: usize>(
        self,
    ) -> Tensor<'g, <(A, B, C) as Permute3<P0, P1, P2>>::Out, E>
    where
        (A, B, C): Permute3<P0, P1, P2>,
    {
        self.then(
            Op::Permute(Permute {
                perm: vec![P0, P1, P2],
            }),
            &[],
        )
    }
}

impl<'g, A: Dim, B: Dim, C: Dim, D: Dim, E: Element> Tensor<'g, (A, B, C, D), E> {
    /// The axes reordered: output axis `i` is input axis `P_i`. That the `P_i` are a
    /// permutation is checked by rustc.
    ///
    /// ```
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch, Seq);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Seq, Const<4>, Const<8>)> = g.input("x");
    ///     let heads: Tensor<(Batch, Const<4>, Seq, Const<8>)> = x.permute::<0, 2, 1, 3>();
    ///     g.output("heads", heads);
    /// })?;
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn permute<const P0: usize, const P1: usize, const P2: usize, const P3: usize>(
        self,
    ) -> Tensor<'g, <(A, B, C, D) as Permute4<P0, P1, P2, P3>>::Out, E>
    where
        (A, B, C, D): Permute4<P0, P1, P2, P3>,
    {
        self.then(
            Op::Permute(Permute {
                perm: vec![P0, P1, P2, P3],
            }),
            &[],
        )
    }
}

macro_rules! permute {
    ($tr:ident<$($p:literal),*>; ($($d:ident),*) -> ($($o:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> $tr<$($p),*> for ($($d,)*) {
            type Out = ($($o,)*);
        }
    };
}

permute!(Permute2<0, 1>; (A, B) -> (A, B));
permute!(Permute2<1, 0>; (A, B) -> (B, A));
permute!(Permute3<0, 1, 2>; (A, B, C) -> (A, B, C));
permute!(Permute3<0, 2, 1>; (A, B, C) -> (A, C, B));
permute!(Permute3<1, 0, 2>; (A, B, C) -> (B, A, C));
permute!(Permute3<1, 2, 0>; (A, B, C) -> (B, C, A));
permute!(Permute3<2, 0, 1>; (A, B, C) -> (C, A, B));
permute!(Permute3<2, 1, 0>; (A, B, C) -> (C, B, A));
permute!(Permute4<0, 1, 2, 3>; (A, B, C, D) -> (A, B, C, D));
permute!(Permute4<0, 1, 3, 2>; (A, B, C, D) -> (A, B, D, C));
permute!(Permute4<0, 2, 1, 3>; (A, B, C, D) -> (A, C, B, D));
permute!(Permute4<0, 2, 3, 1>; (A, B, C, D) -> (A, C, D, B));
permute!(Permute4<0, 3, 1, 2>; (A, B, C, D) -> (A, D, B, C));
permute!(Permute4<0, 3, 2, 1>; (A, B, C, D) -> (A, D, C, B));
permute!(Permute4<1, 0, 2, 3>; (A, B, C, D) -> (B, A, C, D));
permute!(Permute4<1, 0, 3, 2>; (A, B, C, D) -> (B, A, D, C));
permute!(Permute4<1, 2, 0, 3>; (A, B, C, D) -> (B, C, A, D));
permute!(Permute4<1, 2, 3, 0>; (A, B, C, D) -> (B, C, D, A));
permute!(Permute4<1, 3, 0, 2>; (A, B, C, D) -> (B, D, A, C));
permute!(Permute4<1, 3, 2, 0>; (A, B, C, D) -> (B, D, C, A));
permute!(Permute4<2, 0, 1, 3>; (A, B, C, D) -> (C, A, B, D));
permute!(Permute4<2, 0, 3, 1>; (A, B, C, D) -> (C, A, D, B));
permute!(Permute4<2, 1, 0, 3>; (A, B, C, D) -> (C, B, A, D));
permute!(Permute4<2, 1, 3, 0>; (A, B, C, D) -> (C, B, D, A));
permute!(Permute4<2, 3, 0, 1>; (A, B, C, D) -> (C, D, A, B));
permute!(Permute4<2, 3, 1, 0>; (A, B, C, D) -> (C, D, B, A));
permute!(Permute4<3, 0, 1, 2>; (A, B, C, D) -> (D, A, B, C));
permute!(Permute4<3, 0, 2, 1>; (A, B, C, D) -> (D, A, C, B));
permute!(Permute4<3, 1, 0, 2>; (A, B, C, D) -> (D, B, A, C));
permute!(Permute4<3, 1, 2, 0>; (A, B, C, D) -> (D, B, C, A));
permute!(Permute4<3, 2, 0, 1>; (A, B, C, D) -> (D, C, A, B));
permute!(Permute4<3, 2, 1, 0>; (A, B, C, D) -> (D, C, B, A));

/// Index element types: `i32` and `i64`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot index a tensor",
    label = "indices must be i32 or i64"
)]
pub trait Index: Element {}
#[diagnostic::do_not_recommend]
impl Index for i32 {}
#[diagnostic::do_not_recommend]
impl Index for i64 {}

/// The shape with one more trailing dim `D`.
pub trait AppendDim<D: Dim>: Shape {
    /// `(..., D)`.
    type Out: Shape;
}

macro_rules! append {
    ($($d:ident),*) => {
        impl<$($d: Dim,)* Z: Dim> AppendDim<Z> for ($($d,)*) {
            type Out = ($($d,)* Z,);
        }
    };
}
append!();
append!(A);
append!(A, B);
append!(A, B, C);

/// The shape with axes `A` and `B` swapped.
#[diagnostic::on_unimplemented(
    message = "cannot swap axes {A} and {B} of `{Self}`",
    label = "an axis is out of range",
    note = "axes count from 0"
)]
pub trait SwapAxes<const A: usize, const B: usize>: Shape {
    /// The permuted dims.
    type Out: Shape;
}

macro_rules! swap {
    ($a:literal, $b:literal; ($($d:ident),*) -> ($($o:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim),*> SwapAxes<$a, $b> for ($($d,)*) {
            type Out = ($($o,)*);
        }
    };
}
swap!(0, 1; (A, B) -> (B, A));
swap!(1, 0; (A, B) -> (B, A));
swap!(0, 1; (A, B, C) -> (B, A, C));
swap!(1, 2; (A, B, C) -> (A, C, B));
swap!(0, 2; (A, B, C) -> (C, B, A));
swap!(1, 2; (A, B, C, D) -> (A, C, B, D));
swap!(2, 3; (A, B, C, D) -> (A, B, D, C));
swap!(1, 3; (A, B, C, D) -> (A, D, C, B));

/// The shape with axis `I` replaced by `L`.
#[diagnostic::on_unimplemented(
    message = "axis {I} does not exist in a tensor of shape `{Self}`",
    label = "no axis {I} here"
)]
pub trait Replace<const I: usize, L: Dim>: Shape {
    /// The new dims.
    type Out: Shape;
}

macro_rules! replace {
    ($i:literal; ($($d:ident),*) -> ($($o:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim,)* L: Dim> Replace<$i, L> for ($($d,)*) {
            type Out = ($($o,)*);
        }
    };
}
replace!(0; (A) -> (L));
replace!(0; (A, B) -> (L, B));
replace!(1; (A, B) -> (A, L));
replace!(0; (A, B, C) -> (L, B, C));
replace!(1; (A, B, C) -> (A, L, C));
replace!(2; (A, B, C) -> (A, B, L));
replace!(0; (A, B, C, D) -> (L, B, C, D));
replace!(1; (A, B, C, D) -> (A, L, C, D));
replace!(2; (A, B, C, D) -> (A, B, L, D));
replace!(3; (A, B, C, D) -> (A, B, C, L));

/// Shapes that join `R` along axis `I`: equal except on that axis.
#[diagnostic::on_unimplemented(
    message = "cannot concatenate `{Self}` and `{R}` along axis {I}",
    label = "every dim except axis {I} must be the same, and the ranks equal",
    note = "axes count from 0"
)]
pub trait Joins<const I: usize, R: Shape>: Shape {
    /// The joined shape, with `L` on axis `I`.
    type Out<L: Dim>: Shape;
}

macro_rules! joins {
    ($i:literal; ($($d:ident),*) + ($($r:ident),*) -> ($($o:ident),*)) => {
        #[diagnostic::do_not_recommend]
        impl<$($d: Dim,)* X: Dim> Joins<$i, ($($r,)*)> for ($($d,)*) {
            type Out<L: Dim> = ($($o,)*);
        }
    };
}
joins!(0; (A) + (X) -> (L));
joins!(0; (A, B) + (X, B) -> (L, B));
joins!(1; (A, B) + (A, X) -> (A, L));
joins!(0; (A, B, C) + (X, B, C) -> (L, B, C));
joins!(1; (A, B, C) + (A, X, C) -> (A, L, C));
joins!(2; (A, B, C) + (A, B, X) -> (A, B, L));
joins!(0; (A, B, C, D) + (X, B, C, D) -> (L, B, C, D));
joins!(1; (A, B, C, D) + (A, X, C, D) -> (A, L, C, D));
joins!(2; (A, B, C, D) + (A, B, X, D) -> (A, B, L, D));
joins!(3; (A, B, C, D) + (A, B, C, X) -> (A, B, C, L));

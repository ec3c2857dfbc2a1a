//! Weights as typed Rust structs: [`Params`], the names they get, and the manifest that
//! weight files are checked against.
//!
//! `#[derive(Params)]` on a struct of tensors, layers, nested structs, `Vec`s and arrays
//! declares one graph param per tensor, named by its field path
//! (`encoder.layer.0.attention.self.query.weight`). Three field attributes map a model's
//! layout onto a checkpoint's:
//!
//! - `#[param(rename = "self")]`: the segment's name in the checkpoint (here a Rust keyword);
//! - `#[param(transpose)]`: the file stores this matrix with its last two dims swapped
//!   (PyTorch `Linear` keeps `[out, in]`); it is transposed once, when loaded;
//! - `#[param(split(parts = 3, index = 0, axis = 0))]`: every tensor under this field is
//!   part `index` of `parts` equal pieces of the file tensor, cut along `axis` of the file's
//!   layout (negative counts from the end); used with `rename` to read a fused QKV matrix.
//!   `axis` defaults to 0.
//!
//! `Vec` fields take their length from a dim: `#[param(len = Layers)]` where `Layers` is a
//! config dim (or a `Const<N>`). `Option` fields follow a config flag:
//! `#[param(when = "qkv_bias")]` declares the field only when the config sets that flag
//! ([`Sizes::with_flag`](crate::typed::Sizes::with_flag)), for the weights one variant of a
//! model family has and another lacks.
//!
//! ```
//! use rlx::Params;
//! use rlx::typed::{Const, Tensor, build};
//!
//! #[derive(Params)]
//! struct Block<'g> {
//!     #[param(transpose)]
//!     weight: Tensor<'g, (Const<4>, Const<2>)>,
//!     #[param(rename = "b")]
//!     bias: Tensor<'g, (Const<2>,)>,
//! }
//!
//! #[derive(Params)]
//! struct Net<'g> {
//!     #[param(len = Const<2>)]
//!     blocks: Vec<Block<'g>>,
//! }
//!
//! let graph = build(|g| {
//!     let net: Net = g.params();
//!     let x: Tensor<(Const<4>,)> = g.input("x");
//!     let w = net.blocks[1].weight;
//!     g.output("y", (w.t().matmul(w) + 1.0).sum::<0>() + x.sum::<0>());
//! })?;
//! let names: Vec<_> = graph.params().map(|(_, n)| n.name.clone().unwrap()).collect();
//! assert_eq!(names, ["blocks.0.weight", "blocks.0.b", "blocks.1.weight", "blocks.1.b"]);
//! # Ok::<(), rlx::typed::BuildErrors>(())
//! ```

pub(crate) mod manifest;

pub use manifest::{FileTensor, Manifest, ParamSpec, Split};

use crate::typed::{Element, Scope, Shape, Tensor};

/// A struct of weights that can declare itself in a graph.
///
/// Derive it with `#[derive(Params)]`; implemented by [`Tensor`] (one param) and by arrays
/// of `Params`.
pub trait Params<'g>: Sized {
    /// Declares every weight under `at` in the graph `g`.
    fn declare(g: &'g Scope<'g>, at: &ParamPath) -> Self;
}

impl<'g, S: Shape, E: Element> Params<'g> for Tensor<'g, S, E> {
    #[track_caller]
    fn declare(g: &'g Scope<'g>, at: &ParamPath) -> Self {
        g.param_at(at)
    }
}

impl<'g, T: Params<'g>, const N: usize> Params<'g> for [T; N] {
    #[track_caller]
    fn declare(g: &'g Scope<'g>, at: &ParamPath) -> Self {
        std::array::from_fn(|i| T::declare(g, &at.index(i)))
    }
}

/// Where a weight is declared: its dotted name in the checkpoint and how the checkpoint's
/// tensor maps onto it.
///
/// ```
/// use rlx::params::{ParamPath, Split};
/// let at = ParamPath::root().field("encoder").index(0).field("query").transposed();
/// assert_eq!(at.key(), "encoder.0.query");
/// assert!(at.is_transposed());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamPath {
    key: String,
    transpose: bool,
    splits: Vec<Split>,
}

impl ParamPath {
    /// The empty path (the model's top-level params).
    pub fn root() -> ParamPath {
        ParamPath::default()
    }

    /// The path of the field `name` below this one.
    pub fn field(&self, name: &str) -> ParamPath {
        let mut next = self.clone();
        if !next.key.is_empty() {
            next.key.push('.');
        }
        next.key.push_str(name);
        next
    }

    /// The path of entry `i` of a list below this one.
    pub fn index(&self, i: usize) -> ParamPath {
        self.field(&i.to_string())
    }

    /// The same path, read transposed from the checkpoint.
    pub fn transposed(&self) -> ParamPath {
        let mut next = self.clone();
        next.transpose = !next.transpose;
        next
    }

    /// The same path, read as one part of a split checkpoint tensor.
    pub fn split(&self, split: Split) -> ParamPath {
        let mut next = self.clone();
        next.splits.push(split);
        next
    }

    /// The dotted checkpoint name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// True if the checkpoint stores this tensor transposed.
    pub fn is_transposed(&self) -> bool {
        self.transpose
    }

    /// The splits applied to the checkpoint tensor (more than one is an error at declare).
    pub fn splits(&self) -> &[Split] {
        &self.splits
    }
}

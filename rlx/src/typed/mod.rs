//! Typed tensor handles: shapes and element types checked by rustc.
//!
//! A handle is `Tensor<'g, S, E = f32>`: `S` a tuple of dims ([`Const<N>`] or a named runtime
//! dim from [`dims!`](crate::dims)), `E` the element type, `'g` the brand of the graph being
//! built. Rank, equal dims (matmul inner dims, elementwise operands) and axes are checked by
//! the type system, so `cargo check` reports them at the user's expression. Rules that need
//! arithmetic on dims (a reshape's element count) are checked when the graph is built: every
//! op is `#[track_caller]`, and [`build`] returns all errors with the op, the shapes and the
//! caller's `file:line`.
//!
//! **Graph context:** a branded lifetime. [`build`] runs a closure that receives a
//! `&Scope<'g>` whose `'g` is unique to that call and invariant, so using a handle with
//! another graph, or keeping it after the closure returns, does not compile. The cost is a
//! `'g` parameter on functions that take handles; a thread-local builder would hide it but
//! move both mistakes to run time.
//!
//! ```
//! use rlx::typed::{Const, Tensor, build};
//! rlx::dims!(Batch);
//!
//! let graph = build(|g| {
//!     let x: Tensor<(Batch, Const<784>)> = g.input("x");
//!     let w1: Tensor<(Const<128>, Const<784>)> = g.param("fc1.weight");
//!     let b1: Tensor<(Const<128>,)> = g.param("fc1.bias");
//!     let w2: Tensor<(Const<10>, Const<128>)> = g.param("fc2.weight");
//!     let h = (x.matmul_t(w1) + b1).relu();     // bias broadcast along the batch
//!     g.output("probs", h.matmul_t(w2).softmax::<1>());
//! })?;
//! # Ok::<(), rlx::typed::BuildErrors>(())
//! ```

mod custom;
mod dim;
mod element;
mod linalg;
mod loss;
mod movement;
mod nn;
mod positions;
mod random;
mod scope;
mod shape;
mod sort;
mod spatial;
mod state;
mod tensor;

pub use custom::Operand;
pub use dim::{Const, Dim, DimKind, Dyn, Sizes, symbol_name};
pub use element::{Element, Float, Numeric};
pub use linalg::{InnerDim, Quantization};
pub use movement::{AppendDim, Index, Joins, Permute2, Permute3, Permute4, Replace, SwapAxes};
pub use nn::{Channels, Rope};
pub use positions::{FirstDim, Positions};
pub use scope::{BuildErrors, Scope, build, build_model, build_with};
pub use shape::{Axis, HasAxis, RemoveAxis, Shape, SuffixOf};
pub use sort::SamplingSettings;
pub use spatial::{ConvConfig, ConvTransposeConfig, PoolConfig};
pub use state::State;
pub use tensor::{Broadcasts, LastDim, SameElement, Tensor};

//! RLX: machine-learning models as plain, type-checked Rust.
//!
//! A model is a graph of primitive ops ([`ir`]) built with a [`GraphBuilder`]; backends
//! compile the graph and run it. Today the crate holds the IR, the untyped builder and the
//! inspection tools; see `ARCHITECTURE.md` in the repository for the whole plan.
//!
//! ```
//! use rlx::prelude::*;
//!
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", DType::F32, [Dim::sym("batch"), Dim::from(784)])?;
//! let w = b.param("w", DType::F32, [784, 10])?;
//! let logits = b.matmul(x, w)?;
//! let probs = b.softmax(logits, 1)?;
//! b.output("probs", probs)?;
//! let graph = b.finish()?;
//! println!("{graph}");
//! assert_eq!(graph[probs].ty.to_string(), "f32[batch,10]");
//! # Ok::<(), BuildError>(())
//! ```

pub mod autodiff;
pub mod backend;
pub mod builder;
pub mod cpu;
#[cfg(feature = "mlx")]
pub mod distributed;
pub mod generate;
pub mod gguf;
pub mod inspect;
pub mod ir;
#[cfg(feature = "mlx")]
pub mod mlx;
pub mod model;
pub mod models;
pub mod nn;
mod ops;
pub mod params;
pub mod passes;
pub mod prelude;
pub mod tensor;
#[cfg(feature = "text")]
pub mod tokenizer;
pub mod train;
pub mod typed;
pub mod weights;

pub use builder::{BuildError, GraphBuilder};
pub use params::Params;
/// Derives [`Params`] for a struct of weights; see [`params`] for the attributes.
pub use rlx_macros::Params;
/// Turns a fn over typed tensor handles into a model type; see [`model`](mod@model).
pub use rlx_macros::model;

// Lets the macros' `::rlx::` paths resolve inside this crate too.
extern crate self as rlx;

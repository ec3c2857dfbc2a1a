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

pub mod backend;
pub mod builder;
pub mod cpu;
pub mod inspect;
pub mod ir;
pub mod passes;
pub mod prelude;
pub mod tensor;
pub mod typed;

pub use builder::{BuildError, GraphBuilder};

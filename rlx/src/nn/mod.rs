//! Common layers on the typed API, each a `#[derive(Params)]` struct with a `forward`.
//!
//! Weight names follow PyTorch (`weight`, `bias`), and [`Linear`] reads PyTorch's `[out, in]`
//! layout, so checkpoints load without renaming tables.
//!
//! ```
//! use rlx::nn::{LayerNorm, Linear};
//! use rlx::typed::{Const, Tensor, build};
//! rlx::dims!(Batch);
//!
//! #[derive(rlx::Params)]
//! struct Head<'g> {
//!     dense: Linear<'g, Const<8>, Const<8>>,
//!     norm: LayerNorm<'g, Const<8>>,
//! }
//!
//! let graph = build(|g| {
//!     let head: Head = g.params();
//!     let x: Tensor<(Batch, Const<8>)> = g.input("x");
//!     g.output("y", head.norm.forward(head.dense.forward(x).gelu(), 1e-5));
//! })?;
//! assert_eq!(graph.params().count(), 4);
//! # Ok::<(), rlx::typed::BuildErrors>(())
//! ```

mod attention;
mod delta_net;
mod layers;
mod lora;
mod moe;
mod scan;

pub use attention::{FeedForward, SelfAttention};
pub use delta_net::{gated_delta_net, gated_rms_norm};
pub use layers::{Bias, Embedding, LayerNorm, Linear, Projection, RmsNorm, TokenEmbedding};
pub use lora::{Lora, LoraRank};
pub use moe::{Experts, Routes, combine_experts, load_balancing_loss, route};
pub use scan::selective_scan;

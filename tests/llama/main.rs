//! Llama-family decoders against transformers: SmolLM2-135M-Instruct from its GGUF file,
//! and tiny Hugging Face checkpoints of each variant the family covers.

mod mixture;
mod quantized;
mod smollm2;
mod variants;

/// The index of the largest logit of `row` (of equal ones, the last).
fn argmax(row: &[f32]) -> i64 {
    rlx_testkit::llm::argmax(row).expect("a row of logits")
}

//! Text generation from any decoder that steps one sequence through a key/value cache:
//! prompt prefill in chunks, one-token decode, the next token chosen on the backend by the
//! [`SampleToken`](crate::ir::SampleToken) op after the penalties, seeded, with stop
//! tokens and a token budget. [`TextStream`] (feature `text`) turns the tokens into
//! UTF-8-safe pieces of text with stop strings; [`ChatTemplate`] renders a conversation
//! with the model file's own template.
//!
//! A [`Decoder`] is the one thing a model provides (the Llama family's is
//! [`LlamaDecoder`](crate::models::llama::LlamaDecoder)); a [`Generator`] holds it with the
//! compiled sampler, and each [`Generator::generate`] is an independent [`Generation`] with
//! a context of its own, so many run side by side on one model. A [`BatchDecoder`] steps
//! several sequences at once (reading the weights once for all); a [`BatchGenerator`]
//! generates a batch of prompts of different lengths with it, each row as it would alone,
//! and its [`BatchSession`] lets sequences join and leave the running batch between steps
//! (continuous batching, as a server needs).
//!
//! ```no_run
//! use std::sync::Arc;
//! use rlx::cpu::CpuBackend;
//! use rlx::generate::{GenerateOptions, Generator, SamplingParams};
//! use rlx::gguf::Gguf;
//! use rlx::models::llama::LlamaDecoder;
//!
//! let backend = CpuBackend::default();
//! let file = Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let model = LlamaDecoder::from_gguf(&backend, &file, 2048)?;
//! let generator = Generator::new(&backend, Arc::new(model))?;
//! let options = GenerateOptions { max_tokens: 16, sampling: SamplingParams::greedy(), ..Default::default() };
//! let tokens: Vec<i64> = generator
//!     .generate(&[504, 3575, 282, 4649, 314], options)?
//!     .collect::<Result<_, _>>()?;
//! assert!(tokens.len() <= 16);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod batch;
#[cfg(feature = "text")]
mod chat;
pub(crate) mod sampling;
mod sequence;
mod session;
#[cfg(feature = "text")]
mod stream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Backend, CompileError, Context, RunError};
use crate::tensor::HostTensor;

pub use batch::{BatchDecoder, BatchGeneration, BatchGenerator};
#[cfg(feature = "text")]
pub use chat::{ChatMessage, ChatTemplate};
pub use sampling::SamplingParams;
pub use session::{BatchSession, RowEvent, RowId, TokenLogprob};
#[cfg(feature = "text")]
pub use stream::{Piece, TextPieces, TextStream};

use sampling::Sampler;
use sequence::{Next, Sequence};

/// A decoder language model stepping one sequence at a time through a cache held in a
/// [`Context`]: what generation needs of a model.
pub trait Decoder: Send + Sync {
    /// Tokens in the vocabulary (the length of a row of logits).
    fn vocab_size(&self) -> usize;

    /// Positions a context holds: prompt and generated tokens together.
    fn capacity(&self) -> usize;

    /// A context with an empty cache.
    fn new_context(&self) -> Result<Context, RunError>;

    /// Appends `tokens` at positions `pos..pos + tokens.len()` to the context's cache and
    /// returns the float32 logits (`vocab_size` of them, in any shape) of the token after
    /// `tokens[last]`. Tokens after `last` are padding: they may be written to the cache
    /// but are overwritten before anything reads them.
    fn step(
        &self,
        context: &mut Context,
        tokens: &[i64],
        pos: usize,
        last: usize,
    ) -> Result<HostTensor, RunError>;
}

/// Runs one [`Decoder::step`] of a compiled step graph whose inputs are `input_ids`
/// (`[1, tokens]`, `i64`), `pos` and `last` (`i64` scalars) and whose one output is the
/// logits: the step of every decoder in [`models`](crate::models).
pub(crate) fn run_decoder_step(
    step: &crate::model::Compiled,
    context: &mut Context,
    tokens: &[i64],
    pos: usize,
    last: usize,
) -> Result<HostTensor, RunError> {
    use crate::ir::DType;
    use crate::tensor::TensorRef;
    let shape = [1, tokens.len()];
    let ids = TensorRef {
        dtype: DType::I64,
        shape: &shape,
        bytes: bytemuck::cast_slice(tokens),
    };
    let (pos, last) = ([pos as i64], [last as i64]);
    fn scalar(v: &[i64; 1]) -> TensorRef<'_> {
        TensorRef {
            dtype: DType::I64,
            shape: &[],
            bytes: bytemuck::cast_slice(v),
        }
    }
    let [logits] = step.run_in_outputs(
        context,
        &[
            ("input_ids", ids),
            ("pos", scalar(&pos)),
            ("last", scalar(&last)),
        ],
    )?;
    Ok(logits)
}

/// Why a generation could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A prompt token is not in the vocabulary.
    #[error("token {token} is outside the vocabulary of {vocab}")]
    Token {
        /// The token.
        token: i64,
        /// The vocabulary's size.
        vocab: usize,
    },
    /// The prompt does not fit the model's context.
    #[error("the prompt's {prompt} tokens do not fit a context of {capacity} positions")]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Positions a context holds.
        capacity: usize,
    },
    /// A batch needs one to `slots` prompts and one options per prompt.
    #[error("a batch of {prompts} prompts with {options} options on a model of {slots} slots")]
    Batch {
        /// Prompts given.
        prompts: usize,
        /// Options given.
        options: usize,
        /// Sequences the model steps at once.
        slots: usize,
    },
    /// Every slot of a [`BatchSession`] holds a row.
    #[error("every one of the batch's {slots} slots is taken")]
    Full {
        /// Sequences the model steps at once.
        slots: usize,
    },
    /// A sampling setting is out of its range.
    #[error("sampling setting {name} {reason}")]
    Setting {
        /// The setting.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The model or the sampler failed to run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The sampler did not compile.
    #[error(transparent)]
    Compile(CompileError),
    /// The tokenizer failed.
    #[cfg(feature = "text")]
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// The chat template is missing, does not parse or failed to render.
    #[error("chat template: {0}")]
    Template(String),
    /// A bug: an invariant of this module did not hold.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token or stop string came.
    Stop,
    /// The token budget ([`GenerateOptions::max_tokens`]) is spent.
    Length,
    /// The context is full.
    Capacity,
}

/// What one generation does besides sampling.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// Most tokens generated.
    pub max_tokens: usize,
    /// How each token is chosen.
    pub sampling: SamplingParams,
    /// Tokens that end the generation (not returned): the model's end-of-turn tokens,
    /// usually.
    pub stop_tokens: Vec<i64>,
}

impl GenerateOptions {
    /// Whether `prompt` with these settings can start a generation on a model of `vocab`
    /// tokens whose contexts hold `capacity` positions: what every generator checks first,
    /// for callers (a server) that answer a bad request before queueing it.
    ///
    /// ```
    /// use rlx::generate::{GenerateError, GenerateOptions};
    /// let options = GenerateOptions::default();
    /// assert!(options.check(&[1, 2, 3], 100, 8).is_ok());
    /// assert!(matches!(options.check(&[], 100, 8), Err(GenerateError::EmptyPrompt)));
    /// assert!(matches!(options.check(&[100], 100, 8), Err(GenerateError::Token { .. })));
    /// assert!(matches!(options.check(&[1; 9], 100, 8), Err(GenerateError::PromptTooLong { .. })));
    /// ```
    pub fn check(
        &self,
        prompt: &[i64],
        vocab: usize,
        capacity: usize,
    ) -> Result<(), GenerateError> {
        self.sampling.check()?;
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        if let Some(&token) = prompt.iter().find(|t| !(0..vocab as i64).contains(*t)) {
            return Err(GenerateError::Token { token, vocab });
        }
        if prompt.len() > capacity {
            return Err(GenerateError::PromptTooLong {
                prompt: prompt.len(),
                capacity,
            });
        }
        Ok(())
    }
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop_tokens: Vec::new(),
        }
    }
}

/// Counts and times of one generation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenerationStats {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated so far.
    pub generated_tokens: usize,
    /// Time spent on the prompt (its steps and the first token's logits).
    pub prefill: Duration,
    /// Decode steps run (each one token through the model, then a draw).
    pub decode_steps: usize,
    /// Time spent in decode steps.
    pub decode: Duration,
}

impl GenerationStats {
    /// Prompt tokens per second of prefill.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-9)
    }

    /// Decode steps per second.
    pub fn decode_tokens_per_second(&self) -> f64 {
        self.decode_steps as f64 / self.decode.as_secs_f64().max(1e-9)
    }
}

/// A decoder with its compiled sampler: starts generations.
pub struct Generator {
    decoder: Arc<dyn Decoder>,
    sampler: Sampler,
    prefill_chunk: usize,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("vocab", &self.decoder.vocab_size())
            .field("capacity", &self.decoder.capacity())
            .field("prefill_chunk", &self.prefill_chunk)
            .finish()
    }
}

/// Prompt tokens one prefill step takes at most, unless changed.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// Prefill steps run at a few lengths only, so each length's plan is made once: powers of
/// two up to this, then multiples of it.
const BUCKET: usize = 64;

impl Generator {
    /// The decoder with a sampler compiled for `backend` (the decoder's).
    pub fn new<B: Backend<Executable: 'static>>(
        backend: &B,
        decoder: Arc<dyn Decoder>,
    ) -> Result<Generator, GenerateError> {
        Ok(Generator {
            decoder,
            sampler: Sampler::compile(backend)?,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
        })
    }

    /// Prefill at most `tokens` prompt tokens per step (rounded up to a multiple of 64):
    /// longer prompts run in chunks, each attending to the cache of those before.
    pub fn with_prefill_chunk(mut self, tokens: usize) -> Generator {
        self.prefill_chunk = tokens.max(1).div_ceil(BUCKET) * BUCKET;
        self
    }

    /// The model.
    pub fn decoder(&self) -> &dyn Decoder {
        self.decoder.as_ref()
    }

    /// Runs the prompt through the model and returns the generation, an iterator of the
    /// tokens that follow (each chosen when asked for).
    pub fn generate(
        &self,
        prompt: &[i64],
        options: GenerateOptions,
    ) -> Result<Generation<'_>, GenerateError> {
        let (vocab, capacity) = (self.decoder.vocab_size(), self.decoder.capacity());
        options.check(prompt, vocab, capacity)?;
        let start = Instant::now();
        let mut context = self.decoder.new_context()?;
        let mut logits = None;
        let mut padded = Vec::with_capacity(self.prefill_chunk);
        for (i, chunk) in prompt.chunks(self.prefill_chunk).enumerate() {
            let pos = i * self.prefill_chunk;
            let length = bucket(chunk.len()).min(capacity - pos);
            padded.clear();
            padded.extend_from_slice(chunk);
            padded.resize(length, 0);
            let step = self
                .decoder
                .step(&mut context, &padded, pos, chunk.len() - 1)?;
            logits = Some(step);
        }
        let logits = logits.ok_or_else(|| GenerateError::Internal("no prefill step".into()))?;
        check_logits(&logits, vocab)?;
        let mut sequence = Sequence::new(vocab, prompt, options);
        sequence.stats.prefill = start.elapsed();
        Ok(Generation {
            generator: self,
            context,
            sequence,
            logits,
            failed: false,
        })
    }
}

/// The length a prefill step of `n` tokens runs at: the next power of two up to 64, then
/// the next multiple of 64.
fn bucket(n: usize) -> usize {
    if n <= BUCKET {
        n.next_power_of_two()
    } else {
        n.div_ceil(BUCKET) * BUCKET
    }
}

fn check_logits(logits: &HostTensor, vocab: usize) -> Result<(), GenerateError> {
    if logits.dtype() != crate::ir::DType::F32 || logits.len() != vocab {
        return Err(GenerateError::Internal(format!(
            "the decoder gave {} {} logits for a vocabulary of {vocab}",
            logits.len(),
            logits.dtype()
        )));
    }
    Ok(())
}

/// One sequence being generated: an iterator of its tokens. Each token is chosen when it
/// is asked for, so a caller that stops early pays for nothing more.
pub struct Generation<'a> {
    generator: &'a Generator,
    context: Context,
    sequence: Sequence,
    /// The logits of the next token.
    logits: HostTensor,
    failed: bool,
}

impl std::fmt::Debug for Generation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("position", &self.sequence.position)
            .field("finish", &self.sequence.finish)
            .field("stats", &self.sequence.stats)
            .finish_non_exhaustive()
    }
}

impl Generation<'_> {
    /// Why it ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.sequence.finish
    }

    /// Its counts and times so far.
    pub fn stats(&self) -> GenerationStats {
        self.sequence.stats
    }

    /// Ends it with `reason` (a stop string found in its text, say).
    pub fn finish(&mut self, reason: FinishReason) {
        self.sequence.finish.get_or_insert(reason);
    }

    fn advance(&mut self) -> Result<Option<i64>, GenerateError> {
        let decoder = self.generator.decoder.as_ref();
        let start = Instant::now();
        match self.sequence.next(decoder.capacity()) {
            Next::Done => return Ok(None),
            Next::Draw => {}
            Next::Run(token) => {
                let position = self.sequence.position;
                self.logits = decoder.step(&mut self.context, &[token], position, 0)?;
                check_logits(&self.logits, decoder.vocab_size())?;
                self.sequence.ran();
            }
        }
        self.sequence.draw(
            &self.generator.sampler,
            &self.logits,
            decoder.vocab_size(),
            start,
        )
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<i64, GenerateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.sequence.finish.is_some() || self.failed {
            return None;
        }
        match self.advance() {
            Ok(token) => token.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bucket;

    #[test]
    fn prefill_lengths_fall_in_few_buckets() {
        assert_eq!(
            [1, 2, 3, 5, 33, 64, 65, 128, 129, 511].map(bucket),
            [1, 2, 4, 8, 64, 64, 128, 128, 192, 512]
        );
    }
}

//! What one sequence being generated keeps between tokens, whether it runs alone
//! ([`Generation`](super::Generation)) or as a row of a batch
//! ([`BatchSession`](super::BatchSession)): its settings, penalty history, seeded
//! draws, position, budget and stop tokens.

use std::time::Instant;

use super::sampling::{Draws, History, Sampler};
use super::{FinishReason, GenerateError, GenerateOptions, GenerationStats};
use crate::tensor::HostTensor;

/// What a sequence needs before its next draw.
pub(super) enum Next {
    /// It has ended.
    Done,
    /// Its logits are ready (the prompt's, for the first token).
    Draw,
    /// Its last token must go through the model first, at [`Sequence::position`].
    Run(i64),
}

pub(super) struct Sequence {
    pub options: GenerateOptions,
    history: History,
    draws: Draws,
    /// Tokens in the cache.
    pub position: usize,
    /// The last token chosen, not yet run through the model.
    pending: Option<i64>,
    pub finish: Option<FinishReason>,
    pub stats: GenerationStats,
}

impl Sequence {
    pub fn new(vocab: usize, prompt: &[i64], options: GenerateOptions) -> Sequence {
        Sequence {
            history: History::new(vocab, prompt),
            draws: Draws::new(options.sampling.seed),
            options,
            position: prompt.len(),
            pending: None,
            finish: None,
            stats: GenerationStats {
                prompt_tokens: prompt.len(),
                ..GenerationStats::default()
            },
        }
    }

    /// What comes before the next draw: the end when the budget is spent or the cache
    /// full (the finish reason is set), else the token to run, if any.
    pub fn next(&mut self, capacity: usize) -> Next {
        if self.finish.is_some() {
            return Next::Done;
        }
        if self.stats.generated_tokens >= self.options.max_tokens {
            self.finish = Some(FinishReason::Length);
            return Next::Done;
        }
        match self.pending {
            None => Next::Draw,
            Some(_) if self.position >= capacity => {
                self.finish = Some(FinishReason::Capacity);
                Next::Done
            }
            Some(token) => Next::Run(token),
        }
    }

    /// The pending token went through the model.
    pub fn ran(&mut self) {
        self.pending = None;
        self.position += 1;
        self.stats.decode_steps += 1;
    }

    /// Chooses the next token from `logits` (float32, one per token of the vocabulary),
    /// counts the time since `start`, and ends the sequence on a stop token.
    pub fn draw(
        &mut self,
        sampler: &Sampler,
        logits: &HostTensor,
        vocab: usize,
        start: Instant,
    ) -> Result<Option<i64>, GenerateError> {
        let uniform = self.draws.next_uniform();
        let token = sampler.sample(logits, &self.history, &self.options.sampling, uniform)?;
        if self.stats.decode_steps > 0 {
            self.stats.decode += start.elapsed();
        } else {
            self.stats.prefill += start.elapsed();
        }
        if !(0..vocab as i64).contains(&token) {
            return Err(GenerateError::Internal(format!(
                "the sampler chose token {token}"
            )));
        }
        if self.options.stop_tokens.contains(&token) {
            self.finish = Some(FinishReason::Stop);
            return Ok(None);
        }
        self.history.push(token);
        self.pending = Some(token);
        self.stats.generated_tokens += 1;
        Ok(Some(token))
    }
}

//! Generation for several prompts at once: one model step per token for the whole batch,
//! each prompt in a slot of the model's caches, at a position of its own.

use std::collections::VecDeque;
use std::sync::Arc;

use super::sampling::Sampler;
use super::session::{BatchSession, RowEvent, RowId};
use super::{
    BUCKET, DEFAULT_PREFILL_CHUNK, FinishReason, GenerateError, GenerateOptions, GenerationStats,
    check_logits,
};
use crate::backend::{Backend, Context, RunError};
use crate::ir::DType;
use crate::tensor::HostTensor;

/// A decoder language model stepping a batch of sequences, each in a slot of its own of the
/// caches a [`Context`] holds: what batched generation needs of a model (the Llama
/// family's is [`LlamaBatchDecoder`](crate::models::llama::LlamaBatchDecoder)).
pub trait BatchDecoder: Send + Sync {
    /// Tokens in the vocabulary (the length of a row of logits).
    fn vocab_size(&self) -> usize;

    /// Positions each slot holds: prompt and generated tokens together.
    fn capacity(&self) -> usize;

    /// Sequences a step holds.
    fn slots(&self) -> usize;

    /// A context with every slot's cache empty.
    fn new_context(&self) -> Result<Context, RunError>;

    /// Appends row `b` of `tokens` (`slots` rows of `seq` tokens, row after row) at
    /// positions `pos[b]..pos[b] + seq` of slot `b` and returns the float32 logits of the
    /// token after `tokens[b][last[b]]`, `vocab_size` per slot, slot after slot. Tokens
    /// after `last[b]` are padding: they may be written to the cache but are overwritten
    /// before anything reads them. `pos[b] + seq` never exceeds the capacity.
    fn step(
        &self,
        context: &mut Context,
        tokens: &[i64],
        seq: usize,
        pos: &[usize],
        last: &[usize],
    ) -> Result<HostTensor, RunError>;
}

/// A batch decoder with its compiled sampler: starts batched generations.
///
/// ```no_run
/// use std::sync::Arc;
/// use rlx::cpu::CpuBackend;
/// use rlx::generate::{BatchGenerator, GenerateOptions, SamplingParams};
/// use rlx::gguf::Gguf;
/// use rlx::models::llama::LlamaBatchDecoder;
///
/// let backend = CpuBackend::default();
/// let file = Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let model = LlamaBatchDecoder::from_gguf(&backend, &file, 512, 4)?;
/// let generator = BatchGenerator::new(&backend, Arc::new(model))?;
/// let options = GenerateOptions { max_tokens: 16, sampling: SamplingParams::greedy(), ..Default::default() };
/// let prompts: [&[i64]; 2] = [&[504, 3575, 282], &[1, 2, 3, 4, 5, 6]];
/// let rows = generator.generate(&prompts, &[options.clone(), options])?.collect_rows()?;
/// assert_eq!(rows.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BatchGenerator {
    pub(super) decoder: Arc<dyn BatchDecoder>,
    pub(super) sampler: Sampler,
    pub(super) prefill_chunk: usize,
}

impl std::fmt::Debug for BatchGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchGenerator")
            .field("vocab", &self.decoder.vocab_size())
            .field("capacity", &self.decoder.capacity())
            .field("slots", &self.decoder.slots())
            .field("prefill_chunk", &self.prefill_chunk)
            .finish()
    }
}

impl BatchGenerator {
    /// The decoder with a sampler compiled for `backend` (the decoder's).
    pub fn new<B: Backend<Executable: 'static>>(
        backend: &B,
        decoder: Arc<dyn BatchDecoder>,
    ) -> Result<BatchGenerator, GenerateError> {
        Ok(BatchGenerator {
            decoder,
            sampler: Sampler::compile(backend)?,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
        })
    }

    /// Prefill at most `tokens` prompt tokens of each row per step (rounded up to a
    /// multiple of 64), as [`Generator::with_prefill_chunk`](super::Generator::with_prefill_chunk).
    pub fn with_prefill_chunk(mut self, tokens: usize) -> BatchGenerator {
        self.prefill_chunk = tokens.max(1).div_ceil(BUCKET) * BUCKET;
        self
    }

    /// The model.
    pub fn decoder(&self) -> &dyn BatchDecoder {
        self.decoder.as_ref()
    }

    /// Starts the prompts together, prompt `b` in slot `b` with `options[b]`, and returns
    /// the generation: an iterator of steps, each with the next token of every row
    /// (`None` for a row that has ended). It is a [`BatchSession`] that admits every prompt
    /// at once, so each row's tokens are those
    /// [`Generator::generate`](super::Generator::generate) gives its prompt and options
    /// alone, up to the backend's rounding (the CPU's are equal). At most
    /// [`BatchDecoder::slots`] prompts, one options per prompt.
    pub fn generate(
        &self,
        prompts: &[&[i64]],
        options: &[GenerateOptions],
    ) -> Result<BatchGeneration<'_>, GenerateError> {
        let slots = self.decoder.slots();
        if prompts.is_empty() || prompts.len() > slots || options.len() != prompts.len() {
            return Err(GenerateError::Batch {
                prompts: prompts.len(),
                options: options.len(),
                slots,
            });
        }
        let mut session = self.session()?;
        let mut rows = Vec::with_capacity(prompts.len());
        for (prompt, options) in prompts.iter().zip(options) {
            rows.push(Row {
                id: session.admit(prompt, options.clone(), None)?,
                tokens: VecDeque::new(),
                finish: None,
                stats: GenerationStats::default(),
            });
        }
        Ok(BatchGeneration {
            session,
            rows,
            failed: false,
        })
    }
}

/// The `slots` rows of `vocab` logits of a batch step, each a tensor of its own.
pub(super) fn split_rows(
    logits: &HostTensor,
    slots: usize,
    vocab: usize,
) -> Result<Vec<HostTensor>, GenerateError> {
    let values = logits
        .as_slice::<f32>()
        .ok()
        .filter(|v| v.len() == slots * vocab)
        .ok_or_else(|| {
            GenerateError::Internal(format!(
                "the decoder gave {} {} logits for {slots} rows of {vocab}",
                logits.len(),
                logits.dtype()
            ))
        })?;
    values
        .chunks(vocab)
        .map(|row| {
            let row = HostTensor::from_vec(row.to_vec(), [vocab])
                .map_err(|e| GenerateError::Internal(e.to_string()))?;
            check_logits(&row, vocab)?;
            debug_assert_eq!(row.dtype(), DType::F32);
            Ok(row)
        })
        .collect()
}

struct Row {
    id: RowId,
    /// Tokens chosen and not yet returned.
    tokens: VecDeque<i64>,
    finish: Option<FinishReason>,
    /// Its stats once it has left the session.
    stats: GenerationStats,
}

/// Several sequences started together: an iterator of steps, each the next token of
/// every row (`None` for a row that has ended). Rows whose prompts are shorter start
/// decoding while the others still read theirs; an item is ready once every row still
/// going has a token.
pub struct BatchGeneration<'a> {
    session: BatchSession<'a>,
    rows: Vec<Row>,
    failed: bool,
}

impl std::fmt::Debug for BatchGeneration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchGeneration")
            .field("rows", &self.rows.len())
            .field(
                "finish",
                &self.rows.iter().map(|r| r.finish).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl BatchGeneration<'_> {
    /// Rows: the prompts it started with.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Why row `row` ended, once it has (`None` also for a row that does not exist).
    pub fn finish_reason(&self, row: usize) -> Option<FinishReason> {
        self.rows.get(row).and_then(|r| r.finish)
    }

    /// Row `row`'s counts and times so far (prefill: from the start to its first token).
    pub fn stats(&self, row: usize) -> Option<GenerationStats> {
        let r = self.rows.get(row)?;
        Some(self.session.stats(r.id).unwrap_or(r.stats))
    }

    /// Ends row `row` with `reason` (a stop string found in its text, say); the others go
    /// on.
    pub fn finish(&mut self, row: usize, reason: FinishReason) {
        if let Some(r) = self.rows.get_mut(row)
            && r.finish.is_none()
        {
            if let Some(stats) = self.session.stats(r.id) {
                r.stats = stats;
            }
            self.session.cancel(r.id);
            r.finish = Some(reason);
            r.tokens.clear();
        }
    }

    /// Runs to the end and returns each row's tokens.
    pub fn collect_rows(self) -> Result<Vec<Vec<i64>>, GenerateError> {
        let mut rows = vec![Vec::new(); self.rows.len()];
        for step in self {
            for (row, token) in rows.iter_mut().zip(step?) {
                row.extend(token);
            }
        }
        Ok(rows)
    }

    fn advance(&mut self) -> Result<Option<Vec<Option<i64>>>, GenerateError> {
        while self.session.rows() > 0
            && self
                .rows
                .iter()
                .any(|r| r.finish.is_none() && r.tokens.is_empty())
        {
            for (id, event) in self.session.step()? {
                let Some(row) = self.rows.iter_mut().find(|r| r.id == id) else {
                    continue;
                };
                match event {
                    RowEvent::Token { token, .. } => row.tokens.push_back(token),
                    RowEvent::Finished { reason, stats } => {
                        row.finish = Some(reason);
                        row.stats = stats;
                    }
                }
            }
        }
        if self.rows.iter().all(|r| r.tokens.is_empty()) {
            return Ok(None);
        }
        Ok(Some(
            self.rows.iter_mut().map(|r| r.tokens.pop_front()).collect(),
        ))
    }
}

impl Iterator for BatchGeneration<'_> {
    type Item = Result<Vec<Option<i64>>, GenerateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.advance() {
            Ok(step) => step.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

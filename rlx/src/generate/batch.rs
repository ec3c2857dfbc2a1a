//! Generation for several prompts at once: one model step per token for the whole batch,
//! each prompt in a slot of the model's caches, at a position of its own.

use std::sync::Arc;
use std::time::Instant;

use super::sampling::Sampler;
use super::sequence::{Next, Sequence};
use super::{
    BUCKET, DEFAULT_PREFILL_CHUNK, FinishReason, GenerateError, GenerateOptions, GenerationStats,
    bucket, check_logits, check_request,
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

    /// Runs the prompts through the model, prompt `b` in slot `b` with `options[b]`, and
    /// returns the generation: an iterator of steps, each with the token every row chose
    /// (`None` for a row that has ended). Each row's tokens are those
    /// [`Generator::generate`](super::Generator::generate) gives its prompt and options
    /// alone, up to the backend's rounding (the CPU's are equal). At most
    /// [`BatchDecoder::slots`] prompts, one options per prompt.
    pub fn generate(
        &self,
        prompts: &[&[i64]],
        options: &[GenerateOptions],
    ) -> Result<BatchGeneration<'_>, GenerateError> {
        let decoder = self.decoder.as_ref();
        let (vocab, capacity, slots) = (decoder.vocab_size(), decoder.capacity(), decoder.slots());
        if prompts.is_empty() || prompts.len() > slots || options.len() != prompts.len() {
            return Err(GenerateError::Batch {
                prompts: prompts.len(),
                options: options.len(),
                slots,
            });
        }
        for (prompt, options) in prompts.iter().zip(options) {
            check_request(prompt, options, vocab, capacity)?;
        }
        let start = Instant::now();
        let mut context = decoder.new_context()?;
        let mut logits: Vec<Option<HostTensor>> = vec![None; prompts.len()];
        let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        let (mut tokens, mut last) = (Vec::new(), vec![0; slots]);
        // Every row at the same positions: a row whose prompt has ended writes padding
        // past it, which its own decode steps overwrite before reading.
        for pos in (0..longest).step_by(self.prefill_chunk) {
            let end = |p: &[i64]| p.len().min(pos + self.prefill_chunk);
            let widest = prompts
                .iter()
                .map(|p| end(p).saturating_sub(pos))
                .max()
                .unwrap_or(1);
            let seq = bucket(widest).min(capacity - pos);
            tokens.clear();
            tokens.resize(slots * seq, 0);
            for (b, prompt) in prompts.iter().enumerate() {
                let chunk = prompt.get(pos..end(prompt)).unwrap_or(&[]);
                tokens[b * seq..b * seq + chunk.len()].copy_from_slice(chunk);
                last[b] = chunk.len().saturating_sub(1);
            }
            let step = decoder.step(&mut context, &tokens, seq, &vec![pos; slots], &last)?;
            let rows = split_rows(&step, slots, vocab)?;
            for (b, row) in rows.into_iter().enumerate().take(prompts.len()) {
                if (pos..pos + self.prefill_chunk).contains(&(prompts[b].len() - 1)) {
                    logits[b] = Some(row);
                }
            }
        }
        let mut rows = Vec::with_capacity(prompts.len());
        for ((prompt, options), logits) in prompts.iter().zip(options).zip(logits) {
            let logits = logits.ok_or_else(|| GenerateError::Internal("no prefill".into()))?;
            let mut sequence = Sequence::new(vocab, prompt, options.clone());
            sequence.stats.prefill = start.elapsed();
            rows.push(Row { sequence, logits });
        }
        Ok(BatchGeneration {
            generator: self,
            context,
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
    sequence: Sequence,
    /// The logits of the row's next token.
    logits: HostTensor,
}

/// Several sequences being generated together: an iterator of steps, each the token every
/// row chose (`None` for a row that has ended). A step runs the model once for all rows
/// still going.
pub struct BatchGeneration<'a> {
    generator: &'a BatchGenerator,
    context: Context,
    rows: Vec<Row>,
    failed: bool,
}

impl std::fmt::Debug for BatchGeneration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchGeneration")
            .field("rows", &self.rows.len())
            .field(
                "finish",
                &self
                    .rows
                    .iter()
                    .map(|r| r.sequence.finish)
                    .collect::<Vec<_>>(),
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
        self.rows.get(row).and_then(|r| r.sequence.finish)
    }

    /// Row `row`'s counts and times so far (the batch's prefill and decode steps, which
    /// every row shares).
    pub fn stats(&self, row: usize) -> Option<GenerationStats> {
        self.rows.get(row).map(|r| r.sequence.stats)
    }

    /// Ends row `row` with `reason` (a stop string found in its text, say); the others go
    /// on.
    pub fn finish(&mut self, row: usize, reason: FinishReason) {
        if let Some(r) = self.rows.get_mut(row) {
            r.sequence.finish.get_or_insert(reason);
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
        let decoder = self.generator.decoder.as_ref();
        let (vocab, capacity, slots) = (decoder.vocab_size(), decoder.capacity(), decoder.slots());
        let start = Instant::now();
        // Rows that have ended (and slots without a row) repeat token 0 at position 0 of
        // their own slot, which nothing reads again.
        let (mut tokens, mut pos) = (vec![0i64; slots], vec![0usize; slots]);
        let mut next = Vec::with_capacity(self.rows.len());
        for (b, row) in self.rows.iter_mut().enumerate() {
            let n = row.sequence.next(capacity);
            if let Next::Run(token) = n {
                (tokens[b], pos[b]) = (token, row.sequence.position);
            }
            next.push(n);
        }
        if next.iter().all(|n| matches!(n, Next::Done)) {
            return Ok(None);
        }
        if next.iter().any(|n| matches!(n, Next::Run(_))) {
            let step = decoder.step(&mut self.context, &tokens, 1, &pos, &vec![0; slots])?;
            let logits = split_rows(&step, slots, vocab)?;
            for ((row, n), logits) in self.rows.iter_mut().zip(&next).zip(logits) {
                if matches!(n, Next::Run(_)) {
                    row.logits = logits;
                    row.sequence.ran();
                }
            }
        }
        let mut chosen = vec![None; self.rows.len()];
        for ((row, n), chosen) in self.rows.iter_mut().zip(&next).zip(&mut chosen) {
            if !matches!(n, Next::Done) {
                *chosen = row
                    .sequence
                    .draw(&self.generator.sampler, &row.logits, vocab, start)?;
            }
        }
        Ok(Some(chosen))
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

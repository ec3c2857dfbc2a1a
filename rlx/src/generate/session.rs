//! Continuous batching: sequences join a running batch and leave it between steps, each in
//! a slot of the decoder's caches at a position of its own, prompts prefilled in chunks
//! within the same steps that decode the others.

use std::time::Instant;

use super::batch::{BatchGenerator, split_rows};
use super::sequence::{Next, Sequence};
use super::{BUCKET, FinishReason, GenerateError, GenerateOptions, GenerationStats, bucket};
use crate::backend::Context;
use crate::tensor::HostTensor;

/// A row of a [`BatchSession`]: unique over the session's life, so a row that has left is
/// never mistaken for the one that took its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowId(u64);

impl std::fmt::Display for RowId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "row {}", self.0)
    }
}

/// The model's log-probability of a chosen token (of its logits as they came out, before
/// penalties, temperature and filters), and of the likeliest tokens at that position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// Natural log of the chosen token's probability.
    pub logprob: f32,
    /// The likeliest tokens with theirs, likeliest first (as many as asked for).
    pub top: Vec<(i64, f32)>,
}

/// What happened to a row in a [`BatchSession::step`].
#[derive(Clone, Debug, PartialEq)]
pub enum RowEvent {
    /// The row chose its next token.
    Token {
        /// The token.
        token: i64,
        /// Its log-probability, if the row asked for them.
        logprob: Option<TokenLogprob>,
    },
    /// The row ended and left the batch; its slot is free.
    Finished {
        /// Why.
        reason: FinishReason,
        /// Its counts and times: prefill is the time from admission to the first token.
        stats: GenerationStats,
    },
}

struct Row {
    id: RowId,
    prompt: Vec<i64>,
    /// Prompt tokens in the cache.
    prefilled: usize,
    sequence: Sequence,
    /// Alternatives per token to report log-probabilities for, if any.
    logprobs: Option<usize>,
    admitted: Instant,
}

/// What one row does in a step.
#[derive(Clone, Copy)]
enum Work {
    Idle,
    /// Prompt tokens from `from`.
    Prefill {
        from: usize,
    },
    /// The pending token, at the row's position.
    Decode(i64),
}

/// A batch that sequences join and leave between steps (continuous batching), over the
/// slots of a [`BatchGenerator`]'s decoder. Each step runs the model once: rows still
/// reading their prompt take the next chunk of it (at most the generator's prefill chunk),
/// the others one token; a row leaves as soon as it ends, and a new one may take its slot
/// at the next step. Each row's tokens are those
/// [`Generator::generate`](super::Generator::generate) gives its prompt and options alone,
/// up to the backend's rounding.
///
/// ```no_run
/// use std::sync::Arc;
/// use rlx::cpu::CpuBackend;
/// use rlx::generate::{BatchGenerator, GenerateOptions, RowEvent, SamplingParams};
/// use rlx::gguf::Gguf;
/// use rlx::models::llama::LlamaBatchDecoder;
///
/// let backend = CpuBackend::default();
/// let file = Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
/// let model = LlamaBatchDecoder::from_gguf(&backend, &file, 512, 4)?;
/// let generator = BatchGenerator::new(&backend, Arc::new(model))?.with_prefill_chunk(64);
/// let mut session = generator.session()?;
/// let options = GenerateOptions { max_tokens: 8, sampling: SamplingParams::greedy(), ..Default::default() };
/// let first = session.admit(&[504, 3575, 282], options.clone(), None)?;
/// let mut tokens = Vec::new();
/// while session.rows() > 0 {
///     for (row, event) in session.step()? {
///         if let RowEvent::Token { token, .. } = event {
///             tokens.push((row, token));
///         }
///     }
///     if tokens.len() == 2 && session.free_slots() > 0 {
///         session.admit(&[1, 2, 3, 4], options.clone(), Some(5))?; // joins mid-way
///     }
/// }
/// assert!(tokens.iter().filter(|(row, _)| *row == first).count() <= 8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct BatchSession<'a> {
    generator: &'a BatchGenerator,
    context: Context,
    slots: Vec<Option<Row>>,
    next_id: u64,
}

impl std::fmt::Debug for BatchSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchSession")
            .field("slots", &self.slots.len())
            .field("rows", &self.rows())
            .finish_non_exhaustive()
    }
}

impl BatchGenerator {
    /// A batch with every slot free, its caches in a context of its own.
    pub fn session(&self) -> Result<BatchSession<'_>, GenerateError> {
        Ok(BatchSession {
            generator: self,
            context: self.decoder.new_context()?,
            slots: (0..self.decoder.slots()).map(|_| None).collect(),
            next_id: 0,
        })
    }
}

impl BatchSession<'_> {
    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Slots a new row may take.
    pub fn free_slots(&self) -> usize {
        self.slots.len() - self.rows()
    }

    /// Adds a sequence: `prompt`, generated with `options`, reporting log-probabilities
    /// with `logprobs` alternatives per token if given. Its prompt goes through the model
    /// from the next step on. A bad prompt or setting, or no free slot
    /// ([`GenerateError::Full`]), is an error and changes nothing.
    pub fn admit(
        &mut self,
        prompt: &[i64],
        options: GenerateOptions,
        logprobs: Option<usize>,
    ) -> Result<RowId, GenerateError> {
        let decoder = self.generator.decoder.as_ref();
        options.check(prompt, decoder.vocab_size(), decoder.capacity())?;
        let slot = self
            .slots
            .iter_mut()
            .find(|s| s.is_none())
            .ok_or(GenerateError::Full {
                slots: decoder.slots(),
            })?;
        let id = RowId(self.next_id);
        self.next_id += 1;
        *slot = Some(Row {
            id,
            prompt: prompt.to_vec(),
            prefilled: 0,
            sequence: Sequence::new(decoder.vocab_size(), prompt, options),
            logprobs,
            admitted: Instant::now(),
        });
        Ok(id)
    }

    /// Removes `row` from the batch (a client that went away), freeing its slot. Whether it
    /// was there.
    pub fn cancel(&mut self, row: RowId) -> bool {
        match self
            .slots
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|r| r.id == row))
        {
            Some(slot) => {
                *slot = None;
                true
            }
            None => false,
        }
    }

    /// `row`'s counts and times so far, while it is in the batch.
    pub fn stats(&self, row: RowId) -> Option<GenerationStats> {
        self.slots
            .iter()
            .flatten()
            .find(|r| r.id == row)
            .map(|r| r.sequence.stats)
    }

    /// Runs the model once for every row and returns what happened to each: a token
    /// chosen, or the row's end (its slot then free). With no rows it does nothing. On an
    /// error every row is dropped and the session stays usable.
    pub fn step(&mut self) -> Result<Vec<(RowId, RowEvent)>, GenerateError> {
        let result = self.try_step();
        if result.is_err() {
            self.slots.iter_mut().for_each(|s| *s = None);
        }
        result
    }

    fn try_step(&mut self) -> Result<Vec<(RowId, RowEvent)>, GenerateError> {
        let generator = self.generator;
        let decoder = generator.decoder.as_ref();
        let (vocab, capacity, slots) = (decoder.vocab_size(), decoder.capacity(), decoder.slots());
        let start = Instant::now();
        let mut events = Vec::new();
        let mut work = vec![Work::Idle; slots];
        // The widest prompt chunk wanted, and the fewest positions any row has left: every
        // row writes `seq` positions from its own.
        let (mut widest, mut room) = (0, capacity);
        for (slot, work) in self.slots.iter_mut().zip(&mut work) {
            let Some(row) = slot else { continue };
            if row.prefilled < row.prompt.len() {
                let left = row.prompt.len() - row.prefilled;
                widest = widest.max(left.min(generator.prefill_chunk));
                room = room.min(capacity - row.prefilled);
                *work = Work::Prefill {
                    from: row.prefilled,
                };
                continue;
            }
            match row.sequence.next(capacity) {
                Next::Run(token) => {
                    room = room.min(capacity - row.sequence.position);
                    *work = Work::Decode(token);
                }
                Next::Done => events.push(finished(slot)?),
                Next::Draw => return Err(GenerateError::Internal("a row without logits".into())),
            }
        }
        if work.iter().all(|w| matches!(w, Work::Idle)) {
            return Ok(events);
        }
        let seq = largest_bucket_within(bucket(widest.max(1)).min(room));
        let mut tokens = vec![0i64; slots * seq];
        let (mut pos, mut last) = (vec![0usize; slots], vec![0usize; slots]);
        for (b, (slot, work)) in self.slots.iter().zip(&work).enumerate() {
            match (slot, *work) {
                (Some(row), Work::Prefill { from }) => {
                    let chunk = &row.prompt[from..row.prompt.len().min(from + seq)];
                    tokens[b * seq..b * seq + chunk.len()].copy_from_slice(chunk);
                    (pos[b], last[b]) = (from, chunk.len() - 1);
                }
                (Some(row), Work::Decode(token)) => {
                    (tokens[b * seq], pos[b]) = (token, row.sequence.position);
                }
                _ => {}
            }
        }
        let step = decoder.step(&mut self.context, &tokens, seq, &pos, &last)?;
        let rows = split_rows(&step, slots, vocab)?;
        for ((slot, work), logits) in self.slots.iter_mut().zip(&work).zip(rows) {
            let Some(row) = slot else { continue };
            match *work {
                Work::Idle => continue,
                Work::Prefill { from } => {
                    row.prefilled = row.prompt.len().min(from + seq);
                    if row.prefilled < row.prompt.len() {
                        continue;
                    }
                }
                Work::Decode(_) => row.sequence.ran(),
            }
            let first = row.sequence.stats.generated_tokens == 0;
            let id = row.id;
            let token = match row.sequence.next(capacity) {
                Next::Draw => row
                    .sequence
                    .draw(&generator.sampler, &logits, vocab, start)?,
                Next::Done => None,
                Next::Run(_) => return Err(GenerateError::Internal("a row drew twice".into())),
            };
            if first {
                row.sequence.stats.prefill = row.admitted.elapsed();
            }
            if let Some(token) = token {
                let logprob = row.logprobs.map(|top| logprob_of(&logits, token, top));
                events.push((id, RowEvent::Token { token, logprob }));
            }
            if matches!(row.sequence.next(capacity), Next::Done) {
                events.push(finished(slot)?);
            }
        }
        Ok(events)
    }
}

/// Takes the ended row out of `slot` and reports it.
fn finished(slot: &mut Option<Row>) -> Result<(RowId, RowEvent), GenerateError> {
    let row = slot
        .take()
        .ok_or_else(|| GenerateError::Internal("an empty slot finished".into()))?;
    let reason = row
        .sequence
        .finish
        .ok_or_else(|| GenerateError::Internal("a row ended without a reason".into()))?;
    let stats = row.sequence.stats;
    Ok((row.id, RowEvent::Finished { reason, stats }))
}

/// The longest step length at most `n` (at least 1) that [`bucket`] gives: plans are made
/// for those lengths only.
fn largest_bucket_within(n: usize) -> usize {
    if n >= BUCKET {
        n / BUCKET * BUCKET
    } else {
        1 << n.max(1).ilog2()
    }
}

/// The log-softmax of `logits` at `token`, and the `top` likeliest tokens with theirs.
fn logprob_of(logits: &HostTensor, token: i64, top: usize) -> TokenLogprob {
    let values = logits.as_slice::<f32>().unwrap_or(&[]);
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = values.iter().map(|&x| (x as f64 - max).exp()).sum();
    let log_total = max + sum.ln();
    let logprob = |i: usize| (values[i] as f64 - log_total) as f32;
    let top = top.min(values.len());
    // The whole vocabulary is ranked only when alternatives are asked for.
    let mut order: Vec<usize> = if top == 0 {
        Vec::new()
    } else {
        (0..values.len()).collect()
    };
    if top > 0 && top < order.len() {
        order.select_nth_unstable_by(top - 1, |&a, &b| values[b].total_cmp(&values[a]));
    }
    order.truncate(top);
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    TokenLogprob {
        logprob: usize::try_from(token)
            .ok()
            .filter(|&t| t < values.len())
            .map_or(f32::NEG_INFINITY, logprob),
        top: order.into_iter().map(|i| (i as i64, logprob(i))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lengths_stay_on_buckets() {
        assert_eq!(
            [1, 2, 3, 7, 8, 63, 64, 100, 128, 200].map(largest_bucket_within),
            [1, 2, 2, 4, 8, 32, 64, 64, 128, 192]
        );
        for n in 1..1000 {
            let b = largest_bucket_within(n);
            assert!(b <= n && bucket(b) == b, "{n} -> {b}");
        }
    }

    #[test]
    fn logprobs_are_a_log_softmax() {
        let logits = HostTensor::from_vec(vec![1.0f32, 3.0, 2.0, 3.0], [4]).unwrap();
        let lp = logprob_of(&logits, 2, 3);
        let total: f64 = [1.0f64, 3.0, 2.0, 3.0].iter().map(|x| x.exp()).sum();
        assert!((lp.logprob as f64 - (2.0 - total.ln())).abs() < 1e-6);
        let ids: Vec<i64> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 2]);
        assert!((lp.top[0].1 as f64 - (3.0 - total.ln())).abs() < 1e-6);
    }
}

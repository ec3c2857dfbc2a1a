//! The engine: one thread that owns the model's batch and steps it while any request is
//! running. Requests wait in a bounded queue, join the batch as slots free up (continuous
//! batching: [`BatchSession`]), and get their text back piece by piece over a channel; a
//! request whose receiver is gone (the client left) or whose time is up is cancelled and
//! its slot freed at once.

use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rlx::generate::{
    BatchGenerator, BatchSession, FinishReason, GenerateOptions, RowEvent, RowId, TextPieces,
};
use rlx::tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// One sequence to generate: a choice of a request (a request with `n` choices sends `n`).
pub struct Job {
    /// The choice's index in its request.
    pub index: usize,
    pub prompt: Vec<i64>,
    pub options: GenerateOptions,
    /// Stop strings: the text ends before the first.
    pub stop: Vec<String>,
    /// Alternatives per token to report log-probabilities for, if asked.
    pub logprobs: Option<usize>,
    /// When the request came in.
    pub received: Instant,
    pub deadline: Instant,
    /// Where its events go; the request's other choices share it.
    pub events: UnboundedSender<Event>,
}

impl Job {
    /// Seconds it may take.
    fn limit(&self) -> f64 {
        self.deadline.duration_since(self.received).as_secs_f64()
    }
}

/// A token's text and log-probabilities, for requests that ask for them.
#[derive(Clone, Debug)]
pub struct TokenInfo {
    pub text: String,
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
}

/// What the engine tells a request about one of its choices.
#[derive(Debug)]
pub enum Event {
    /// Text now certain (possibly empty when only `tokens` is new).
    Piece {
        index: usize,
        text: String,
        tokens: Vec<TokenInfo>,
    },
    /// The choice ended.
    Done {
        index: usize,
        /// `stop` or `length`.
        finish: &'static str,
        completion_tokens: usize,
    },
    /// The choice failed: the request fails.
    Failed(ApiError),
}

/// What the HTTP side holds: the queue's entrance.
#[derive(Clone)]
pub struct EngineHandle {
    jobs: mpsc::Sender<Job>,
    metrics: Arc<Metrics>,
    max_queue: usize,
    draining: Arc<AtomicBool>,
}

impl EngineHandle {
    /// Queues `jobs` (one request's choices), or says why not: the queue is full, or the
    /// server is shutting down.
    pub fn submit(&self, jobs: Vec<Job>) -> Result<(), ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::shutting_down());
        }
        // Reserve the places first, so requests racing for the last ones cannot both pass.
        let count = jobs.len();
        let waiting = self.metrics.queued.fetch_add(count, Ordering::SeqCst);
        if waiting + count > self.max_queue {
            self.metrics.queued.fetch_sub(count, Ordering::SeqCst);
            self.metrics.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::busy(waiting));
        }
        for (sent, job) in jobs.into_iter().enumerate() {
            if self.jobs.send(job).is_err() {
                self.metrics
                    .queued
                    .fetch_sub(count - sent, Ordering::SeqCst);
                return Err(ApiError::shutting_down());
            }
        }
        Ok(())
    }

    /// Stops taking requests; those running finish, unless `grace` passes first.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }
}

/// Settings of the engine loop.
pub struct EngineOptions {
    pub max_queue: usize,
    /// After [`EngineHandle::drain`], requests still running after this are cancelled.
    pub grace: Duration,
}

/// Starts the engine thread over `generator`; it ends once every handle is dropped and
/// nothing is left to run.
pub fn start(
    generator: BatchGenerator,
    tokenizer: Arc<Tokenizer>,
    metrics: Arc<Metrics>,
    options: EngineOptions,
) -> std::io::Result<(EngineHandle, std::thread::JoinHandle<()>)> {
    let (jobs, queue) = mpsc::channel();
    let draining = Arc::new(AtomicBool::new(false));
    let handle = EngineHandle {
        jobs,
        metrics: metrics.clone(),
        max_queue: options.max_queue,
        draining: draining.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("rlx-engine".into())
        .spawn(move || {
            Engine {
                generator: &generator,
                tokenizer: &tokenizer,
                metrics,
                queue,
                draining,
                grace: options.grace,
            }
            .run()
        })?;
    Ok((handle, thread))
}

struct Engine<'a> {
    generator: &'a BatchGenerator,
    tokenizer: &'a Tokenizer,
    metrics: Arc<Metrics>,
    queue: mpsc::Receiver<Job>,
    draining: Arc<AtomicBool>,
    grace: Duration,
}

/// A job in the batch.
struct Running<'t> {
    job: Job,
    text: TextPieces<'t>,
    tokens: usize,
    last_token: Option<Instant>,
}

impl<'a> Engine<'a> {
    fn run(self) {
        let mut session = match self.generator.session() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rlx-serve: the engine cannot start: {e}");
                return;
            }
        };
        let mut waiting: VecDeque<Job> = VecDeque::new();
        let mut running: HashMap<RowId, Running<'a>> = HashMap::new();
        let mut drain_since: Option<Instant> = None;
        loop {
            if running.is_empty() && waiting.is_empty() {
                match self.queue.recv() {
                    Ok(job) => waiting.push_back(job),
                    Err(_) => return,
                }
            }
            waiting.extend(self.queue.try_iter());
            if self.draining.load(Ordering::SeqCst) {
                let since = *drain_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.grace {
                    let error = ApiError::shutting_down();
                    for (row, r) in running.drain() {
                        session.cancel(row);
                        fail(&r.job, error.clone());
                    }
                    for job in waiting.drain(..) {
                        self.metrics.queued.fetch_sub(1, Ordering::SeqCst);
                        fail(&job, error.clone());
                    }
                }
            }
            self.admit(&mut session, &mut waiting, &mut running);
            self.expire(&mut session, &mut running);
            self.metrics.set_running(running.len());
            if running.is_empty() {
                continue;
            }
            let start = Instant::now();
            let stepped = catch_unwind(AssertUnwindSafe(|| session.step()));
            match stepped {
                Ok(Ok(events)) => {
                    let tokens = events
                        .iter()
                        .filter(|e| matches!(e.1, RowEvent::Token { .. }))
                        .count();
                    self.metrics.step(tokens, start.elapsed());
                    for (row, event) in events {
                        self.route(&mut session, &mut running, row, event);
                    }
                    self.metrics.set_running(running.len());
                }
                Ok(Err(e)) => {
                    // The session dropped every row.
                    let error = ApiError::internal(format!("the model failed: {e}"));
                    for (_, r) in running.drain() {
                        fail(&r.job, error.clone());
                    }
                }
                Err(_) => {
                    let error = ApiError::internal("the engine panicked; its batch was reset");
                    for (_, r) in running.drain() {
                        fail(&r.job, error.clone());
                    }
                    match self.generator.session() {
                        Ok(fresh) => session = fresh,
                        Err(e) => {
                            eprintln!("rlx-serve: the engine cannot go on: {e}");
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Moves waiting jobs into free slots, dropping those whose client has gone.
    fn admit(
        &self,
        session: &mut BatchSession<'_>,
        waiting: &mut VecDeque<Job>,
        running: &mut HashMap<RowId, Running<'a>>,
    ) {
        while session.free_slots() > 0 {
            let Some(job) = waiting.pop_front() else {
                break;
            };
            self.metrics.queued.fetch_sub(1, Ordering::SeqCst);
            if job.events.is_closed() {
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if Instant::now() >= job.deadline {
                fail(&job, ApiError::timeout(job.limit()));
                continue;
            }
            match session.admit(&job.prompt, job.options.clone(), job.logprobs) {
                Ok(row) => {
                    self.metrics
                        .prompt_tokens
                        .fetch_add(job.prompt.len() as u64, Ordering::Relaxed);
                    let text = TextPieces::new(self.tokenizer, &job.stop);
                    running.insert(
                        row,
                        Running {
                            job,
                            text,
                            tokens: 0,
                            last_token: None,
                        },
                    );
                }
                Err(e) => fail(&job, ApiError::invalid(e.to_string())),
            }
        }
    }

    /// Cancels rows whose client has gone or whose time is up.
    fn expire(&self, session: &mut BatchSession<'_>, running: &mut HashMap<RowId, Running<'a>>) {
        let now = Instant::now();
        running.retain(|&row, r| {
            if r.job.events.is_closed() {
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            } else if now >= r.job.deadline {
                fail(&r.job, ApiError::timeout(r.job.limit()));
            } else {
                return true;
            }
            session.cancel(row);
            false
        });
    }

    fn route(
        &self,
        session: &mut BatchSession<'_>,
        running: &mut HashMap<RowId, Running<'a>>,
        row: RowId,
        event: RowEvent,
    ) {
        let Some(r) = running.get_mut(&row) else {
            return;
        };
        let index = r.job.index;
        match event {
            RowEvent::Token { token, logprob } => {
                let now = Instant::now();
                match r.last_token {
                    None => self.metrics.first_token(now - r.job.received),
                    Some(last) => self.metrics.inter_token(now - last),
                }
                r.last_token = Some(now);
                r.tokens += 1;
                let piece = match r.text.push(token) {
                    Ok(piece) => piece,
                    Err(e) => {
                        fail(&r.job, ApiError::internal(e.to_string()));
                        session.cancel(row);
                        running.remove(&row);
                        return;
                    }
                };
                let tokens = match logprob {
                    Some(lp) => vec![TokenInfo {
                        text: self.token_text(token),
                        logprob: lp.logprob,
                        top: lp
                            .top
                            .iter()
                            .map(|&(t, p)| (self.token_text(t), p))
                            .collect(),
                    }],
                    None => Vec::new(),
                };
                if !piece.text.is_empty() || !tokens.is_empty() {
                    let _ = r.job.events.send(Event::Piece {
                        index,
                        text: piece.text,
                        tokens,
                    });
                }
                if piece.stopped {
                    session.cancel(row);
                    if let Some(r) = running.remove(&row) {
                        self.done(r, "stop");
                    }
                }
            }
            RowEvent::Finished { reason, .. } => {
                if let Some(mut r) = running.remove(&row) {
                    match r.text.finish() {
                        Ok(rest) if !rest.is_empty() => {
                            let _ = r.job.events.send(Event::Piece {
                                index,
                                text: rest,
                                tokens: Vec::new(),
                            });
                        }
                        Ok(_) => {}
                        Err(e) => return fail(&r.job, ApiError::internal(e.to_string())),
                    }
                    let finish = match reason {
                        FinishReason::Stop => "stop",
                        FinishReason::Length | FinishReason::Capacity => "length",
                    };
                    self.done(r, finish);
                }
            }
        }
    }

    fn done(&self, r: Running<'_>, finish: &'static str) {
        self.metrics.finished.fetch_add(1, Ordering::Relaxed);
        let _ = r.job.events.send(Event::Done {
            index: r.job.index,
            finish,
            completion_tokens: r.tokens,
        });
    }

    fn token_text(&self, token: i64) -> String {
        u32::try_from(token)
            .ok()
            .and_then(|t| self.tokenizer.decode_text(&[t]).ok())
            .unwrap_or_default()
    }
}

fn fail(job: &Job, error: ApiError) {
    let _ = job.events.send(Event::Failed(error));
}

/// A seed for a request that gave none.
pub fn fresh_seed() -> u64 {
    use std::sync::atomic::AtomicU64;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // SplitMix64 of the time and a counter: distinct per request.
    let mut z = nanos
        ^ COUNTER
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .rotate_left(17);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

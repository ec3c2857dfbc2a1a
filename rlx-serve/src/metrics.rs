//! The server's counters, gauges and histograms, rendered in Prometheus' text format at
//! `GET /metrics`. A handful of atomics: a metrics crate would add a registry and a
//! dependency tree for what fits here in one screen.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A latency histogram: counts per bucket, the sum and the count.
#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(k) = BUCKETS.iter().position(|&b| seconds <= b) {
            self.counts[k] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, count) in BUCKETS.iter().zip(self.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

/// Everything `/metrics` reports.
#[derive(Default)]
pub struct Metrics {
    /// Responses by route and status.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// Sequences waiting for a slot.
    pub queued: AtomicUsize,
    running: AtomicUsize,
    pub prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    pub finished: AtomicU64,
    pub cancelled: AtomicU64,
    pub rejected: AtomicU64,
    time_to_first_token: Mutex<Histogram>,
    inter_token: Mutex<Histogram>,
    /// Generated tokens per second over recent steps (an exponential average), as f64 bits.
    tokens_per_second: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    pub fn request(&self, route: &str, status: u16) {
        *lock(&self.requests)
            .entry((route.to_string(), status))
            .or_default() += 1;
    }

    pub fn set_running(&self, rows: usize) {
        self.running.store(rows, Ordering::Relaxed);
    }

    pub fn first_token(&self, wait: Duration) {
        lock(&self.time_to_first_token).observe(wait.as_secs_f64());
    }

    pub fn inter_token(&self, gap: Duration) {
        lock(&self.inter_token).observe(gap.as_secs_f64());
    }

    /// A batch step that made `tokens` tokens in `took`.
    pub fn step(&self, tokens: usize, took: Duration) {
        self.generated_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
        let rate = tokens as f64 / took.as_secs_f64().max(1e-9);
        let old = f64::from_bits(self.tokens_per_second.load(Ordering::Relaxed));
        let new = if old == 0.0 {
            rate
        } else {
            0.9 * old + 0.1 * rate
        };
        self.tokens_per_second
            .store(new.to_bits(), Ordering::Relaxed);
    }

    /// The text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP rlx_requests_total HTTP responses by route and status.\n\
             # TYPE rlx_requests_total counter"
        );
        for ((route, status), count) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "rlx_requests_total{{route=\"{route}\",status=\"{status}\"}} {count}"
            );
        }
        let gauges = [
            (
                "rlx_queue_depth",
                "Sequences waiting for a slot of the batch.",
                self.queued.load(Ordering::Relaxed) as f64,
            ),
            (
                "rlx_running_sequences",
                "Sequences in the batch.",
                self.running.load(Ordering::Relaxed) as f64,
            ),
            (
                "rlx_generation_tokens_per_second",
                "Tokens generated per second over recent batch steps.",
                f64::from_bits(self.tokens_per_second.load(Ordering::Relaxed)),
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        let counters = [
            (
                "rlx_prompt_tokens_total",
                "Prompt tokens admitted.",
                &self.prompt_tokens,
            ),
            (
                "rlx_generated_tokens_total",
                "Tokens generated.",
                &self.generated_tokens,
            ),
            (
                "rlx_sequences_finished_total",
                "Sequences run to their end.",
                &self.finished,
            ),
            (
                "rlx_sequences_cancelled_total",
                "Sequences cancelled because their client went away.",
                &self.cancelled,
            ),
            (
                "rlx_requests_rejected_total",
                "Requests turned away because the queue was full.",
                &self.rejected,
            ),
        ];
        for (name, help, value) in counters {
            let value = value.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        lock(&self.time_to_first_token).render(
            &mut out,
            "rlx_time_to_first_token_seconds",
            "From joining the batch to the first token.",
        );
        lock(&self.inter_token).render(
            &mut out,
            "rlx_inter_token_seconds",
            "Between consecutive tokens of a sequence.",
        );
        out
    }
}

//! The OpenAI API's requests as this server reads them, checked into engine jobs, and its
//! responses and stream chunks.

use std::time::{Duration, Instant};

use rlx::generate::{ChatMessage, GenerateError, GenerateOptions, SamplingParams};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::{Event, Job, TokenInfo, fresh_seed};
use crate::error::ApiError;

/// Settings both generation endpoints take.
#[derive(Debug, Default, Deserialize)]
pub struct Sampling {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub max_tokens: Option<u64>,
    pub stop: Option<Stop>,
    pub seed: Option<i64>,
    pub n: Option<u32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// Beyond OpenAI's API, as llama.cpp's and vLLM's servers take them.
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub max_completion_tokens: Option<u64>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

impl ChatRequest {
    /// The conversation as the chat template takes it.
    pub fn conversation(&self) -> Result<Vec<ChatMessage>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::param("messages", "there are no messages"));
        }
        self.messages
            .iter()
            .map(|m| {
                let content = match &m.content {
                    None => String::new(),
                    Some(Content::Text(text)) => text.clone(),
                    Some(Content::Parts(parts)) => {
                        let mut text = String::new();
                        for part in parts {
                            match (part.kind.as_str(), &part.text) {
                                ("text", Some(t)) => text.push_str(t),
                                (kind, _) => {
                                    return Err(ApiError::param(
                                        "messages",
                                        format!("content parts of type `{kind}` are not supported: text only"),
                                    ));
                                }
                            }
                        }
                        text
                    }
                };
                if !matches!(m.role.as_str(), "system" | "developer" | "user" | "assistant" | "tool") {
                    return Err(ApiError::param("messages", format!("unknown role `{}`", m.role)));
                }
                // Templates know `system`; OpenAI's newer name for it is `developer`.
                let role = if m.role == "developer" { "system" } else { &m.role };
                Ok(ChatMessage::new(role, &content))
            })
            .collect()
    }
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub logprobs: Option<u32>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

/// `POST /v1/embeddings`.
#[derive(Debug, Deserialize)]
pub struct EmbeddingRequest {
    pub input: EmbeddingInput,
    pub model: Option<String>,
    pub encoding_format: Option<String>,
    pub dimensions: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    One(String),
    Many(Vec<String>),
}

/// What the model and server allow, for checking a request.
pub struct Limits {
    pub capacity: usize,
    pub vocab: usize,
    pub stop_tokens: Vec<i64>,
    pub timeout: Duration,
}

/// Most choices (`n`) a request may ask for.
const MOST_CHOICES: u32 = 16;
/// Most alternatives per token for log-probabilities (OpenAI's limits: 20 for chat, 5 for
/// completions).
pub const MOST_TOP_LOGPROBS: u32 = 20;

/// A request's checked settings: everything but its prompt.
pub struct Plan {
    pub stream: bool,
    pub include_usage: bool,
    pub n: usize,
    pub stop: Vec<String>,
    pub sampling: SamplingParams,
    pub max_tokens: Option<usize>,
    pub logprobs: Option<usize>,
}

impl Sampling {
    pub fn plan(&self, limits: &Limits, logprobs: Option<usize>) -> Result<Plan, ApiError> {
        let mut sampling = SamplingParams {
            seed: self.seed.map_or_else(fresh_seed, |s| s as u64),
            ..SamplingParams::default()
        };
        let ranged = |name: &'static str, value: Option<f32>, low: f32, high: f32| match value {
            Some(v) if !(low..=high).contains(&v) => Err(ApiError::param(
                name,
                format!("{name} must be within [{low}, {high}], not {v}"),
            )),
            _ => Ok(value),
        };
        if let Some(t) = ranged("temperature", self.temperature, 0.0, 2.0)? {
            sampling.temperature = t;
        }
        if let Some(p) = ranged("top_p", self.top_p, f32::MIN_POSITIVE, 1.0)? {
            sampling.top_p = p;
        }
        if let Some(p) = ranged("presence_penalty", self.presence_penalty, -2.0, 2.0)? {
            sampling.presence_penalty = p;
        }
        if let Some(p) = ranged("frequency_penalty", self.frequency_penalty, -2.0, 2.0)? {
            sampling.frequency_penalty = p;
        }
        if let Some(p) = ranged("min_p", self.min_p, 0.0, 1.0)? {
            sampling.min_p = p;
        }
        if let Some(p) = ranged("repetition_penalty", self.repetition_penalty, 0.01, 100.0)? {
            sampling.repetition_penalty = p;
        }
        if let Some(k) = self.top_k {
            sampling.top_k = (k as usize).min(limits.vocab);
        }
        let n = self.n.unwrap_or(1);
        if n == 0 || n > MOST_CHOICES {
            return Err(ApiError::param(
                "n",
                format!("n must be 1 to {MOST_CHOICES}, not {n}"),
            ));
        }
        let max_tokens = match self.max_tokens {
            Some(0) => {
                return Err(ApiError::param(
                    "max_tokens",
                    "max_tokens must be at least 1",
                ));
            }
            Some(m) if m as usize >= limits.capacity || m > u32::MAX as u64 => {
                return Err(ApiError::param(
                    "max_tokens",
                    format!(
                        "max_tokens is {m}, but the context holds {} tokens, prompt included",
                        limits.capacity
                    ),
                ));
            }
            Some(m) => Some(m as usize),
            None => None,
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) if v.len() > 4 => {
                return Err(ApiError::param("stop", "at most 4 stop sequences"));
            }
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.iter().any(|s| s.len() > 256) {
            return Err(ApiError::param(
                "stop",
                "stop sequences are at most 256 bytes",
            ));
        }
        Ok(Plan {
            stream: self.stream.unwrap_or(false),
            include_usage: self
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
            n: n as usize,
            stop,
            sampling,
            max_tokens,
            logprobs,
        })
    }
}

impl Plan {
    /// The engine jobs of `prompts` (choice `i * n + j` is prompt `i`'s `j`-th), all
    /// sending to `events`. Without `max_tokens`, `default_max` (or the rest of the
    /// context).
    pub fn jobs(
        &self,
        prompts: &[Vec<i64>],
        default_max: Option<usize>,
        limits: &Limits,
        events: &UnboundedSender<Event>,
    ) -> Result<Vec<Job>, ApiError> {
        let received = Instant::now();
        let mut jobs = Vec::with_capacity(prompts.len() * self.n);
        for prompt in prompts {
            let room = limits.capacity.saturating_sub(prompt.len());
            let options = GenerateOptions {
                max_tokens: self.max_tokens.or(default_max).unwrap_or(room).min(room),
                sampling: self.sampling,
                stop_tokens: limits.stop_tokens.clone(),
            };
            options
                .check(prompt, limits.vocab, limits.capacity)
                .map_err(request_error)?;
            // The library lets a prompt fill the context; an answer needs a position.
            if room == 0 {
                return Err(ApiError::too_long(format!(
                    "the prompt has {} tokens; the context holds {}, answer included",
                    prompt.len(),
                    limits.capacity
                )));
            }
            for j in 0..self.n {
                let mut options = options.clone();
                options.sampling.seed = options.sampling.seed.wrapping_add(j as u64);
                jobs.push(Job {
                    index: jobs.len(),
                    prompt: prompt.clone(),
                    options,
                    stop: self.stop.clone(),
                    logprobs: self.logprobs,
                    received,
                    deadline: received + limits.timeout,
                    events: events.clone(),
                });
            }
        }
        Ok(jobs)
    }
}

/// A generation error as the request's fault (a 4xx) or the server's.
fn request_error(e: GenerateError) -> ApiError {
    match e {
        GenerateError::Setting { .. } => ApiError::invalid(e.to_string()),
        GenerateError::EmptyPrompt | GenerateError::Token { .. } => {
            ApiError::param("prompt", e.to_string())
        }
        GenerateError::PromptTooLong { .. } => ApiError::too_long(e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

/// One choice being assembled for a non-streamed response.
#[derive(Default)]
pub struct Choice {
    pub text: String,
    pub tokens: Vec<TokenInfo>,
    pub finish: Option<&'static str>,
    pub completion_tokens: usize,
}

pub fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// Chat's `logprobs` object for `tokens`.
pub fn chat_logprobs(tokens: &[TokenInfo]) -> Value {
    let entry = |text: &str, logprob: f32| json!({"token": text, "logprob": logprob, "bytes": text.as_bytes()});
    let content: Vec<Value> = tokens
        .iter()
        .map(|t| {
            let mut e = entry(&t.text, t.logprob);
            e["top_logprobs"] = t.top.iter().map(|(s, p)| entry(s, *p)).collect();
            e
        })
        .collect();
    json!({ "content": content })
}

/// The legacy completions' `logprobs` object for `tokens`, whose text starts at `offset`
/// of the choice's text.
pub fn completion_logprobs(tokens: &[TokenInfo], mut offset: usize) -> Value {
    let mut text_offset = Vec::with_capacity(tokens.len());
    for t in tokens {
        text_offset.push(offset);
        offset += t.text.len();
    }
    json!({
        "tokens": tokens.iter().map(|t| t.text.clone()).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": tokens.iter().map(|t| {
            t.top.iter().map(|(s, p)| (s.clone(), json!(p))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

//! The HTTP routes: OpenAI's generation, embedding and model endpoints, health and
//! metrics, every error as an OpenAI error object.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use rlx::generate::ChatTemplate;
use rlx::models::minilm::SentenceEmbedder;
use rlx::tokenizer::Tokenizer;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::api::{
    ChatRequest, Choice, CompletionRequest, EmbeddingInput, EmbeddingRequest, Limits,
    MOST_TOP_LOGPROBS, Plan, Prompt, chat_logprobs, completion_logprobs, unix_time, usage,
};
use crate::engine::{EngineHandle, Event, fresh_seed};
use crate::error::ApiError;
use crate::metrics::Metrics;

/// An embedding model and the name it is served under.
pub struct Embedder {
    pub name: String,
    pub model: Arc<SentenceEmbedder>,
}

/// What every handler shares.
pub struct AppState {
    pub model_name: String,
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    pub limits: Limits,
    pub embedder: Option<Embedder>,
    pub metrics: Arc<Metrics>,
    pub created: u64,
}

/// Most prompts one completions request may carry, and most inputs one embeddings request.
const MOST_PROMPTS: usize = 64;
const MOST_INPUTS: usize = 2048;

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route_layer(middleware::from_fn_with_state(state.clone(), count))
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal("the request's handler panicked").into_response()
            },
        ))
        .with_state(state)
}

async fn count(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    state.metrics.request(&route, response.status().as_u16());
    response
}

async fn no_route(State(state): State<Arc<AppState>>, method: Method, uri: Uri) -> ApiError {
    state.metrics.request("other", 404);
    ApiError::no_route(StatusCode::NOT_FOUND, &format!("{method} {}", uri.path()))
}

async fn no_method(method: Method, uri: Uri) -> ApiError {
    ApiError::no_route(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("{method} {}", uri.path()),
    )
}

async fn health() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    let entry = |id: &str| json!({"id": id, "object": "model", "created": state.created, "owned_by": "rlx"});
    let mut data = vec![entry(&state.model_name)];
    if let Some(e) = &state.embedder {
        data.push(entry(&e.name));
    }
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// The body as JSON of `T`, or a 400 (413 past the body limit) saying why not.
fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| ApiError {
        status: r.status(),
        ..ApiError::invalid(r.body_text())
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid(format!("the body is not a valid request: {e}")))
}

fn check_model(state: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model {
        Some(name) if *name != state.model_name => Err(ApiError::unknown_model(name)),
        _ => Ok(()),
    }
}

fn request_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fresh_seed())
}

async fn chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut request: ChatRequest = parse(body)?;
    check_model(&state, &request.sampling.model)?;
    let template = state
        .template
        .as_ref()
        .ok_or_else(|| ApiError::invalid("the model has no chat template: use /v1/completions"))?;
    let text = template
        .render(&request.conversation()?, true)
        .map_err(|e| ApiError::param("messages", e.to_string()))?;
    let prompt: Vec<i64> = state
        .tokenizer
        .encode_plain(&text)
        .map_err(|e| ApiError::param("messages", e.to_string()))?
        .into_iter()
        .map(i64::from)
        .collect();
    let logprobs = match (request.logprobs, request.top_logprobs) {
        (Some(true), top) if top.unwrap_or(0) <= MOST_TOP_LOGPROBS => {
            Some(top.unwrap_or(0) as usize)
        }
        (Some(true), Some(top)) => {
            return Err(ApiError::param(
                "top_logprobs",
                format!("top_logprobs must be 0 to {MOST_TOP_LOGPROBS}, not {top}"),
            ));
        }
        (_, Some(_)) => {
            return Err(ApiError::param(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ));
        }
        _ => None,
    };
    if request.max_completion_tokens.is_some() {
        request.sampling.max_tokens = request.max_completion_tokens;
    }
    let plan = request.sampling.plan(&state.limits, logprobs)?;
    let prompt_tokens = prompt.len();
    generate(&state, plan, &[prompt], None, prompt_tokens, Kind::Chat).await
}

async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: CompletionRequest = parse(body)?;
    check_model(&state, &request.sampling.model)?;
    if request.echo == Some(true) {
        return Err(ApiError::param("echo", "echo is not supported"));
    }
    if request.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::param("suffix", "suffix is not supported"));
    }
    let encode = |text: &str| -> Result<Vec<i64>, ApiError> {
        Ok(state
            .tokenizer
            .encode(text)
            .map_err(|e| ApiError::param("prompt", e.to_string()))?
            .into_iter()
            .map(i64::from)
            .collect())
    };
    let prompts: Vec<Vec<i64>> = match &request.prompt {
        Prompt::Text(text) => vec![encode(text)?],
        Prompt::Texts(texts) => texts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
        Prompt::Tokens(tokens) => vec![tokens.clone()],
        Prompt::TokenLists(lists) => lists.clone(),
    };
    if prompts.is_empty() || prompts.len() > MOST_PROMPTS {
        return Err(ApiError::param(
            "prompt",
            format!("1 to {MOST_PROMPTS} prompts, not {}", prompts.len()),
        ));
    }
    let logprobs = match request.logprobs {
        Some(n) if n > 5 => {
            return Err(ApiError::param(
                "logprobs",
                format!("logprobs must be 0 to 5, not {n}"),
            ));
        }
        n => n.map(|n| n as usize),
    };
    let plan = request.sampling.plan(&state.limits, logprobs)?;
    let prompt_tokens = prompts.iter().map(Vec::len).sum();
    // OpenAI's default for this endpoint.
    generate(
        &state,
        plan,
        &prompts,
        Some(16),
        prompt_tokens,
        Kind::Completion,
    )
    .await
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

/// Queues the choices of `prompts` and answers with their text, whole or streamed.
async fn generate(
    state: &AppState,
    plan: Plan,
    prompts: &[Vec<i64>],
    default_max: Option<usize>,
    prompt_tokens: usize,
    kind: Kind,
) -> Result<Response, ApiError> {
    let (events, receiver) = mpsc::unbounded_channel();
    let jobs = plan.jobs(prompts, default_max, &state.limits, &events)?;
    drop(events);
    let choices = jobs.len();
    state.engine.submit(jobs)?;
    let reply = Reply {
        id: request_id(if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        }),
        created: unix_time(),
        model: state.model_name.clone(),
        kind,
        choices,
        prompt_tokens,
    };
    if plan.stream {
        Ok(reply.stream(receiver, plan.include_usage))
    } else {
        Ok(reply.whole(receiver).await)
    }
}

struct Reply {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    choices: usize,
    prompt_tokens: usize,
}

impl Reply {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
            (Kind::Completion, _) => "text_completion",
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": self.object(chunk),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "rlx",
            "choices": choices,
        })
    }

    /// A non-streamed response, once every choice has ended.
    async fn whole(self, mut receiver: mpsc::UnboundedReceiver<Event>) -> Response {
        let reply = self;
        {
            let mut choices: Vec<Choice> = (0..reply.choices).map(|_| Choice::default()).collect();
            while let Some(event) = receiver.recv().await {
                match event {
                    Event::Piece {
                        index,
                        text,
                        tokens,
                    } => {
                        choices[index].text.push_str(&text);
                        choices[index].tokens.extend(tokens);
                    }
                    Event::Done {
                        index,
                        finish,
                        completion_tokens,
                    } => {
                        choices[index].finish = Some(finish);
                        choices[index].completion_tokens = completion_tokens;
                    }
                    Event::Failed(error) => return error.into_response(),
                }
            }
            if choices.iter().any(|c| c.finish.is_none()) {
                return ApiError::internal("a choice ended without finishing").into_response();
            }
            let completion_tokens = choices.iter().map(|c| c.completion_tokens).sum();
            let logprobs = choices.iter().any(|c| !c.tokens.is_empty());
            let values = choices
                .iter()
                .enumerate()
                .map(|(index, c)| match reply.kind {
                    Kind::Chat => json!({
                        "index": index,
                        "message": {"role": "assistant", "content": c.text},
                        "logprobs": logprobs.then(|| chat_logprobs(&c.tokens)),
                        "finish_reason": c.finish,
                    }),
                    Kind::Completion => json!({
                        "index": index,
                        "text": c.text,
                        "logprobs": logprobs.then(|| completion_logprobs(&c.tokens, 0)),
                        "finish_reason": c.finish,
                    }),
                })
                .collect();
            let mut body = reply.envelope(false, values);
            body["usage"] = usage(reply.prompt_tokens, completion_tokens);
            axum::Json(body).into_response()
        }
    }

    /// A streamed response: server-sent events, one chunk per piece of text, `[DONE]` last.
    fn stream(self, mut receiver: mpsc::UnboundedReceiver<Event>, include_usage: bool) -> Response {
        let (out, events) = mpsc::channel::<Result<SseEvent, std::convert::Infallible>>(64);
        let reply = self;
        tokio::spawn(async move {
            let send = |value: Value| SseEvent::default().data(value.to_string());
            let mut offsets = vec![0usize; reply.choices];
            let mut completion_tokens = 0;
            if reply.kind == Kind::Chat {
                for index in 0..reply.choices {
                    let first = json!({"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
                    if out
                        .send(Ok(send(reply.envelope(true, vec![first]))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
            while let Some(event) = receiver.recv().await {
                let choice = match event {
                    Event::Piece {
                        index,
                        text,
                        tokens,
                    } => {
                        let logprobs = (!tokens.is_empty()).then(|| match reply.kind {
                            Kind::Chat => chat_logprobs(&tokens),
                            Kind::Completion => completion_logprobs(&tokens, offsets[index]),
                        });
                        offsets[index] += text.len();
                        match reply.kind {
                            Kind::Chat => {
                                json!({"index": index, "delta": {"content": text}, "logprobs": logprobs, "finish_reason": null})
                            }
                            Kind::Completion => {
                                json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": null})
                            }
                        }
                    }
                    Event::Done {
                        index,
                        finish,
                        completion_tokens: n,
                    } => {
                        completion_tokens += n;
                        match reply.kind {
                            Kind::Chat => {
                                json!({"index": index, "delta": {}, "logprobs": null, "finish_reason": finish})
                            }
                            Kind::Completion => {
                                json!({"index": index, "text": "", "logprobs": null, "finish_reason": finish})
                            }
                        }
                    }
                    Event::Failed(error) => {
                        let _ = out.send(Ok(send(error.body()))).await;
                        return;
                    }
                };
                if out
                    .send(Ok(send(reply.envelope(true, vec![choice]))))
                    .await
                    .is_err()
                {
                    // The client left: dropping the receiver cancels the choices.
                    return;
                }
            }
            if include_usage {
                let mut last = reply.envelope(true, Vec::new());
                last["usage"] = usage(reply.prompt_tokens, completion_tokens);
                if out.send(Ok(send(last))).await.is_err() {
                    return;
                }
            }
            let _ = out.send(Ok(SseEvent::default().data("[DONE]"))).await;
        });
        Sse::new(ReceiverStream::new(events))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
            .into_response()
    }
}

async fn embeddings(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: EmbeddingRequest = parse(body)?;
    let embedder = state
        .embedder
        .as_ref()
        .ok_or_else(|| ApiError::invalid("this server has no embedding model (--embeddings)"))?;
    match &request.model {
        Some(name) if *name != embedder.name => return Err(ApiError::unknown_model(name)),
        _ => {}
    }
    let inputs = match request.input {
        EmbeddingInput::One(text) => vec![text],
        EmbeddingInput::Many(texts) => texts,
    };
    if inputs.is_empty() || inputs.len() > MOST_INPUTS {
        return Err(ApiError::param(
            "input",
            format!("1 to {MOST_INPUTS} inputs, not {}", inputs.len()),
        ));
    }
    let base64 = match request.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::param(
                "encoding_format",
                format!("`float` or `base64`, not `{other}`"),
            ));
        }
    };
    let width = embedder.model.config().hidden_size;
    if let Some(d) = request.dimensions.filter(|&d| d as usize != width) {
        return Err(ApiError::param(
            "dimensions",
            format!("this model's embeddings have {width} dimensions, not {d}"),
        ));
    }
    let model = embedder.model.clone();
    let (vectors, tokens) = tokio::task::spawn_blocking(move || {
        let texts: Vec<&str> = inputs.iter().map(String::as_str).collect();
        model.embed_counted(&texts)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(e.to_string()))?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(axum::Json(json!({
        "object": "list",
        "data": data,
        "model": embedder.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}

//! `rlx-serve`: an OpenAI-compatible HTTP server for RLX's decoder models, with continuous
//! batching.
//!
//! ```text
//! rlx-serve [--model FILE.gguf|DIR] [--backend cpu|mlx] [--host H] [--port P]
//!     [--context N] [--slots N] [--prefill-chunk N] [--max-queue N] [--timeout SECS]
//!     [--quant] [--quantize FORMAT] [--kv-cache f32|int8] [--embeddings minilm|DIR|none]
//! ```
//!
//! Without `--model` it serves SmolLM2-135M-Instruct (fetched by name and hash on first
//! use). Routes: `POST /v1/chat/completions`, `POST /v1/completions`,
//! `POST /v1/embeddings`, `GET /v1/models`, `GET /health`, `GET /metrics`.

mod api;
mod engine;
mod error;
mod metrics;
mod server;

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rlx::backend::Backend;
use rlx::generate::BatchGenerator;
use rlx::gguf::GgmlType;
use rlx::ir::ActivationPrecision;
use rlx::models::fetch::model_or_smollm2;
use rlx::models::llama::{KvCacheFormat, LlamaFiles, LoraAdapter, Quantization};
use rlx::models::minilm::{ModelFiles, SentenceEmbedder};

use crate::api::Limits;
use crate::engine::EngineOptions;
use crate::metrics::Metrics;
use crate::server::{AppState, Embedder};

// MLX builds and frees many small host objects for every op it runs: glibc's malloc made
// decoding on a GPU up to a third slower than mimalloc, which the server takes for every
// allocation in the process, MLX's C++ ones included (decision 039).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An OpenAI-compatible HTTP server for RLX models, with continuous batching.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// A GGUF file or a Hugging Face folder; SmolLM2-135M-Instruct (fetched) if absent.
    #[arg(long)]
    model: Option<PathBuf>,
    /// The name clients ask for; the file's name without its extension if absent.
    #[arg(long)]
    model_name: Option<String>,
    /// Where the model runs.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "mlx"])]
    backend: String,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (printed when the server is ready).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Positions each sequence's cache holds, prompt and answer together.
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// Sequences the batch runs at once [default: 4 on the CPU, 8 on MLX]. Each step pads
    /// every slot to the longest prompt chunk in it, so on a CPU fewer slots can serve more.
    #[arg(long)]
    slots: Option<usize>,
    /// Prompt tokens a sequence prefills per step, so running streams keep flowing.
    #[arg(long, default_value_t = 64)]
    prefill_chunk: usize,
    /// Sequences that may wait for a slot; more get 429.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// Seconds a request may take from arrival to its last token.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Seconds running requests get to finish after a shutdown signal.
    #[arg(long, default_value_t = 30.0)]
    shutdown_grace: f64,
    /// Keep the file's quantized weights in their blocks (int8 activations).
    #[arg(long)]
    quant: bool,
    /// Quantize float weights into this block format at load (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1).
    #[arg(long)]
    quantize: Option<String>,
    /// The key/value caches' format.
    #[arg(long, default_value = "f32", value_parser = ["f32", "int8"])]
    kv_cache: String,
    /// A LoRA adapter in Hugging Face PEFT's format, applied to every request.
    #[arg(long)]
    adapter: Option<PathBuf>,
    /// The embedding model: all-MiniLM-L6-v2 fetched (`minilm`), a folder holding it, or
    /// `none`.
    #[arg(long, default_value = "minilm")]
    embeddings: String,
}

impl Args {
    fn quantization(&self) -> Result<Option<Quantization>, Box<dyn Error>> {
        let int8 = Quantization::from(ActivationPrecision::Int8);
        let mut quant = self.quant.then_some(int8);
        if let Some(name) = &self.quantize {
            let format = GgmlType::from_name(name)
                .filter(|f| rlx::gguf::quantizes(*f))
                .ok_or(format!(
                    "--quantize {name:?}: one of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1"
                ))?;
            quant = Some(int8.quantizing(format));
        }
        if self.kv_cache == "int8" {
            quant = Some(quant.unwrap_or(int8).with_kv_cache(KvCacheFormat::Int8));
        }
        Ok(quant)
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    match args.backend.as_str() {
        #[cfg(feature = "mlx")]
        "mlx" => serve(&rlx::mlx::MlxBackend::default(), &args),
        "cpu" => serve(&rlx::cpu::CpuBackend::default(), &args),
        other => Err(format!("the backend {other} is not built in").into()),
    }
}

fn serve<B: Backend<Executable: 'static>>(backend: &B, args: &Args) -> Result<(), Box<dyn Error>> {
    let start = Instant::now();
    let path = model_or_smollm2(args.model.as_deref())?;
    eprintln!("rlx-serve: loading {}", path.display());
    let files = LlamaFiles::open(&path)?;
    let tokenizer = Arc::new(files.tokenizer()?);
    let template = match files.chat_template(&tokenizer) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("rlx-serve: no chat completions: {e}");
            None
        }
    };
    let context = args.context.min(files.config()?.context_length);
    let slots = args
        .slots
        .unwrap_or(if args.backend == "cpu" { 4 } else { 8 });
    let decoder = match &args.adapter {
        None => files.batch_decoder(backend, context, slots, args.quantization()?)?,
        Some(dir) => {
            let mut config = files.config_for(args.quantization()?)?;
            let adapter = LoraAdapter::load_peft(dir, &config)?;
            config.lora = Some(adapter.config().clone());
            let decoder = files.batch_decoder_for(backend, config, context, slots)?;
            adapter.bind(decoder.compiled(), &decoder.config().model)?;
            eprintln!("rlx-serve: adapter {}", dir.display());
            decoder
        }
    };
    let vocab = rlx::generate::BatchDecoder::vocab_size(&decoder);
    let generator =
        BatchGenerator::new(backend, Arc::new(decoder))?.with_prefill_chunk(args.prefill_chunk);
    let embedder = match args.embeddings.as_str() {
        "none" => None,
        which => {
            let dir = (which != "minilm").then(|| PathBuf::from(which));
            let files = ModelFiles::locate(dir.as_deref())?;
            let model = SentenceEmbedder::on_backend(&args.backend, &files)?;
            Some(Embedder {
                name: "all-MiniLM-L6-v2".into(),
                model: Arc::new(model),
            })
        }
    };
    let model_name = args.model_name.clone().unwrap_or_else(|| {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_else(|| "model".into());
        name.strip_suffix(".gguf")
            .map(str::to_string)
            .unwrap_or(name)
    });
    let metrics = Arc::new(Metrics::default());
    let (engine, engine_thread) = engine::start(
        generator,
        tokenizer.clone(),
        metrics.clone(),
        EngineOptions {
            max_queue: args.max_queue,
            grace: Duration::from_secs_f64(args.shutdown_grace.max(0.0)),
        },
    )?;
    let state = Arc::new(AppState {
        model_name: model_name.clone(),
        engine: engine.clone(),
        limits: Limits {
            capacity: context,
            vocab,
            stop_tokens: tokenizer
                .stop_tokens()
                .iter()
                .map(|&t| i64::from(t))
                .collect(),
            timeout: Duration::from_secs_f64(args.timeout.max(0.001)),
        },
        tokenizer,
        template,
        embedder,
        metrics,
        created: api::unix_time(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
        eprintln!(
            "rlx-serve: {model_name} on {} ({} slots of {context} positions), ready in {:.1} s",
            args.backend,
            slots,
            start.elapsed().as_secs_f64()
        );
        eprintln!("rlx-serve: listening on http://{}", listener.local_addr()?);
        let app = server::router(state);
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown_signal().await;
                eprintln!("rlx-serve: shutting down");
                engine.drain();
            })
            .await
    })?;
    // Every handle is gone: the engine ends once nothing is left to run.
    runtime.shutdown_timeout(Duration::from_secs(1));
    let _ = engine_thread.join();
    eprintln!("rlx-serve: stopped");
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}

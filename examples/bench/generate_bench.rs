//! Text-generation speed of SmolLM2-135M-Instruct (f32 weights dequantized from its GGUF,
//! or with `--quant` its projections kept in the file's Q4_1 blocks, their products taking
//! int8 activations as llama.cpp's do unless `--activations exact`) on one backend, in the
//! output format of `shared/bench/generate_bench.py` so the figures compare line by line
//! with llama.cpp's and transformers':
//!
//! ```text
//! cargo run --release --example generate_bench -- [--backend cpu|mlx] [--reps 5]
//!     [--capacity 1024] [--mlx-mode eager|lazy|compiled] [--quant [--activations int8|exact]]
//!     [--quantize Q8_0|Q4_0|Q4_1|Q5_0|Q5_1] [--kv-cache f32|int8] [--profile] [--perplexity]
//!     [--model FILE.gguf] [--batches 1,8[,N...]] [--cuda-graphs on|off]
//! generate_bench backend=cpu batch=1 prompt=128 phase=prefill tok_s=..
//! generate_bench backend=cpu batch=1 prompt=512 phase=prefill tok_s=..
//! generate_bench backend=cpu batch=1 prompt=128 phase=decode new=128 tok_s=..
//! generate_bench backend=cpu batch=1 prompt=128 phase=generate new=128 tok_s=..
//! generate_bench backend=cpu batch=1 prompt=128 phase=generate new=128 sampling=greedy tok_s=..
//! generate_bench backend=cpu batch=8 prompt=128 phase=prefill tok_s=..
//! generate_bench backend=cpu batch=8 prompt=128 phase=decode new=128 tok_s=..
//! ```
//!
//! Prefill: one step over the whole prompt (its logits for the last token only), in a
//! fresh context. Decode: 128 one-token steps after a 128-token prompt, each feeding the
//! argmax of the step before (taken on the host, inside the timing). Generate: the same
//! through `rlx::generate` (decode steps per second), each token drawn by the sampling op
//! on the backend (temperature 0.8, top-p 0.95, seeded), then again greedy
//! (`sampling=greedy`: the argmax on the backend). Batch 8 (or any N above 1): eight
//! prompts prefilled in one `llama_batch_step`, then one token a row per step (tokens/s of
//! all rows). Figures are medians of `--reps` repetitions after one warm-up. `--batches`
//! lists the batch sizes timed (1 and 8 by default; 1 alone for a kernel trace, say; 16 for
//! a server's load). The prompt's tokens are fixed pseudo-random ids:
//! the time of a step does not depend on which tokens it reads. The caches hold
//! `--capacity` positions (1,024; at least 256). `--mlx-mode` overrides MLX's default mode
//! (compiled on a GPU, lazy on a CPU). `--model` times another GGUF file of the family
//! (the variants `generate_bench.py` makes: Q8_0, Q4_K_M, F16); its tensors' formats are
//! printed to stderr. `--quantize FORMAT` (implies `--quant`) quantizes the file's float
//! projections into `FORMAT` as they load (an F16 file, say), beside the blocks it keeps;
//! `--kv-cache int8` (with `--quant`) keeps the key/value caches in int8. On an NVIDIA GPU
//! MLX records the kernels into CUDA graphs, as `09_generate` has it (decision 040);
//! `--cuda-graphs off` launches them one by one (RLX's default for other processes).
//! `--profile` (batch 1) prints where a 128-token prefill and a decoding step after 128
//! positions spend their time: per op, then the slowest kernels (`profile phase=..`).
//!
//! `--perplexity` instead scores the shared prose text (`tests/data/llm/perplexity.json`:
//! 1,093 tokens, no BOS) as `generate_bench.py` does, one decode step a token (so every
//! product is a decode step's), the log-softmax in f64:
//! `perplexity engine=rlx backend=cpu weights=Q4_1 activations=int8 value=..`.

use std::error::Error;
use std::time::Instant;

use std::sync::Arc;

use rlx::backend::Backend;
use rlx::generate::{Decoder, GenerateOptions, Generator, SamplingParams};
use rlx::gguf::{GgmlType, Gguf};
use rlx::ir::ActivationPrecision;
use rlx::models::fetch::model_or_smollm2;
use rlx::models::llama::{
    KvCacheFormat, LlamaBatchConfig, LlamaBatchStep, LlamaDecoder, LlamaStep, Quantization,
};
use rlx::tensor::HostTensor;
use rlx_testkit::bench::{argmax, flag, median};

// MLX builds and frees many small host objects for every op it runs: glibc's malloc made
// decoding on a GPU up to a third slower than mimalloc, which this binary takes for every
// allocation in the process, MLX's C++ ones included (decision 039).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Where one decode step (one token after 128 cached positions) spends its time: the ops
/// taking the most, summed over their kernels, then the slowest kernels.
fn profile_step(
    step: &LlamaStep,
    phase: &str,
    tokens: &[i64],
    at: i64,
) -> Result<(), Box<dyn Error>> {
    let runs = if tokens.len() > 1 { 5 } else { 20 };
    let input = HostTensor::from_vec(tokens.to_vec(), [1, tokens.len()])?;
    let last = tokens.len() as i64 - 1;
    let (pos, last) = (HostTensor::scalar(at), HostTensor::scalar(last));
    let inputs = [
        ("input_ids", input.view()),
        ("pos", pos.view()),
        ("last", last.view()),
    ];
    let report = step.executable().profile(&inputs, &[], runs)?;
    let per_step = |d: std::time::Duration| d.as_secs_f64() * 1e3 / runs as f64;
    println!(
        "profile phase={phase} total_ms_per_step={:.2}",
        per_step(report.total)
    );
    for (op, time, count) in report.by_op().into_iter().take(10) {
        println!(
            "profile phase={phase} op={op} ms_per_step={:.3} kernels={}",
            per_step(time),
            count
        );
    }
    let Some(cpu) = step.executable_as::<rlx::cpu::CpuExecutable>() else {
        return Ok(());
    };
    let graph = cpu.graph();
    let mut steps: Vec<_> = report.steps.iter().filter(|s| s.node.is_some()).collect();
    steps.sort_by_key(|s| std::cmp::Reverse(s.time));
    for s in steps.into_iter().take(8) {
        let node = &graph[s.node.expect("kept steps with a node")];
        println!(
            "profile phase={phase} kernel={} ms_per_step={:.3} out={}",
            s.op,
            per_step(s.time),
            node.ty
        );
    }
    Ok(())
}

/// What the command line asks for.
#[derive(Clone, Copy)]
struct Options<'a> {
    reps: usize,
    capacity: usize,
    profiled: bool,
    /// Blocks kept (and float projections quantized into a format), with this activation
    /// precision.
    quant: Option<Quantization>,
    perplexity: bool,
    model: Option<&'a str>,
    /// The batch sizes timed, in order, each once.
    batches: &'a [usize],
}

fn bench<B: Backend<Executable: 'static>>(
    label: &str,
    backend: &B,
    options: &Options<'_>,
) -> Result<(), Box<dyn Error>> {
    let Options {
        capacity,
        quant,
        perplexity,
        model,
        batches,
        ..
    } = *options;
    let path = model_or_smollm2(model.map(std::path::Path::new))?;
    let file = Gguf::open(&path)?;
    let mut formats = std::collections::BTreeMap::new();
    for tensor in file.tensors() {
        *formats.entry(tensor.kind.name()).or_insert(0) += 1;
    }
    eprintln!("{}: tensors by format {formats:?}", path.display());
    // The single sequence's decoder, made only when perplexity or batch 1 asks for it.
    let decoder = || -> Result<Arc<LlamaDecoder>, Box<dyn Error>> {
        Ok(Arc::new(match quant {
            Some(quantization) => {
                let floats = quantization
                    .float_weights
                    .map_or(String::new(), |f| format!(", float ones quantized to {f}"));
                eprintln!(
                    "weights: projections in the file's blocks{floats} ({} activations), \
                     the rest float32",
                    quantization.activations.name()
                );
                LlamaDecoder::from_gguf_quantized(backend, &file, capacity, quantization)?
            }
            None => LlamaDecoder::from_gguf(backend, &file, capacity)?,
        }))
    };
    if perplexity {
        // The variant's name as the file names it (`SmolLM2-135M-Instruct.Q8_0.gguf`).
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let variant = stem.rsplit('.').next().unwrap_or(stem);
        let weights = match quant {
            Some(Quantization {
                float_weights: Some(format),
                ..
            }) => format!("{variant}->{format}"),
            Some(_) => variant.to_string(),
            None => "f32".to_string(),
        };
        let weights = match quant.map(|q| q.kv_cache) {
            Some(KvCacheFormat::Int8) => format!("{weights}+kv_int8"),
            _ => weights,
        };
        let activations = quant.map(|q| q.activations);
        return score(label, decoder()?.as_ref(), &weights, activations);
    }
    let mut model = rlx::models::llama::LlamaConfig::from_gguf(&file)?;
    let vocab = model.vocab_size as u64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let tokens: Vec<i64> = (0..512)
        .map(|_| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % vocab) as i64
        })
        .collect();
    if batches.contains(&1) {
        single(label, backend, options, decoder()?, &tokens)?;
    }
    let batched_sizes: Vec<usize> = batches.iter().copied().filter(|&rows| rows > 1).collect();
    if let (Some(quantization), false) = (quant, batched_sizes.is_empty()) {
        model.keep_gguf_blocks(&file);
        quantization.apply_to(&mut model)?;
    }
    for rows in batched_sizes {
        batched(label, backend, options, &file, &model, &tokens, rows)?;
    }
    Ok(())
}

/// Batch 1: prefill of 128 and 512 tokens, decoding, and generation sampled and greedy.
fn single<B: Backend<Executable: 'static>>(
    label: &str,
    backend: &B,
    options: &Options<'_>,
    decoder: Arc<LlamaDecoder>,
    tokens: &[i64],
) -> Result<(), Box<dyn Error>> {
    let Options {
        reps,
        capacity,
        profiled,
        ..
    } = *options;
    for prompt in [128, 512].into_iter().filter(|p| *p <= capacity) {
        let mut times = Vec::new();
        for rep in 0..=reps {
            let mut ctx = decoder.new_context()?;
            let t = Instant::now();
            decoder.step(&mut ctx, &tokens[..prompt], 0, prompt - 1)?;
            if rep > 0 {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        println!(
            "generate_bench backend={label} batch=1 prompt={prompt} phase=prefill tok_s={:.1}",
            prompt as f64 / median(times)
        );
    }
    if profiled {
        profile_step(decoder.compiled(), "prefill", &tokens[..128], 0)?;
        profile_step(decoder.compiled(), "decode", &tokens[..1], 128)?;
    }
    let (prompt, new) = (128, 128);
    let mut times = Vec::new();
    for rep in 0..=reps {
        let mut ctx = decoder.new_context()?;
        let logits = decoder.step(&mut ctx, &tokens[..prompt], 0, prompt - 1)?;
        let mut next = argmax(&logits)?;
        let t = Instant::now();
        for i in 0..new {
            let logits = decoder.step(&mut ctx, &[next], prompt + i, 0)?;
            next = argmax(&logits)?;
        }
        if rep > 0 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    println!(
        "generate_bench backend={label} batch=1 prompt={prompt} phase=decode new={new} tok_s={:.1}",
        new as f64 / median(times)
    );
    // The whole generation path: steps, penalties and the sampling op on the backend;
    // sampled (temperature 0.8, top-p 0.95), then greedy (the argmax alone).
    let generator = Generator::new(backend, decoder.clone())?;
    for (sampling, label_suffix) in [
        (
            SamplingParams {
                temperature: 0.8,
                top_p: 0.95,
                ..SamplingParams::default()
            },
            "",
        ),
        (SamplingParams::greedy(), " sampling=greedy"),
    ] {
        let mut rates = Vec::new();
        for rep in 0..=reps {
            let options = GenerateOptions {
                max_tokens: new + 1,
                sampling: SamplingParams {
                    seed: rep as u64,
                    ..sampling
                },
                stop_tokens: Vec::new(),
            };
            let mut generation = generator.generate(&tokens[..prompt], options)?;
            for token in generation.by_ref() {
                token?;
            }
            if rep > 0 {
                rates.push(generation.stats().decode_tokens_per_second());
            }
        }
        println!(
            "generate_bench backend={label} batch=1 prompt={prompt} phase=generate new={new}{label_suffix} tok_s={:.1}",
            median(rates)
        );
    }
    Ok(())
}

/// Perplexity of the shared prose text, one decode step a token.
fn score(
    label: &str,
    decoder: &LlamaDecoder,
    weights: &str,
    quant: Option<ActivationPrecision>,
) -> Result<(), Box<dyn Error>> {
    let tokens = rlx_testkit::llm::ids(&rlx_testkit::llm::reference("perplexity")["ids"]);
    let mut ctx = decoder.new_context()?;
    let mut nll = 0f64;
    for pos in 0..tokens.len() - 1 {
        let logits = decoder.step(&mut ctx, &tokens[pos..=pos], pos, 0)?;
        let row = logits.as_slice::<f32>()?;
        let max = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, v| m.max(f64::from(*v)));
        let sum: f64 = row.iter().map(|v| (f64::from(*v) - max).exp()).sum();
        nll += sum.ln() + max - f64::from(row[tokens[pos + 1] as usize]);
    }
    let activations = quant.map_or("exact", ActivationPrecision::name);
    println!(
        "perplexity engine=rlx backend={label} weights={weights} activations={activations} \
         value={:.3}",
        (nll / (tokens.len() - 1) as f64).exp()
    );
    Ok(())
}

/// A batch of `rows` through `llama_batch_step` (`model`: the file's configuration, its
/// blocks kept when quantized): `rows` 128-token prompts (different tokens) prefilled in
/// one step, then 128 steps of one token per row, each row's argmax taken on the host.
fn batched<B: Backend<Executable: 'static>>(
    label: &str,
    backend: &B,
    options: &Options<'_>,
    file: &Gguf,
    model: &rlx::models::llama::LlamaConfig,
    tokens: &[i64],
    rows: usize,
) -> Result<(), Box<dyn Error>> {
    let (prompt, new) = (128, 128);
    let Options { reps, capacity, .. } = *options;
    let config = LlamaBatchConfig {
        model: model.clone(),
        capacity,
        slots: rows,
    };
    let vocab = config.model.vocab_size;
    let step = LlamaBatchStep::compile(backend, &config)?;
    rlx::models::llama::load_gguf_checkpoint(&step, &config.model, file)?;
    let run = |ctx: &mut rlx::backend::Context, ids: Vec<i64>, seq: usize, pos: i64, last: i64| {
        let ids = HostTensor::from_vec(ids, [rows, seq])?;
        let pos = HostTensor::from_vec(vec![pos; rows], [rows])?;
        let last = HostTensor::from_vec(vec![last; rows], [rows])?;
        let [logits] = step.run_in_outputs(
            ctx,
            &[
                ("input_ids", ids.view()),
                ("pos", pos.view()),
                ("last", last.view()),
            ],
        )?;
        let next: Vec<i64> = logits
            .as_slice::<f32>()?
            .chunks(vocab)
            .map(|row| {
                row.iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map_or(0, |(i, _)| i as i64)
            })
            .collect();
        Ok::<_, Box<dyn Error>>(next)
    };
    // Row r reads the prompt tokens rotated by r, so the rows differ.
    let prompts: Vec<i64> = (0..rows)
        .flat_map(|r| (0..prompt).map(move |i| tokens[(i + 16 * r) % tokens.len()]))
        .collect();
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        let mut ctx = step.new_context()?;
        let t = Instant::now();
        let mut next = run(&mut ctx, prompts.clone(), prompt, 0, prompt as i64 - 1)?;
        let prefilled = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for i in 0..new {
            next = run(&mut ctx, next, 1, (prompt + i) as i64, 0)?;
        }
        if rep > 0 {
            prefill.push(prefilled);
            decode.push(t.elapsed().as_secs_f64());
        }
    }
    println!(
        "generate_bench backend={label} batch={rows} prompt={prompt} phase=prefill tok_s={:.1}",
        (rows * prompt) as f64 / median(prefill)
    );
    println!(
        "generate_bench backend={label} batch={rows} prompt={prompt} phase=decode new={new} tok_s={:.1}",
        (rows * new) as f64 / median(decode)
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = flag(&args, "--reps").map_or(Ok(5), str::parse)?;
    if reps == 0 {
        return Err("--reps takes at least 1 (the figures are medians of the repetitions)".into());
    }
    let mut batches: Vec<usize> = Vec::new();
    for size in flag(&args, "--batches").unwrap_or("1,8").split(',') {
        match size.trim().parse::<usize>() {
            Ok(rows) if (1..=256).contains(&rows) => {
                if !batches.contains(&rows) {
                    batches.push(rows);
                }
            }
            _ => {
                return Err(format!("--batches takes sizes from 1 to 256, not {size:?}").into());
            }
        }
    }
    let profiled = args.iter().any(|a| a == "--profile");
    let capacity = flag(&args, "--capacity").map_or(Ok(1024), str::parse)?;
    let perplexity = args.iter().any(|a| a == "--perplexity");
    let quantize = match flag(&args, "--quantize") {
        None => None,
        Some(name) => Some(
            GgmlType::from_name(name)
                .filter(|f| rlx::gguf::quantizes(*f))
                .ok_or(format!(
                    "--quantize {name:?}: one of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1"
                ))?,
        ),
    };
    let activations = match (
        args.iter().any(|a| a == "--quant") || quantize.is_some(),
        flag(&args, "--activations"),
    ) {
        (false, None) => None,
        (false, Some(_)) => return Err("--activations goes with --quant".into()),
        (true, None | Some("int8")) => Some(ActivationPrecision::Int8),
        (true, Some("exact")) => Some(ActivationPrecision::Exact),
        (true, Some(other)) => return Err(format!("unknown --activations {other:?}").into()),
    };
    let kv_cache = match flag(&args, "--kv-cache") {
        None | Some("f32") => KvCacheFormat::F32,
        Some("int8") => KvCacheFormat::Int8,
        Some(other) => return Err(format!("unknown --kv-cache {other:?} (f32, int8)").into()),
    };
    let quant = activations.map(|a| Quantization {
        activations: a,
        float_weights: quantize,
        kv_cache,
    });
    if quant.is_none() && kv_cache != KvCacheFormat::F32 {
        return Err("--kv-cache goes with --quant".into());
    }
    let capacity = if perplexity {
        capacity.max(1100)
    } else {
        capacity
    };
    if capacity < 256 {
        return Err("--capacity must be at least 256 (a 128-token prompt and 128 more)".into());
    }
    let options = Options {
        reps,
        capacity,
        profiled,
        quant,
        perplexity,
        model: flag(&args, "--model"),
        batches: &batches,
    };
    match flag(&args, "--backend").unwrap_or("cpu") {
        "cpu" => bench("cpu", &rlx::cpu::CpuBackend::default(), &options),
        #[cfg(feature = "mlx")]
        "mlx" => {
            use rlx::mlx::{MlxBackend, MlxMode};
            let mode = match flag(&args, "--mlx-mode") {
                None => MlxMode::default(),
                Some("eager") => MlxMode::Eager,
                Some("lazy") => MlxMode::Lazy,
                Some("compiled") => MlxMode::Compiled,
                Some(other) => return Err(format!("unknown --mlx-mode {other:?}").into()),
            };
            // As 09_generate decodes (decision 040); `--cuda-graphs off` times launching
            // kernels one by one, as encoders run. The environment's MLX_USE_CUDA_GRAPHS
            // wins over both.
            let graphs = match flag(&args, "--cuda-graphs").unwrap_or("on") {
                "on" => true,
                "off" => false,
                other => return Err(format!("--cuda-graphs {other:?}: on or off").into()),
            };
            let graphs = rlx::mlx::set_cuda_graphs(graphs)?;
            eprintln!("cuda graphs: {}", if graphs { "on" } else { "off" });
            let options = Options {
                profiled: false,
                ..options
            };
            bench("mlx", &MlxBackend::new(mode), &options)
        }
        other => Err(format!("unknown or unavailable backend {other:?} (cpu, mlx)").into()),
    }
}

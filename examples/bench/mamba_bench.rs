//! Speed of a Mamba decoder the size of `state-spaces/mamba-130m-hf` (768 wide, 24 blocks,
//! a state of 16 per channel, 50,280 tokens) with seeded weights (the time of a step does
//! not depend on the values), in the output format of `bench/mamba_bench.py`, which times
//! transformers on the same config:
//!
//! ```text
//! cargo run --release --example mamba_bench -- [--backend cpu|mlx] [--reps 3]
//!     [--contexts 128,2048] [--new 32] [--layers 24] [--profile]
//! mamba_bench engine=rlx backend=cpu prompt=128 phase=prefill tok_s=..
//! mamba_bench engine=rlx backend=cpu prompt=512 phase=prefill tok_s=..
//! mamba_bench engine=rlx backend=cpu context=128 phase=decode tok_s=..
//! mamba_bench engine=rlx backend=cpu context=2048 phase=decode tok_s=..
//! ```
//!
//! Prefill: one step over the whole prompt, in a fresh context: the selective scan runs
//! the recurrence over all of it at once. Decode: `--new` one-token steps after a context
//! of each length (fed in chunks of 512), each feeding the argmax of the step before (on
//! the host, inside the timing): the carried state is the same size at any context, so
//! the figures should agree. Medians of `--reps` repetitions after one warm-up.
//! `--profile` first prints where a 128-token prefill and a one-token step spend their
//! time, by op (the CPU times each kernel).

use std::error::Error;
use std::time::Instant;

use rlx::backend::Backend;
use rlx::generate::Decoder;
use rlx::models::mamba::{MambaConfig, MambaDecoder};
use rlx::tensor::HostTensor;
use rlx_testkit::bench::{argmax, count, counts, flag, median};
use rlx_testkit::rng::Rng;

/// Seeded weights of a trained model's scale: projections `±1/√fan_in`, norms near 1,
/// decay rates `log(1..=N)` as Mamba initializes them, step-size biases near softplus⁻¹(0.01).
fn init(spec: &rlx::params::ParamSpec, rng: &mut Rng) -> HostTensor {
    let shape = spec
        .static_shape()
        .expect("a Mamba config has static weights");
    let len: usize = shape.iter().product();
    let mut uniform = || rng.uniform(-1.0, 1.0);
    let fan_in = *shape.last().unwrap_or(&1) as f64;
    let values: Vec<f32> = (0..len)
        .map(|i| {
            let v = if spec.name.ends_with("norm.weight") || spec.name.ends_with("norm_f.weight") {
                1.0 + 0.05 * uniform()
            } else if spec.name.ends_with("A_log") {
                ((i % shape[1]) as f64 + 1.0).ln()
            } else if spec.name.ends_with("dt_proj.bias") {
                -4.6 + 0.1 * uniform()
            } else {
                uniform() / fan_in.sqrt()
            };
            v as f32
        })
        .collect();
    HostTensor::from_vec(values, shape).expect("the spec's own shape")
}

/// The ops taking the most time in `runs` steps of `tokens` tokens, summed over kernels.
fn profile(decoder: &MambaDecoder, tokens: usize, label: &str) -> Result<(), Box<dyn Error>> {
    let runs = 5;
    let ids = HostTensor::from_vec(vec![7i64; tokens], [1, tokens])?;
    let (pos, last) = (
        HostTensor::scalar(0i64),
        HostTensor::scalar(tokens as i64 - 1),
    );
    let inputs = [
        ("input_ids", ids.view()),
        ("pos", pos.view()),
        ("last", last.view()),
    ];
    let report = decoder
        .compiled()
        .executable()
        .profile(&inputs, &[], runs)?;
    let per_step = |d: std::time::Duration| d.as_secs_f64() * 1e3 / runs as f64;
    println!("profile {label} total_ms={:.2}", per_step(report.total));
    for (op, time, count) in report.by_op().into_iter().take(10) {
        println!(
            "profile {label} op={op} ms={:.3} kernels={count}",
            per_step(time)
        );
    }
    Ok(())
}

struct Options {
    profiled: bool,
    reps: usize,
    contexts: Vec<usize>,
    new: usize,
    layers: usize,
}

fn bench<B: Backend<Executable: 'static>>(
    label: &str,
    backend: &B,
    options: &Options,
) -> Result<(), Box<dyn Error>> {
    let mut config = MambaConfig::from_hf_json(
        r#"{"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
            "vocab_size": 50280, "state_size": 16, "expand": 2, "conv_kernel": 4}"#,
    )?;
    config.num_layers = options.layers;
    let longest = options.contexts.iter().copied().max().unwrap_or(0).max(512);
    let decoder = MambaDecoder::compile(backend, config, longest + options.new + 1)?;
    let mut rng = Rng(1);
    decoder
        .compiled()
        .init_weights(|spec| init(spec, &mut rng))?;
    let token = |i: usize| ((i * 7919 + 13) % 50_000) as i64;
    if options.profiled {
        profile(&decoder, 128, "prefill")?;
        profile(&decoder, 1, "decode")?;
    }

    for prompt in [128usize, 512] {
        let ids: Vec<i64> = (0..prompt).map(token).collect();
        let mut times = Vec::new();
        for rep in 0..=options.reps {
            let mut ctx = decoder.new_context()?;
            let start = Instant::now();
            decoder.step(&mut ctx, &ids, 0, prompt - 1)?;
            if rep > 0 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        println!(
            "mamba_bench engine=rlx backend={label} prompt={prompt} phase=prefill tok_s={:.1}",
            prompt as f64 / median(times)
        );
    }

    for &context in &options.contexts {
        let mut times = Vec::new();
        for rep in 0..=options.reps {
            let mut ctx = decoder.new_context()?;
            let ids: Vec<i64> = (0..context).map(token).collect();
            let mut logits = None;
            for (c, chunk) in ids.chunks(512).enumerate() {
                logits = Some(decoder.step(&mut ctx, chunk, c * 512, chunk.len() - 1)?);
            }
            let mut next = argmax(&logits.ok_or("an empty context")?)?;
            let start = Instant::now();
            for i in 0..options.new {
                next = argmax(&decoder.step(&mut ctx, &[next], context + i, 0)?)?;
            }
            if rep > 0 {
                times.push(start.elapsed().as_secs_f64());
            }
        }
        println!(
            "mamba_bench engine=rlx backend={label} context={context} phase=decode tok_s={:.1}",
            options.new as f64 / median(times)
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let number = |name: &str, default: usize| count(&args, name, default);
    let contexts = counts(&args, "--contexts", &[128, 2048])?;
    let options = Options {
        profiled: args.iter().any(|a| a == "--profile"),
        reps: number("--reps", 3)?.max(1),
        contexts,
        new: number("--new", 32)?.max(1),
        layers: number("--layers", 24)?.max(1),
    };
    match flag(&args, "--backend").unwrap_or("cpu") {
        "cpu" => bench("cpu", &rlx::cpu::CpuBackend::default(), &options),
        #[cfg(feature = "mlx")]
        "mlx" => bench("mlx", &rlx::mlx::MlxBackend::default(), &options),
        other => Err(format!("unknown or unavailable backend {other:?} (cpu, mlx)").into()),
    }
}

//! Memory and time of a LoRA training step of SmolLM2-135M-Instruct (rank-8 adapters on
//! every projection, the base frozen, AdamW) on the CPU, keeping every activation and
//! recomputing each layer's in the backward pass (`TrainConfig::recompute_activations`).
//!
//! For each shape, the CPU plan's figures: `lora_memory recompute=off|on batch=B seq=S
//! arena_mib=A peak_live_mib=L`, the arena the planner lays out for the step and the most
//! bytes live at any one point of it (no placement can use less). Weights, adapters and
//! optimizer state are outside the arena. Then, unless `--steps 0`, the median time of
//! `--steps` steps of the first shape on random tokens, all labelled:
//! `lora_step recompute=off|on batch=B seq=S ms_per_step=T tok_s=R`.
//!
//! ```text
//! cargo run --release --example lora_memory_bench -- [--shapes 8x64,8x256] [--steps 5]
//!     [--model FILE.gguf|DIR]
//! ```

use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

use rlx::backend::Backend;
use rlx::cpu::CpuBackend;
use rlx::models::fetch::model_or_smollm2;
use rlx::models::llama::{LlamaConfig, LlamaFiles, LlamaLoss, LoraAdapter, LoraConfig, LoraTarget};
use rlx::tensor::HostTensor;
use rlx::train::{Optimizer, TrainConfig, Trainer, training_graph};
use rlx_testkit::rng::Rng;

struct Args {
    shapes: Vec<(usize, usize)>,
    steps: usize,
    model: Option<PathBuf>,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let usage = "usage: lora_memory_bench [--shapes BxS,..] [--steps N] [--model FILE.gguf|DIR]";
    let mut args = Args {
        shapes: vec![(8, 64), (8, 256)],
        steps: 5,
        model: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value; {usage}"))
        };
        match flag.as_str() {
            "--shapes" => {
                args.shapes = value()?
                    .split(',')
                    .map(|s| {
                        let (b, t) = s.split_once('x').ok_or(format!("bad shape {s:?}"))?;
                        Ok((b.parse()?, t.parse()?))
                    })
                    .collect::<Result<_, Box<dyn Error>>>()?;
            }
            "--steps" => args.steps = value()?.parse()?,
            "--model" => args.model = Some(value()?.into()),
            _ => return Err(format!("unknown flag {flag}; {usage}").into()),
        }
    }
    if args.shapes.is_empty() || args.shapes.iter().any(|&(b, t)| b == 0 || t == 0) {
        return Err(format!("shapes must be at least 1x1; {usage}").into());
    }
    Ok(args)
}

fn train_config(config: &LlamaConfig, recompute: bool) -> TrainConfig {
    let train = TrainConfig::new(Optimizer::adamw(1e-3)).train_only(config.adapter_params());
    if recompute {
        train.recompute_activations()
    } else {
        train
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let path = model_or_smollm2(args.model.as_deref())?;
    let files = LlamaFiles::open(&path)?;
    let mut config: LlamaConfig = files.config()?;
    let lora = LoraConfig::new(8, 16.0, &LoraTarget::ALL);
    config.lora = Some(lora.clone());
    let graph = LlamaLoss::build(&config)?;
    let cpu = CpuBackend::default();
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);

    for recompute in [false, true] {
        let step = training_graph(&graph, "loss", &train_config(&config, recompute))?;
        let exe = cpu.compile(&step.graph)?;
        for &(batch, seq) in &args.shapes {
            let report = exe.plan_report(&[("batch", batch), ("seq", seq)])?;
            println!(
                "lora_memory recompute={} batch={batch} seq={seq} arena_mib={:.1} peak_live_mib={:.1}",
                if recompute { "on" } else { "off" },
                mib(report.peak_bytes),
                mib(report.lower_bound)
            );
        }
    }
    if args.steps == 0 {
        return Ok(());
    }

    let (batch, seq) = args.shapes[0];
    let mut rng = Rng(5);
    let tokens: Vec<i64> = (0..batch * (seq + 1))
        .map(|_| rng.int(0, config.vocab_size as i64 - 1))
        .collect();
    let (mut ids, mut labels) = (Vec::new(), Vec::new());
    for row in tokens.chunks(seq + 1) {
        ids.extend_from_slice(&row[..seq]);
        labels.extend_from_slice(&row[1..]);
    }
    let ids = HostTensor::from_vec(ids, [batch, seq])?;
    let labels = HostTensor::from_vec(labels, [batch, seq])?;
    for recompute in [false, true] {
        let mut trainer = Trainer::new(&cpu, &graph, "loss", train_config(&config, recompute))?;
        files.load_weights(
            trainer.executable(),
            &LlamaLoss::manifest(&config)?,
            &config,
        )?;
        LoraAdapter::init(&config, lora.clone(), 1)?.bind_trainer(&mut trainer, &config)?;
        let batch_inputs = [("input_ids", ids.view()), ("labels", labels.view())];
        trainer.step(&batch_inputs)?; // plans the shape
        let mut times = Vec::with_capacity(args.steps);
        for _ in 0..args.steps {
            let start = Instant::now();
            trainer.step(&batch_inputs)?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "lora_step recompute={} batch={batch} seq={seq} ms_per_step={:.1} tok_s={:.1}",
            if recompute { "on" } else { "off" },
            median * 1e3,
            (batch * seq) as f64 / median
        );
    }
    Ok(())
}

//! Tutorial 07: training a classifier from scratch.
//!
//! ```text
//! cargo run --release --example 07_train_digits -- [--backend cpu|mlx] [--epochs N] [--seed S] [--out DIR] [--data FILE]
//! ```
//!
//! An MLP 64 → 256 → 256 → 10 (ReLU) learns scikit-learn's handwritten digits (1797 images
//! of 8×8 pixels): cross-entropy loss, AdamW (lr 1e-3, weight decay 0.01), batches of 64.
//! The model and its loss are ordinary typed RLX code (`rlx_testkit::digits::model`, in
//! `testkit/digits.rs`, shared with tutorial 08); [`rlx::train::Trainer`] turns them into one
//! compiled graph per step — forward, backward and the optimizer's update — and the same
//! code trains on the CPU or on MLX.
//!
//! The data set ships inside the `scikit-learn==1.9.1` wheel. The first run downloads that
//! wheel with pip into `~/.cache/rlx` (or `$RLX_CACHE_DIR`), extracts `digits.csv` and checks
//! its sha256; `--data` uses a copy you already have (checked the same way). Pixels are
//! divided by 16. The split and the batches are those of PyTorch's reference
//! (`../shared/bench/train_bench.py`): rows permuted by numpy's `default_rng(0)`, the first
//! 1437 for training in the same batches every epoch, the last 360 for testing. `--seed`
//! (default 2026) seeds the initial weights.
//!
//! Writes the trained weights and optimizer state (`digits-<backend>.safetensors`, which
//! [`Trainer::load`] resumes from) and the loss curve (`digits-<backend>-loss.svg`) to
//! `--out` (default `target/digits`). The last line on stdout is
//! `digits backend=B epochs=N test_accuracy=A`.

use std::error::Error;
use std::io::IsTerminal;
use std::path::PathBuf;

use rlx::backend::Backend;
use rlx::train::{Optimizer, TrainConfig, Trainer};
use rlx_testkit::digits::{self, Digits};
use rlx_testkit::report;

const BATCH: usize = 64;

struct Args {
    backend: String,
    epochs: usize,
    seed: u64,
    out: PathBuf,
    data: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: 07_train_digits [--backend cpu|mlx] [--epochs N] [--seed S] [--out DIR] [--data FILE]";
    let mut args = Args {
        backend: "cpu".into(),
        epochs: 30,
        seed: 2026,
        out: PathBuf::from("target/digits"),
        data: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value; {usage}"))
        };
        match arg.as_str() {
            "--backend" => args.backend = value()?,
            "--epochs" => args.epochs = value()?.parse().map_err(|e| format!("--epochs: {e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--out" => args.out = value()?.into(),
            "--data" => args.data = Some(value()?.into()),
            _ => return Err(usage.into()),
        }
    }
    Ok(args)
}

/// The progress line of `epoch`.
fn progress(epoch: usize, epochs: usize, done: usize, total: usize, loss: f64) {
    report::progress(&format!("epoch {epoch:>3}/{epochs}"), done, total, loss);
}

fn train<B: Backend>(backend: &B, args: &Args, data: &Digits) -> Result<f64, Box<dyn Error>>
where
    B::Executable: 'static,
{
    let graph = digits::model()?;
    let config = TrainConfig::new(Optimizer::adamw(1e-3).weight_decay(0.01));
    let mut trainer = Trainer::new(backend, &graph, "loss", config)?;
    let (train_rows, test_rows) = digits::split(data);
    digits::init(args.seed, &mut |name, value| {
        Ok(trainer.set_weight(name, value)?)
    })?;

    let terminal = std::io::stderr().is_terminal();
    let steps = train_rows.len().div_ceil(BATCH);
    let mut epoch_losses = Vec::with_capacity(args.epochs);
    let rows = &train_rows;
    for epoch in 1..=args.epochs {
        let mut total = 0.0;
        for (step, chunk) in rows.chunks(BATCH).enumerate() {
            let (pixels, labels) = digits::batch(data, chunk)?;
            let loss = trainer.step(&[("pixels", pixels.view()), ("labels", labels.view())])?;
            total += loss * chunk.len() as f64;
            if terminal {
                progress(
                    epoch,
                    args.epochs,
                    step + 1,
                    steps,
                    total / ((step + 1) * BATCH).min(rows.len()) as f64,
                );
            }
        }
        let mean = total / rows.len() as f64;
        epoch_losses.push(mean);
        if terminal {
            progress(epoch, args.epochs, steps, steps, mean);
            eprintln!();
        } else {
            eprintln!("epoch {epoch}/{} loss {mean:.4}", args.epochs);
        }
    }

    // Evaluate with the trained weights in an inference executable of the same graph.
    let accuracy = digits::accuracy(backend, data, &test_rows, &mut |name| {
        Ok(trainer.weight(name)?)
    })?;

    std::fs::create_dir_all(&args.out)?;
    let weights = args
        .out
        .join(format!("digits-{}.safetensors", args.backend));
    trainer.save(&weights)?;
    let curve = args.out.join(format!("digits-{}-loss.svg", args.backend));
    std::fs::write(
        &curve,
        report::loss_svg("training loss per epoch", &epoch_losses),
    )?;
    eprintln!("wrote {} and {}", weights.display(), curve.display());
    Ok(accuracy)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let data = digits::load(args.data.as_deref())?;
    let accuracy = match args.backend.as_str() {
        "cpu" => train(&rlx::cpu::CpuBackend::default(), &args, &data)?,
        #[cfg(feature = "mlx")]
        "mlx" => train(
            &rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled),
            &args,
            &data,
        )?,
        other => return Err(format!("unknown or unavailable backend {other:?}").into()),
    };
    println!(
        "digits backend={} epochs={} test_accuracy={accuracy:.4}",
        args.backend, args.epochs
    );
    Ok(())
}

//! Times all-MiniLM-L6-v2 (embeddings, 6 layers, pooling) on random token ids.
//!
//! ```text
//! cargo run --release --example minilm_bench -- [--backend cpu|mlx] [--precision f32|tf32|f16|bf16]
//!     [--mode lazy|compiled|eager] [--model-dir DIR] [--shapes 1x16,8x128] [--runs N] [--profile]
//! ```
//!
//! `--precision` picks the MLX backend's [`Precision`](rlx::mlx::Precision) (TF32 needs
//! `MLX_ENABLE_TF32=1` in the environment). `--profile` also prints, per shape, the time
//! per op over 10 runs. Each run takes token ids from host memory and returns the
//! embeddings (not the hidden states) to host memory.
//!
//! Prints one line per shape: `minilm backend=cpu batch=N seq=S ms=M sent_per_s=R`, the
//! median of at least 10 runs (and at least 2 s), or of exactly `--runs N`, after 3 warm-up
//! runs. Compare with
//! `../shared/bench/minilm_bench.py` (ONNX Runtime, PyTorch) in the same session.

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rlx::models::minilm::{ModelFiles, SentenceEmbedder};
use rlx_testkit::bench::{SEED, dense_batch, parse_shapes};

fn main() -> Result<(), Box<dyn Error>> {
    let mut backend = "cpu".to_string();
    let mut model_dir: Option<PathBuf> = None;
    let mut shapes = vec![(1, 16), (1, 128), (8, 128), (32, 128)];
    let mut profile = false;
    let mut precision = "f32".to_string();
    let mut mode = String::new();
    let mut runs: Option<usize> = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--backend" => backend = it.next().ok_or("--backend needs cpu or mlx")?,
            "--model-dir" => {
                model_dir = Some(it.next().ok_or("--model-dir needs a folder")?.into())
            }
            "--shapes" => {
                let list = it.next().ok_or("--shapes needs e.g. 1x16,8x128")?;
                shapes = parse_shapes(&list)?;
            }
            "--profile" => profile = true,
            "--precision" => precision = it.next().ok_or("--precision needs f32|tf32|f16|bf16")?,
            "--mode" => mode = it.next().ok_or("--mode needs lazy|compiled|eager")?,
            "--runs" => runs = Some(it.next().ok_or("--runs needs a count")?.parse()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let files = ModelFiles::locate(model_dir.as_deref())?;
    let model = match backend.as_str() {
        #[cfg(feature = "mlx")]
        "mlx" => {
            use rlx::mlx::{MlxBackend, MlxMode, Precision};
            let precision = match precision.as_str() {
                "f32" => Precision::F32,
                "tf32" => Precision::Tf32,
                "f16" => Precision::F16,
                "bf16" => Precision::BF16,
                other => return Err(format!("unknown precision {other}").into()),
            };
            let mode = match mode.as_str() {
                "" => MlxMode::default(),
                "lazy" => MlxMode::Lazy,
                "compiled" => MlxMode::Compiled,
                "eager" => MlxMode::Eager,
                other => return Err(format!("unknown mode {other}").into()),
            };
            SentenceEmbedder::new(&MlxBackend::new(mode).with_precision(precision), &files)?
        }
        _ if precision != "f32" || !mode.is_empty() => {
            return Err("--precision and --mode need --backend mlx".into());
        }
        _ => SentenceEmbedder::on_backend(&backend, &files)?,
    };
    let backend = [backend.as_str(), mode.as_str(), precision.as_str()]
        .iter()
        .filter(|part| !part.is_empty() && **part != "f32")
        .copied()
        .collect::<Vec<_>>()
        .join("-");

    let mut state = SEED;
    for (batch, seq) in shapes {
        let inputs = dense_batch(batch, seq, &mut state)?;
        for _ in 0..3 {
            model.embeddings(&inputs)?;
        }
        let mut times = Vec::new();
        let started = Instant::now();
        let enough = |n: usize, elapsed: Duration| match runs {
            Some(runs) => n >= runs.max(1),
            None => n >= 10 && elapsed >= Duration::from_secs(2),
        };
        while !enough(times.len(), started.elapsed()) {
            let t = Instant::now();
            model.embeddings(&inputs)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        println!(
            "minilm backend={backend} batch={batch} seq={seq} ms={ms:.2} sent_per_s={:.1}",
            batch as f64 * 1e3 / ms
        );
        if profile {
            println!("{}", model.profile(&inputs, 10)?);
        }
    }
    Ok(())
}

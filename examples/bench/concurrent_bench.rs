//! Throughput of one shared MiniLM model: one run at a time on two worker threads, against
//! two runs at once (two caller threads sharing the compiled model and its weights) on one
//! worker thread each. Next to `bench/concurrent_ort.py`, which times ONNX Runtime the same
//! two ways.
//!
//! ```text
//! cargo run --release --example concurrent_bench -- [--shapes 1x16,1x128,8x128] [--seconds 3]
//! ```
//!
//! Prints per shape
//! `concurrent engine=rlx batch=B seq=S one_run_2_threads_per_s=X two_runs_1_thread_per_s=Y ratio=R`
//! where `R = Y / X`.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::models::minilm::{Batch, ModelFiles, SentenceEmbedder};
use rlx_testkit::bench::{SEED, dense_batch, parse_shapes};

/// Runs per second when `callers` threads call `model.embeddings` in a loop for `time`.
fn throughput(
    model: &Arc<SentenceEmbedder>,
    batch: &Arc<Batch>,
    callers: usize,
    time: Duration,
) -> Result<f64, Box<dyn Error>> {
    for _ in 0..2 {
        model.embeddings(batch)?;
    }
    let started = Instant::now();
    let workers: Vec<_> = (0..callers)
        .map(|_| {
            let (model, batch) = (Arc::clone(model), Arc::clone(batch));
            std::thread::spawn(move || {
                let mut runs = 0usize;
                while started.elapsed() < time {
                    model.embeddings(&batch).map_err(|e| e.to_string())?;
                    runs += 1;
                }
                Ok::<usize, String>(runs)
            })
        })
        .collect();
    let mut runs = 0;
    for worker in workers {
        runs += worker.join().map_err(|_| "a caller panicked")??;
    }
    Ok(runs as f64 / started.elapsed().as_secs_f64())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut shapes = vec![(1usize, 16usize), (1, 128), (8, 128)];
    let mut seconds = 3.0f64;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--shapes" => {
                let list = it.next().ok_or("--shapes needs e.g. 1x16,8x128")?;
                shapes = parse_shapes(&list)?;
            }
            "--seconds" => seconds = it.next().ok_or("--seconds needs a number")?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let time = Duration::from_secs_f64(seconds);
    let files = ModelFiles::locate(None)?;
    let on = |threads| {
        let backend = CpuBackend::new(CpuOptions {
            threads,
            ..CpuOptions::default()
        });
        SentenceEmbedder::new(&backend, &files).map(Arc::new)
    };
    let (two_threads, one_thread) = (on(2)?, on(1)?);

    let mut state = SEED;
    for (batch, seq) in shapes {
        let inputs = Arc::new(dense_batch(batch, seq, &mut state)?);
        let one = throughput(&two_threads, &inputs, 1, time)?;
        let two = throughput(&one_thread, &inputs, 2, time)?;
        println!(
            "concurrent engine=rlx batch={batch} seq={seq} one_run_2_threads_per_s={one:.2} \
             two_runs_1_thread_per_s={two:.2} ratio={:.2}",
            two / one
        );
    }
    Ok(())
}

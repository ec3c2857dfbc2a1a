//! One BERT-style encoder block (hidden 384, 12 heads, FFN 1536, GELU-erf, post-LayerNorm)
//! run through RLX's MLX backend in each mode, and through the CPU executor for reference.
//! `bench/mlx_block.py` runs the same block through MLX's Python API.
//!
//! ```text
//! cargo run --release --example mlx_block_bench -- [--batch 8] [--seq 128] [--runs 10]
//! ```
//!
//! Prints `mlx_block impl=rlx-B mode=M io=IO batch=N seq=S ms=MEDIAN` per configuration:
//! the median of `--runs` timed runs after 3 warm-up runs. With `io=host` each run is a
//! full `Executable::run` (input upload, evaluation, output read-back); with `io=device`
//! (MLX only) the input is an MLX array already on the device and the output stays there
//! (`Executable::run_values` with an MLX array), which is what `bench/mlx_block.py` times by default.

use std::error::Error;
use std::time::Instant;

use rlx::cpu::CpuBackend;
use rlx::tensor::HostTensor;
use rlx_testkit::block::{Block, BlockConfig, weights};

fn median_ms(model: &mut Block, x: &HostTensor, runs: usize) -> Result<f64, Box<dyn Error>> {
    for _ in 0..3 {
        model.run(x)?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        model.run(x)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn main() -> Result<(), Box<dyn Error>> {
    let (mut batch, mut seq, mut runs) = (8usize, 128usize, 10usize);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || -> Result<usize, Box<dyn Error>> {
            Ok(args.next().ok_or(format!("{arg} needs a value"))?.parse()?)
        };
        match arg.as_str() {
            "--batch" => batch = value()?,
            "--seq" => seq = value()?,
            "--runs" => runs = value()?.max(1),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let x: Vec<f32> = (0..batch * seq * 384)
        .map(|i| ((i % 23) as f32 - 11.0) / 11.0)
        .collect();
    let x = HostTensor::from_vec(x, [batch, seq, 384])?;

    let mut cpu = Block::compile(&CpuBackend::default(), &BlockConfig)?;
    cpu.init_weights(weights)?;
    let ms = median_ms(&mut cpu, &x, runs)?;
    println!("mlx_block impl=rlx-cpu mode=thunks io=host batch={batch} seq={seq} ms={ms:.2}");

    #[cfg(feature = "mlx")]
    {
        use rlx::mlx::{Array, MlxBackend, MlxExecutable, MlxMode};
        let device = rlx::mlx::Device::preferred();
        let on_device = Array::from_tensor(x.view())?;
        Array::eval(&[&on_device])?;
        let on_device = rlx::backend::Value::from(on_device);
        for (name, mode) in [("lazy", MlxMode::Lazy), ("compiled", MlxMode::Compiled)] {
            let mut mlx = Block::compile(&MlxBackend::new(mode), &BlockConfig)?;
            mlx.init_weights(weights)?;
            let ms = median_ms(&mut mlx, &x, runs)?;
            println!(
                "mlx_block impl=rlx-mlx-{device} mode={name} io=host batch={batch} seq={seq} ms={ms:.2}"
            );
            let exe = mlx
                .executable_as::<MlxExecutable>()
                .ok_or("an MLX model has an MLX executable")?;
            let device_run =
                || rlx::backend::Executable::run_values(exe, &[("x", &on_device)], &[]).map(drop);
            for _ in 0..3 {
                device_run()?;
            }
            let mut times = Vec::with_capacity(runs);
            for _ in 0..runs {
                let start = Instant::now();
                device_run()?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
            times.sort_by(f64::total_cmp);
            let ms = times[times.len() / 2];
            println!(
                "mlx_block impl=rlx-mlx-{device} mode={name} io=device batch={batch} seq={seq} ms={ms:.2}"
            );
        }
    }
    Ok(())
}

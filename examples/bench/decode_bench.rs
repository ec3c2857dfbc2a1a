//! A decode step over a key/value cache held in a context: the new row written in place at
//! its position, attention over the filled rows only. Prints the median time of a step at
//! several filled lengths of one cache, and the bytes of the step's working memory (the
//! arena), which holds no copy of the cache:
//!
//! ```text
//! cargo run --release --example decode_bench -- [--cap 4096] [--heads 8] [--dim 64]
//! decode cap=4096 filled=64 us_per_step=… arena_bytes=… cache_bytes=…
//! ```

use std::time::Instant;

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::tensor::HostTensor;

fn flag(args: &[String], name: &str, default: usize) -> Result<usize, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or(format!("{name} takes a number")),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let cap = flag(&args, "--cap", 4096)?;
    let heads = flag(&args, "--heads", 8)?;
    let dim = flag(&args, "--dim", 64)?;
    let threads = flag(&args, "--threads", CpuOptions::default().threads)?;
    let graph = rlx_testkit::testing::decode_step(cap, heads, dim);
    let exe = CpuBackend::new(CpuOptions {
        threads,
        ..CpuOptions::default()
    })
    .compile(&graph)?;
    let arena = exe.plan_report(&[])?.peak_bytes;
    let cache_bytes = 2 * heads * cap * dim * 4;
    let mut ctx = exe.new_context()?;
    let values: Vec<f32> = (0..heads * dim).map(|i| (i % 13) as f32 / 13.0).collect();
    let row = HostTensor::from_vec(values, [1, heads, 1, dim])?;
    let mut pos = HostTensor::from_vec(vec![0i32], [])?;
    let mut outputs = Vec::new();
    let mut filled = 1;
    for target in [64, 512, 2048, cap] {
        if target > cap {
            continue;
        }
        // Fill up to `target - 1` rows, then time steps that write row `target - 1` again.
        while filled < target {
            pos.as_mut_slice::<i32>()?[0] = filled as i32 - 1;
            let inputs = [
                ("q", row.view()),
                ("k_row", row.view()),
                ("v_row", row.view()),
                ("pos", pos.view()),
            ];
            exe.run_in_into(&mut ctx, &inputs, &[], &mut outputs)?;
            filled += 1;
        }
        pos.as_mut_slice::<i32>()?[0] = target as i32 - 1;
        let inputs = [
            ("q", row.view()),
            ("k_row", row.view()),
            ("v_row", row.view()),
            ("pos", pos.view()),
        ];
        let mut times = Vec::new();
        for _ in 0..15 {
            let started = Instant::now();
            for _ in 0..20 {
                exe.run_in_into(&mut ctx, &inputs, &[], &mut outputs)?;
            }
            times.push(started.elapsed().as_secs_f64() / 20.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "decode cap={cap} filled={target} us_per_step={:.1} arena_bytes={arena} cache_bytes={cache_bytes}",
            times[times.len() / 2] * 1e6
        );
    }
    Ok(())
}

//! A decode step over a key/value cache held in a context: the new row written in place at
//! its position, attention over the filled rows only. Prints the median time of a step at
//! several filled lengths of one cache, and the bytes of the step's working memory (the
//! arena), which holds no copy of the cache. Beside it, the same step written without
//! states: the caches passed in as inputs and returned as outputs every step, as a decode
//! loop had to before contexts (`host_us_per_step`):
//!
//! ```text
//! cargo run --release --example decode_bench -- [--cap 4096] [--heads 8] [--dim 64] [--backend cpu|mlx-lazy|mlx-compiled]
//! decode backend=cpu cap=4096 filled=64 us_per_step=… host_us_per_step=… arena_bytes=… cache_bytes=…
//! ```
//!
//! The arena figure is the CPU's (MLX reports 0).

use std::time::Instant;

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{Graph, Output};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

/// `step` with its states turned into inputs (`k`, `v`) and its writes into outputs.
fn without_states(step: &Graph) -> Result<Graph, Box<dyn std::error::Error>> {
    let (mut nodes, mut outputs, writes) = step.clone().into_parts();
    for node in nodes.iter_mut().filter(|n| n.op == Op::State) {
        node.op = Op::Input;
    }
    outputs.extend(writes.into_iter().map(|w| Output {
        name: format!("new_{}", w.name),
        node: w.node,
    }));
    Ok(Graph::from_parts(nodes, outputs)?)
}

/// The median of `samples` seconds, in microseconds.
fn median_us(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2] * 1e6
}

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
    let which = args
        .iter()
        .position(|a| a == "--backend")
        .and_then(|i| args.get(i + 1))
        .map_or("cpu", String::as_str);
    let graph = rlx_testkit::testing::decode_step(cap, heads, dim);
    let (exe, host, arena): (Box<dyn Executable>, Box<dyn Executable>, usize) = match which {
        "cpu" => {
            let backend = CpuBackend::new(CpuOptions {
                threads,
                ..CpuOptions::default()
            });
            let exe = backend.compile(&graph)?;
            let arena = exe.plan_report(&[])?.peak_bytes;
            let host = backend.compile(&without_states(&graph)?)?;
            (Box::new(exe), Box::new(host), arena)
        }
        #[cfg(feature = "mlx")]
        "mlx-lazy" | "mlx-compiled" => {
            use rlx::mlx::{MlxBackend, MlxMode};
            let mode = if which == "mlx-lazy" {
                MlxMode::Lazy
            } else {
                MlxMode::Compiled
            };
            let backend = MlxBackend::new(mode);
            let exe = backend.compile(&graph)?;
            let host = backend.compile(&without_states(&graph)?)?;
            (Box::new(exe), Box::new(host), 0)
        }
        other => return Err(format!("unknown or unavailable backend {other:?}").into()),
    };
    let mut caches = [
        HostTensor::zeros(DType::F32, [1, heads, cap, dim]),
        HostTensor::zeros(DType::F32, [1, heads, cap, dim]),
    ];
    let mut host_outputs = Vec::new();
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
        // Interleaved batches of the two ways.
        let (mut times, mut host_times) = (Vec::new(), Vec::new());
        for _ in 0..15 {
            let started = Instant::now();
            for _ in 0..20 {
                exe.run_in_into(&mut ctx, &inputs, &[], &mut outputs)?;
            }
            times.push(started.elapsed().as_secs_f64() / 20.0);
            let started = Instant::now();
            for _ in 0..20 {
                let mut with_caches = inputs.to_vec();
                with_caches.extend([("k", caches[0].view()), ("v", caches[1].view())]);
                host.run_into(&with_caches, &[], &mut host_outputs)?;
                // The updated caches are the next step's inputs.
                caches[0] =
                    std::mem::replace(&mut host_outputs[1], HostTensor::zeros(DType::F32, [0]));
                caches[1] =
                    std::mem::replace(&mut host_outputs[2], HostTensor::zeros(DType::F32, [0]));
            }
            host_times.push(started.elapsed().as_secs_f64() / 20.0);
        }
        println!(
            "decode backend={which} cap={cap} filled={target} us_per_step={:.1} host_us_per_step={:.1} arena_bytes={arena} cache_bytes={cache_bytes}",
            median_us(times),
            median_us(host_times)
        );
    }
    Ok(())
}

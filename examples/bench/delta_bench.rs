//! Speed of the gated delta rule (Gated DeltaNet's recurrence) at the size of one of
//! Qwen3-Next's linear-attention layers (32 value heads, keys and values 128 wide), in the
//! output format of `bench/gated_delta_bench.py`, which times transformers' recurrence on
//! the same shapes:
//!
//! ```text
//! cargo run --release --example delta_bench -- [--backend cpu|mlx] [--reps 5]
//!     [--steps 128,512] [--heads 32] [--width 128]
//! delta_bench engine=rlx backend=cpu steps=128 phase=forward ms=..
//! delta_bench engine=rlx backend=cpu steps=128 phase=backward ms=..
//! delta_bench engine=rlx backend=cpu steps=1 phase=decode ms=..
//! ```
//!
//! `forward`: the outputs and final state of a prompt of `steps` steps from a given state.
//! `backward`: the forward pass and every operand's gradient of `Σ out · r` (what training
//! runs). `decode`: one step from a given state (what generation runs per token). Medians
//! of `--reps` runs after one warm-up; operands are drawn as Gated DeltaNet makes them
//! (unit keys and queries, decays and steps in `(0, 1)`).

use std::error::Error;
use std::time::Instant;

use rlx::autodiff::{Wrt, gradients};
use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::ir::{DType, Graph, Op, ReduceOp};
use rlx::tensor::HostTensor;
use rlx_testkit::bench::{count, counts, flag, median};
use rlx_testkit::rng::Rng;

const NAMES: [&str; 6] = ["q", "k", "v", "g", "beta", "s0"];

/// The rule over `steps` steps of `heads` heads from a given state, with its loss
/// `Σ out · r` when `trained`.
fn graph(heads: usize, steps: usize, width: usize, trained: bool) -> Result<Graph, Box<dyn Error>> {
    let mut b = GraphBuilder::new();
    let mut x = Vec::new();
    for name in NAMES {
        let dims = match name {
            "q" | "k" | "v" => vec![1, heads, steps, width],
            "g" | "beta" => vec![1, heads, steps],
            _ => vec![1, heads, width, width],
        };
        x.push(b.input(name, DType::F32, dims.as_slice())?);
    }
    let out = b.op(Op::DeltaRule, &x)?;
    if !trained {
        b.output("out", out)?;
        return Ok(b.finish()?);
    }
    let r = b.input("r", DType::F32, [1, heads, steps + width, width])?;
    let weighted = b.mul(out, r)?;
    let loss = b.reduce(ReduceOp::Sum, weighted, &[0, 1, 2, 3], false)?;
    b.output("loss", loss)?;
    let forward = b.finish()?;
    let wrt = Wrt::Named(NAMES[..5].iter().map(|s| s.to_string()).collect());
    Ok(gradients(&forward, "loss", &wrt)?)
}

/// Operands as Gated DeltaNet makes them, and the loss weights.
fn operands(
    heads: usize,
    steps: usize,
    width: usize,
) -> Result<Vec<(&'static str, HostTensor)>, Box<dyn Error>> {
    let mut rng = Rng(5);
    let mut unit_rows = |rows: usize| -> Vec<f32> {
        let mut values = Vec::with_capacity(rows * width);
        for _ in 0..rows {
            let row: Vec<f64> = (0..width).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let norm = row.iter().map(|a| a * a).sum::<f64>().sqrt();
            values.extend(row.iter().map(|a| (a / norm) as f32));
        }
        values
    };
    let rows = heads * steps;
    let q = unit_rows(rows);
    let k = unit_rows(rows);
    let mut rng = Rng(6);
    let mut uniform = |n: usize, lo: f64, hi: f64| -> Vec<f32> {
        (0..n).map(|_| rng.uniform(lo, hi) as f32).collect()
    };
    let step = [1, heads, steps, width];
    Ok(vec![
        ("q", HostTensor::from_vec(q, step)?),
        ("k", HostTensor::from_vec(k, step)?),
        (
            "v",
            HostTensor::from_vec(uniform(rows * width, -1.0, 1.0), step)?,
        ),
        (
            "g",
            HostTensor::from_vec(uniform(rows, -0.5, -0.01), [1, heads, steps])?,
        ),
        (
            "beta",
            HostTensor::from_vec(uniform(rows, 0.05, 0.95), [1, heads, steps])?,
        ),
        (
            "s0",
            HostTensor::from_vec(
                uniform(heads * width * width, -0.1, 0.1),
                [1, heads, width, width],
            )?,
        ),
        (
            "r",
            HostTensor::from_vec(
                uniform(heads * (steps + width) * width, -1.0, 1.0),
                [1, heads, steps + width, width],
            )?,
        ),
    ])
}

struct Options {
    reps: usize,
    steps: Vec<usize>,
    heads: usize,
    width: usize,
}

/// The median milliseconds of a run of `graph`.
fn time<B: Backend>(
    backend: &B,
    graph: &Graph,
    given: &[(&str, HostTensor)],
    reps: usize,
) -> Result<f64, Box<dyn Error>> {
    let exe = backend.compile(graph)?;
    let names: Vec<&str> = graph
        .inputs()
        .filter_map(|(_, node)| node.name.as_deref())
        .collect();
    let views: Vec<(&str, rlx::tensor::TensorRef<'_>)> = given
        .iter()
        .filter(|(name, _)| names.contains(name))
        .map(|(name, t)| (*name, t.view()))
        .collect();
    let mut times = Vec::new();
    for rep in 0..=reps {
        let start = Instant::now();
        let outputs = exe.run(&views, &[])?;
        drop(outputs);
        if rep > 0 {
            times.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(median(times))
}

fn bench<B: Backend>(label: &str, backend: &B, o: &Options) -> Result<(), Box<dyn Error>> {
    let (heads, width) = (o.heads, o.width);
    for &steps in &o.steps {
        let given = operands(heads, steps, width)?;
        for (phase, trained) in [("forward", false), ("backward", true)] {
            let ms = time(
                backend,
                &graph(heads, steps, width, trained)?,
                &given,
                o.reps,
            )?;
            println!(
                "delta_bench engine=rlx backend={label} steps={steps} phase={phase} ms={ms:.3}"
            );
        }
    }
    let given = operands(heads, 1, width)?;
    let ms = time(backend, &graph(heads, 1, width, false)?, &given, o.reps)?;
    println!("delta_bench engine=rlx backend={label} steps=1 phase=decode ms={ms:.3}");
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let number = |name: &str, default: usize| count(&args, name, default);
    let steps = counts(&args, "--steps", &[128, 512])?;
    let options = Options {
        reps: number("--reps", 5)?.max(1),
        steps,
        heads: number("--heads", 32)?.max(1),
        width: number("--width", 128)?.max(1),
    };
    match flag(&args, "--backend").unwrap_or("cpu") {
        "cpu" => bench("cpu", &rlx::cpu::CpuBackend::default(), &options),
        #[cfg(feature = "mlx")]
        "mlx" => bench("mlx", &rlx::mlx::MlxBackend::default(), &options),
        other => Err(format!("unknown or unavailable backend {other:?} (cpu, mlx)").into()),
    }
}

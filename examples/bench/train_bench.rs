//! Training-step times for the two workloads `../shared/bench/train_bench.py` times in
//! PyTorch (same sizes, loss and optimizer; f32, AdamW lr 1e-3, weight decay 0.01):
//!
//! - `mlp`: 64 → 256 → 256 → 10 with ReLU and cross-entropy, batch 64;
//! - `block`: one post-LayerNorm BERT encoder block (hidden 384, 12 heads, FFN 1536,
//!   erf-GELU, eps 1e-12) on inputs of shape (8, 128, 384), loss `mean(output²)`.
//!
//! A step is forward + backward + optimizer update, one compiled graph. Prints
//! `train workload=mlp batch=64 ms_per_step=T impl=rlx-B` and
//! `train workload=block batch=8 seq=128 ms_per_step=T impl=rlx-B` (medians), and on the
//! CPU each step's memory: `train_memory workload=W arena_mib=A peak_live_mib=L
//! forward_arena_mib=F`, the arena the planner lays out for the step, the most bytes live
//! at any one point of it (no placement can use less), and the forward pass's arena alone.
//!
//! ```text
//! cargo run --release --example train_bench -- [--backend cpu|mlx] [--workload mlp|block] [--profile]
//! ```
//!
//! `--profile` also prints where a CPU block step spends its time, per op and for the
//! slowest kernels:
//!
//! ```text
//! profile op=fused_matmul ms_per_step=.. kernels=..
//! profile kernel=softmax ms_per_step=.. out=f32[batch,12,seq,seq] reads=f32[batch,12,seq,seq]
//! ```

use std::error::Error;
use std::time::Instant;

use rlx::backend::{Backend, Executable};
use rlx::ir::Graph;
use rlx::tensor::HostTensor;
use rlx::train::{Optimizer, TrainConfig, Trainer};
use rlx::typed::{Const, Scope, Tensor, build};

rlx::dims!(Batch, Seq);
type C<const N: usize> = Const<N>;
type Hidden = C<384>;
type Act<'g> = Tensor<'g, (Batch, Seq, Hidden)>;

fn mlp() -> Result<Graph, Box<dyn Error>> {
    Ok(build(|g| {
        let x: Tensor<(Batch, C<64>)> = g.input("x");
        let labels: Tensor<(Batch,), i64> = g.input("labels");
        let w1: Tensor<(C<256>, C<64>)> = g.param("fc1.weight");
        let b1: Tensor<(C<256>,)> = g.param("fc1.bias");
        let w2: Tensor<(C<256>, C<256>)> = g.param("fc2.weight");
        let b2: Tensor<(C<256>,)> = g.param("fc2.bias");
        let w3: Tensor<(C<10>, C<256>)> = g.param("fc3.weight");
        let b3: Tensor<(C<10>,)> = g.param("fc3.bias");
        let h = (x.matmul_t(w1) + b1).relu();
        let h = (h.matmul_t(w2) + b2).relu();
        g.output("loss", (h.matmul_t(w3) + b3).cross_entropy(labels));
    })?)
}

fn linear<'g, I: rlx::typed::Dim, O: rlx::typed::Dim>(
    g: &'g Scope<'g>,
    name: &str,
    x: Tensor<'g, (Batch, Seq, I)>,
) -> Tensor<'g, (Batch, Seq, O)> {
    let w: Tensor<(O, I)> = g.param(&format!("{name}.weight"));
    let b: Tensor<(O,)> = g.param(&format!("{name}.bias"));
    x.matmul_t_shared(w) + b
}

fn norm<'g>(g: &'g Scope<'g>, name: &str, x: Act<'g>) -> Act<'g> {
    let w: Tensor<(Hidden,)> = g.param(&format!("{name}.weight"));
    let b: Tensor<(Hidden,)> = g.param(&format!("{name}.bias"));
    x.layer_norm(w, b, 1e-12)
}

fn heads(x: Act<'_>) -> Tensor<'_, (Batch, C<12>, Seq, C<32>)> {
    x.reshape::<(Batch, Seq, C<12>, C<32>)>()
        .permute::<0, 2, 1, 3>()
}

fn block() -> Result<Graph, Box<dyn Error>> {
    Ok(build(|g| {
        let x: Act = g.input("x");
        let target: Act = g.input("zeros");
        let q = heads(linear(g, "q", x));
        let k = heads(linear(g, "k", x));
        let v = heads(linear(g, "v", x));
        let context = q
            .attention(k, v, 1.0 / 32f64.sqrt())
            .permute::<0, 2, 1, 3>()
            .reshape::<(Batch, Seq, Hidden)>();
        let x = norm(g, "n1", x + linear(g, "o", context));
        let up: Tensor<(Batch, Seq, C<1536>)> = linear(g, "up", x);
        let y = norm(g, "n2", x + linear(g, "down", up.gelu()));
        g.output("loss", y.mse(target));
    })?)
}

/// Deterministic weights: small uniform values, LayerNorm weights at 1.
fn init(trainer: &mut Trainer, graph: &Graph) -> Result<(), Box<dyn Error>> {
    let mut state = 1u64;
    for (_, node) in graph.params() {
        let dims: Vec<usize> = node.ty.shape.static_dims().ok_or("static weights")?;
        let n: usize = dims.iter().product();
        let name = node.name.as_deref().unwrap_or_default();
        let fan_in = *dims.last().unwrap_or(&1) as f32;
        let values: Vec<f32> = if name.starts_with('n') && name.ends_with("weight") {
            vec![1.0; n]
        } else {
            (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) / fan_in.sqrt()
                })
                .collect()
        };
        trainer.set_weight(name, HostTensor::from_vec(values, dims)?.view())?;
    }
    Ok(())
}

/// Median milliseconds of `step` after warm-ups, over at least `runs` runs and 2 seconds.
fn median_ms(
    mut step: impl FnMut() -> Result<(), Box<dyn Error>>,
    runs: usize,
) -> Result<f64, Box<dyn Error>> {
    for _ in 0..3 {
        step()?;
    }
    let started = Instant::now();
    let mut times = Vec::new();
    while times.len() < runs || started.elapsed().as_secs_f64() < 2.0 {
        let t = Instant::now();
        step()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Where a CPU training step of `graph` spends its time: the ops taking the most, summed
/// over their kernels, per step.
fn profile(graph: &Graph, inputs: &[(&str, HostTensor)]) -> Result<(), Box<dyn Error>> {
    let config = TrainConfig::new(Optimizer::adamw(1e-3).weight_decay(0.01));
    let step = rlx::train::training_graph(graph, "loss", &config)?;
    let exe = rlx::cpu::CpuBackend::default().compile(&step.graph)?;
    let scalar = |v: f32| HostTensor::scalar(v);
    let scalars = [
        (rlx::train::LR_INPUT, scalar(1e-3)),
        (rlx::train::BIAS_CORRECTION_INPUTS[0], scalar(0.1)),
        (rlx::train::BIAS_CORRECTION_INPUTS[1], scalar(0.001)),
    ];
    let all: Vec<(&str, rlx::tensor::TensorRef<'_>)> = inputs
        .iter()
        .chain(&scalars)
        .map(|(n, t)| (*n, t.view()))
        .collect();
    let runs = 5;
    let report = exe.profile(&all, &[], runs)?;
    let per_step = |d: std::time::Duration| d.as_secs_f64() * 1e3 / runs as f64;
    println!("profile total_ms_per_step={:.2}", per_step(report.total));
    for (op, time, count) in report.by_op().into_iter().take(14) {
        println!(
            "profile op={op} ms_per_step={:.2} kernels={count}",
            per_step(time),
        );
    }
    // The slowest kernels, each with the type it computes and reads.
    let graph = exe.graph();
    let mut steps: Vec<_> = report.steps.iter().filter(|s| s.node.is_some()).collect();
    steps.sort_by_key(|s| std::cmp::Reverse(s.time));
    for step in steps.into_iter().take(12) {
        let node = &graph[step.node.expect("kept steps with a node")];
        let reads: Vec<String> = node
            .inputs
            .iter()
            .map(|i| graph[*i].ty.to_string())
            .collect();
        println!(
            "profile kernel={} ms_per_step={:.2} out={} reads={}",
            step.op,
            per_step(step.time),
            node.ty,
            reads.join(",")
        );
    }
    Ok(())
}

/// The CPU plan's memory figures for the training step of `graph` and for `graph` alone.
fn memory(workload: &str, graph: &Graph, dims: &[(&str, usize)]) -> Result<(), Box<dyn Error>> {
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    let config = TrainConfig::new(Optimizer::adamw(1e-3));
    let step = rlx::train::training_graph(graph, "loss", &config)?;
    let cpu = rlx::cpu::CpuBackend::default();
    let train = cpu.compile(&step.graph)?.plan_report(dims)?;
    let forward = cpu.compile(graph)?.plan_report(dims)?;
    println!(
        "train_memory workload={workload} arena_mib={:.1} peak_live_mib={:.1} forward_arena_mib={:.1}",
        mib(train.peak_bytes),
        mib(train.lower_bound),
        mib(forward.peak_bytes)
    );
    Ok(())
}

fn run<B: Backend>(
    backend: &B,
    name: &str,
    workloads: &[String],
    profiled: bool,
) -> Result<(), Box<dyn Error>>
where
    B::Executable: 'static,
{
    let config = TrainConfig::new(Optimizer::adamw(1e-3).weight_decay(0.01));
    if workloads.iter().any(|w| w == "mlp") {
        let graph = mlp()?;
        let mut trainer = Trainer::new(backend, &graph, "loss", config.clone())?;
        init(&mut trainer, &graph)?;
        let x: Vec<f32> = (0..64 * 64).map(|i| (i % 17) as f32 / 16.0).collect();
        let x = HostTensor::from_vec(x, [64, 64])?;
        let labels = HostTensor::from_vec((0..64).map(|i| i % 10).collect::<Vec<i64>>(), [64])?;
        let ms = median_ms(
            || {
                trainer.step(&[("x", x.view()), ("labels", labels.view())])?;
                Ok(())
            },
            30,
        )?;
        println!("train workload=mlp batch=64 ms_per_step={ms:.3} impl=rlx-{name}");
        if name == "cpu" {
            memory("mlp", &graph, &[("batch", 64)])?;
        }
    }
    if workloads.iter().any(|w| w == "block") {
        let graph = block()?;
        let mut trainer = Trainer::new(backend, &graph, "loss", config)?;
        init(&mut trainer, &graph)?;
        let n = 8 * 128 * 384;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let x = HostTensor::from_vec(x, [8, 128, 384])?;
        let zeros = HostTensor::zeros(rlx::ir::DType::F32, vec![8, 128, 384]);
        let ms = median_ms(
            || {
                trainer.step(&[("x", x.view()), ("zeros", zeros.view())])?;
                Ok(())
            },
            10,
        )?;
        println!("train workload=block batch=8 seq=128 ms_per_step={ms:.3} impl=rlx-{name}");
        if name == "cpu" {
            memory("block", &graph, &[("batch", 8), ("seq", 128)])?;
            if profiled {
                profile(&graph, &[("x", x), ("zeros", zeros)])?;
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut backend = "cpu".to_string();
    let mut workloads = vec!["mlp".to_string(), "block".to_string()];
    let mut profiled = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--backend" => backend = args.next().ok_or("--backend needs cpu or mlx")?,
            "--workload" => workloads = vec![args.next().ok_or("--workload needs mlp or block")?],
            "--profile" => profiled = true,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    match backend.as_str() {
        "cpu" => run(
            &rlx::cpu::CpuBackend::default(),
            "cpu",
            &workloads,
            profiled,
        ),
        #[cfg(feature = "mlx")]
        "mlx" => run(
            &rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled),
            "mlx",
            &workloads,
            profiled,
        ),
        other => Err(format!("unknown or unavailable backend {other:?}").into()),
    }
}

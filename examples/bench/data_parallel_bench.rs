//! Throughput of data-parallel training: one BERT encoder block (`rlx_testkit::block`,
//! hidden 384, 12 heads, FFN 1536) trained with AdamW on a mean-squared-error loss, on 1
//! or more ranks, each with its own batch (weak scaling: the global batch grows with the
//! ranks).
//!
//! ```text
//! cargo run --release --example data_parallel_bench -- [--ranks N] [--transport ring|nccl] [--backend cpu|mlx] [--batch B] [--seq S] [--steps K]
//! ```
//!
//! Each rank runs 3 warm-up steps, then `--steps` timed ones, ending at a barrier. Rank 0
//! prints `data_parallel_bench ranks=N transport=T backend=B batch_per_rank=B seq=S
//! ms_per_step=X samples_per_s=Y`. Scaling efficiency is `samples_per_s(N) / (N ·
//! samples_per_s(1))`. With `--ranks 1` no group is formed and the collectives cost
//! nothing. On GPUs use `--transport nccl --backend mlx`, one GPU per rank.

use std::error::Error;
use std::time::Instant;

use rlx::backend::Backend;
use rlx::builder::GraphBuilder;
use rlx::distributed::{Group, GroupOptions, LocalLaunch, Transport};
use rlx::ir::{BinaryOp, DType, ReduceOp};
use rlx::tensor::HostTensor;
use rlx::train::{DataParallelTrainer, Optimizer, TrainConfig};
use rlx_testkit::block::{Block, BlockConfig, weights};

struct Args {
    ranks: usize,
    transport: Transport,
    backend: String,
    batch: usize,
    seq: usize,
    steps: usize,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut args = Args {
        ranks: 1,
        transport: Transport::Ring,
        backend: "cpu".into(),
        batch: 8,
        seq: 128,
        steps: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let value = it.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--ranks" => args.ranks = value.parse::<usize>()?.max(1),
            "--transport" => {
                args.transport = match value.as_str() {
                    "ring" => Transport::Ring,
                    "nccl" => Transport::Nccl,
                    other => return Err(format!("unknown transport {other:?}").into()),
                }
            }
            "--backend" => args.backend = value,
            "--batch" => args.batch = value.parse()?,
            "--seq" => args.seq = value.parse()?,
            "--steps" => args.steps = value.parse::<usize>()?.max(1),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(args)
}

fn bench<B: Backend>(backend: &B, args: &Args, group: Group) -> Result<(), Box<dyn Error>>
where
    B::Executable: 'static,
{
    let (forward, manifest) = Block::build_with_manifest(&BlockConfig)?;
    let out = forward.outputs()[0].node;
    let mut b = GraphBuilder::from_graph(forward);
    let ty = b.ty(out).ok_or("the block has an output")?.clone();
    let target = b.input("target", DType::F32, ty.shape.clone())?;
    let err = b.binary(BinaryOp::Sub, out, target)?;
    let sq = b.mul(err, err)?;
    let loss = b.reduce(ReduceOp::Mean, sq, &[0, 1, 2], false)?;
    b.output("loss", loss)?;
    let graph = b.finish()?;

    let (me, size) = (group.rank(), group.size());
    let config = TrainConfig::new(Optimizer::adamw(1e-4));
    let mut trainer = DataParallelTrainer::new(backend, &graph, "loss", config, group)?;
    for spec in &manifest.params {
        trainer.set_weight(&spec.name, weights(spec).view())?;
    }
    let n = args.batch * args.seq * 384;
    let x: Vec<f32> = (0..n)
        .map(|i| (((i + me * 7) % 23) as f32 - 11.0) / 11.0)
        .collect();
    let y: Vec<f32> = (0..n).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
    let x = HostTensor::from_vec(x, [args.batch, args.seq, 384])?;
    let y = HostTensor::from_vec(y, [args.batch, args.seq, 384])?;
    let inputs = [("x", x.view()), ("target", y.view())];
    for _ in 0..3 {
        trainer.step(&inputs)?;
    }
    trainer.group().barrier()?;
    let start = Instant::now();
    for _ in 0..args.steps {
        trainer.step(&inputs)?;
    }
    trainer.group().barrier()?;
    let seconds = start.elapsed().as_secs_f64();
    trainer.check_in_sync()?;
    if me == 0 {
        let ms = seconds * 1e3 / args.steps as f64;
        let samples = (args.batch * size * args.steps) as f64 / seconds;
        let transport = trainer.group().transport().map_or("none", Transport::name);
        println!(
            "data_parallel_bench ranks={size} transport={transport} backend={} \
             batch_per_rank={} seq={} ms_per_step={ms:.2} samples_per_s={samples:.1}",
            args.backend, args.batch, args.seq
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    if !rlx::distributed::launched() && args.ranks > 1 {
        return Ok(LocalLaunch::new(args.transport, args.ranks)?.run_self()?);
    }
    let group = Group::init_if_launched(&GroupOptions::default())?;
    match args.backend.as_str() {
        "cpu" => bench(&rlx::cpu::CpuBackend::default(), &args, group),
        "mlx" => bench(
            &rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled),
            &args,
            group,
        ),
        other => Err(format!("unknown backend {other:?}").into()),
    }
}

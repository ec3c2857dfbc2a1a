//! Tutorial 08: data-parallel training over several processes.
//!
//! ```text
//! cargo run --release --example 08_data_parallel -- [--ranks N] [--backend cpu|mlx] [--transport ring|nccl] [--epochs N] [--seed S] [--data FILE] [--timeout SECONDS]
//! ```
//!
//! The digits MLP of tutorial 07, trained by N processes at once. Each step's batch of 64
//! training rows is cut into N shards, one per rank. Every rank computes the gradients of
//! its shard, the ranks sum them through MLX's distributed layer (each weighted by its
//! shard's size, so uneven shards average right), and every rank applies the same AdamW
//! update: [`rlx::train::DataParallelTrainer`].
//!
//! **Launching.** Started without a rank in its environment, the example is its own
//! launcher ([`LocalLaunch`]): for the ring (the default) it writes a hostfile with a
//! loopback port per rank and starts N copies of itself with `MLX_RANK` and `MLX_HOSTFILE`
//! set; for NCCL (`--transport nccl`, one GPU per rank, with `--backend mlx` on MLX's CUDA
//! build) it sets `NCCL_HOST_IP`, `NCCL_PORT`, `MLX_WORLD_SIZE`, `MLX_RANK` and
//! `CUDA_VISIBLE_DEVICES`. Started with such variables (by you, by a script, on several
//! hosts sharing one hostfile), it is one rank:
//!
//! ```text
//! # hosts.json: [["10.0.0.1:5000"], ["10.0.0.2:5000"]]
//! host1$ MLX_RANK=0 MLX_HOSTFILE=hosts.json target/release/examples/08_data_parallel
//! host2$ MLX_RANK=1 MLX_HOSTFILE=hosts.json target/release/examples/08_data_parallel
//! ```
//!
//! Ranks start from different random weights and take rank 0's (a broadcast), so the run
//! shows they agree. At the end every rank checks that its weights equal every other
//! rank's, bit for bit. Rank 0 then trains the same model in one process on the whole
//! batches ([`rlx::train::Trainer`]) and compares. The last line on stdout (rank 0's) is
//! `data_parallel ranks=N backend=B max_weight_diff_vs_single=D test_accuracy=A`, after a
//! line with the single process's accuracy.
//!
//! The ranks sum each gradient in another order than one process does, so the weights
//! differ by float rounding: measured after 2 epochs, at most 3.5e-7. Over longer runs
//! that difference can grow: once a ReLU's input lands within rounding of zero, one side
//! passes a sample's gradient through it and the other does not, and the runs part ways
//! (here from the third epoch on; 1e-2 after 10 epochs). Both are equally valid
//! trainings, and the accuracy stays the same.

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rlx::backend::Backend;
use rlx::distributed::{Group, GroupOptions, LocalLaunch, Transport};
use rlx::train::{DataParallelTrainer, Optimizer, TrainConfig, Trainer};
use rlx_testkit::digits::{self, Digits};

const BATCH: usize = 64;

struct Args {
    ranks: usize,
    backend: String,
    transport: Transport,
    epochs: usize,
    seed: u64,
    data: Option<PathBuf>,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: 08_data_parallel [--ranks N] [--backend cpu|mlx] [--transport ring|nccl] \
                 [--epochs N] [--seed S] [--data FILE] [--timeout SECONDS]";
    let mut args = Args {
        ranks: 2,
        backend: "cpu".into(),
        transport: Transport::Ring,
        epochs: 10,
        seed: 2026,
        data: None,
        timeout: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value; {usage}"))
        };
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{arg}: {e}"));
        match arg.as_str() {
            "--ranks" => args.ranks = number(value()?)? as usize,
            "--backend" => args.backend = value()?,
            "--transport" => {
                args.transport = match value()?.as_str() {
                    "ring" => Transport::Ring,
                    "nccl" => Transport::Nccl,
                    other => return Err(format!("unknown transport {other:?}; {usage}")),
                }
            }
            "--epochs" => args.epochs = number(value()?)? as usize,
            "--seed" => args.seed = number(value()?)?,
            "--data" => args.data = Some(value()?.into()),
            "--timeout" => args.timeout = Duration::from_secs(number(value()?)?),
            _ => return Err(usage.into()),
        }
    }
    if args.ranks == 0 {
        return Err("--ranks must be at least 1".into());
    }
    Ok(args)
}

/// One rank's training; rank 0 also trains the single-process reference and reports.
fn rank<B: Backend>(backend: &B, args: &Args, data: &Digits) -> Result<(), Box<dyn Error>>
where
    B::Executable: 'static,
{
    let options = GroupOptions::default()
        .join_timeout(args.timeout)
        .timeout(args.timeout);
    let group = Group::init_if_launched(&options)?; // alone with `--ranks 1`
    let (me, size) = (group.rank(), group.size());
    let transport = group.transport().map_or("none", Transport::name);
    eprintln!("rank {me} of {size} joined over the {transport} transport");

    let graph = digits::model()?;
    let config = TrainConfig::new(Optimizer::adamw(1e-3).weight_decay(0.01));
    let mut trainer = DataParallelTrainer::new(backend, &graph, "loss", config.clone(), group)?;
    // Each rank draws its own weights; the broadcast makes them rank 0's.
    digits::init(args.seed + me as u64, &mut |name, value| {
        Ok(trainer.set_weight(name, value)?)
    })?;
    trainer.broadcast_weights()?;

    let (train_rows, test_rows) = digits::split(data);
    let start = Instant::now();
    for epoch in 1..=args.epochs {
        let mut total = 0.0;
        for chunk in train_rows.chunks(BATCH) {
            let mine = &chunk[trainer.group().shard(chunk.len())];
            let (pixels, labels) = digits::batch(data, mine)?;
            let inputs = [("pixels", pixels.view()), ("labels", labels.view())];
            // Weighted by the shard's size: the step is that of the whole batch.
            total += trainer.step_weighted(&inputs, mine.len() as f64)? * chunk.len() as f64;
        }
        if me == 0 {
            let mean = total / train_rows.len() as f64;
            eprintln!("epoch {epoch}/{} loss {mean:.4}", args.epochs);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    trainer.check_in_sync()?;
    eprintln!(
        "rank {me}: {} steps in {seconds:.2} s; weights equal on every rank",
        trainer.steps()
    );
    if me != 0 {
        return Ok(());
    }

    // The reference: one process, whole batches, same start (rank 0's weights).
    let mut single = Trainer::new(backend, &graph, "loss", config)?;
    digits::init(args.seed, &mut |name, value| {
        Ok(single.set_weight(name, value)?)
    })?;
    for _ in 0..args.epochs {
        for chunk in train_rows.chunks(BATCH) {
            let (pixels, labels) = digits::batch(data, chunk)?;
            single.step(&[("pixels", pixels.view()), ("labels", labels.view())])?;
        }
    }
    let mut max_diff = 0.0f64;
    for name in digits::WEIGHTS {
        let a = trainer.weight(name)?.to_f64_vec();
        let b = single.weight(name)?.to_f64_vec();
        for (x, y) in a.iter().zip(&b) {
            max_diff = max_diff.max((x - y).abs());
        }
    }
    let accuracy = digits::accuracy(backend, data, &test_rows, &mut |n| Ok(trainer.weight(n)?))?;
    let single_accuracy =
        digits::accuracy(backend, data, &test_rows, &mut |n| Ok(single.weight(n)?))?;
    println!("single_process test_accuracy={single_accuracy:.4}");
    println!(
        "data_parallel ranks={size} backend={} max_weight_diff_vs_single={max_diff:.3e} \
         test_accuracy={accuracy:.4}",
        args.backend
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    if !rlx::distributed::launched() && args.ranks > 1 {
        // Its own launcher: every rank is a copy of this program, with the same arguments.
        return Ok(LocalLaunch::new(args.transport, args.ranks)?.run_self()?);
    }
    let data = digits::load(args.data.as_deref())?;
    match args.backend.as_str() {
        "cpu" => rank(&rlx::cpu::CpuBackend::default(), &args, &data),
        "mlx" => rank(
            &rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled),
            &args,
            &data,
        ),
        other => Err(format!("unknown backend {other:?}").into()),
    }
}

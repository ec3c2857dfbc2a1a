//! Data-parallel training and the collectives under it (`rlx::distributed`), on a ring over
//! loopback: ranks are copies of this test binary, started by the tests themselves.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rlx::backend::Backend;
use rlx::cpu::CpuBackend;
use rlx::distributed::{DistributedError, Group, GroupOptions, LocalLaunch, Transport};
use rlx::ir::Graph;
use rlx::mlx::{Array, MlxBackend, MlxMode};
use rlx::prelude::*;
use rlx::tensor::HostTensor;
use rlx::train::{DataParallelTrainer, Optimizer, TrainConfig, TrainError, Trainable, Trainer};
use rlx_testkit::rng::Rng;

/// A two-layer MLP regressor with a mean squared error: `x: f32[batch, 8]`, `y: f32[batch, 2]`.
fn mlp() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [Dim::sym("batch"), Dim::from(8)])
        .unwrap();
    let y = b
        .input("y", DType::F32, [Dim::sym("batch"), Dim::from(2)])
        .unwrap();
    let w1 = b.param("w1", DType::F32, [8, 16]).unwrap();
    let b1 = b.param("b1", DType::F32, [16]).unwrap();
    let w2 = b.param("w2", DType::F32, [16, 2]).unwrap();
    let h = b.matmul(x, w1).unwrap();
    let h = b.add(h, b1).unwrap();
    let h = b.unary(UnaryOp::Tanh, h).unwrap();
    let p = b.matmul(h, w2).unwrap();
    let e = b.binary(BinaryOp::Sub, p, y).unwrap();
    let sq = b.mul(e, e).unwrap();
    let loss = b.reduce(ReduceOp::Mean, sq, &[0, 1], false).unwrap();
    b.output("loss", loss).unwrap();
    b.finish().unwrap()
}

const WEIGHTS: [(&str, [usize; 2]); 3] = [("w1", [8, 16]), ("b1", [16, 1]), ("w2", [16, 2])];

fn initial(seed: u64) -> Vec<(&'static str, HostTensor)> {
    let mut rng = Rng(seed);
    WEIGHTS
        .iter()
        .map(|&(name, [r, c])| {
            let shape = if name == "b1" { vec![r] } else { vec![r, c] };
            let n = r * c;
            let v: Vec<f32> = (0..n).map(|_| rng.uniform(-0.5, 0.5) as f32).collect();
            (name, HostTensor::from_vec(v, shape).unwrap())
        })
        .collect()
}

/// Batch `step` of the synthetic data: `rows` rows.
fn batch(step: usize, rows: usize) -> (HostTensor, HostTensor) {
    let mut rng = Rng(1000 + step as u64);
    let x: Vec<f32> = (0..rows * 8)
        .map(|_| rng.uniform(-1.0, 1.0) as f32)
        .collect();
    let y: Vec<f32> = (0..rows)
        .flat_map(|r| {
            let s: f32 = x[r * 8..r * 8 + 8].iter().sum();
            [s.sin(), (0.5 * s).cos()]
        })
        .collect();
    (
        HostTensor::from_vec(x, [rows, 8]).unwrap(),
        HostTensor::from_vec(y, [rows, 2]).unwrap(),
    )
}

fn max_diff(a: &HostTensor, b: &HostTensor) -> f64 {
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn config() -> TrainConfig {
    TrainConfig::new(Optimizer::adamw(1e-2).weight_decay(0.01)).clip_grad_norm(1.0)
}

/// A group of one runs the same step as [`Trainer`]: the same weights, bit for bit.
fn single_matches_trainer<B: Backend>(backend: &B, config: TrainConfig)
where
    B::Executable: 'static,
{
    let graph = mlp();
    let mut single = Trainer::new(backend, &graph, "loss", config.clone()).unwrap();
    // Small buckets: several of them.
    let mut dp = DataParallelTrainer::with_bucket_bytes(
        backend,
        &graph,
        "loss",
        config.clone(),
        Group::single(),
        256,
    )
    .unwrap();
    for (name, value) in initial(7) {
        single.set_weight(name, value.view()).unwrap();
        dp.set_weight(name, value.view()).unwrap();
    }
    for step in 0..5 {
        let (x, y) = batch(step, 24);
        let inputs = [("x", x.view()), ("y", y.view())];
        let a = single.step(&inputs).unwrap();
        let b = dp.step_weighted(&inputs, 24.0).unwrap();
        // The mean loss crosses the group in f32: equal to f32 rounding.
        assert!(
            (a - b).abs() <= 1e-6 * a.abs(),
            "loss of step {step}: {a} vs {b}"
        );
    }
    for (name, initial) in initial(7) {
        let d = max_diff(&single.weight(name).unwrap(), &dp.weight(name).unwrap());
        assert_eq!(d, 0.0, "{name}");
        // Frozen weights stay as they were set.
        let trained = match &config.trainable {
            Trainable::All => true,
            Trainable::Only(names) => names.iter().any(|n| n == name),
        };
        assert_eq!(
            trained,
            max_diff(&dp.weight(name).unwrap(), &initial) > 0.0,
            "{name}"
        );
    }
    dp.check_in_sync().unwrap();
}

#[test]
fn group_of_one_matches_trainer() {
    for config in [config(), config().train_only(["w2"])] {
        single_matches_trainer(&CpuBackend::default(), config.clone());
        single_matches_trainer(&MlxBackend::new(MlxMode::Lazy), config);
    }
}

#[test]
fn group_of_one_collectives_return_their_input() {
    let group = Group::single();
    assert_eq!(
        (group.rank(), group.size(), group.transport()),
        (0, 1, None)
    );
    let x = HostTensor::from_vec(vec![1.5f32, -0.0, 3.0], [3]).unwrap();
    assert_eq!(group.all_sum_tensor(x.view()).unwrap(), x);
    assert_eq!(group.all_gather_tensor(x.view()).unwrap(), x);
    assert_eq!(group.broadcast_tensor(x.view(), 0).unwrap(), x);
    group.barrier().unwrap();
    let a = Array::from_tensor(x.view()).unwrap();
    assert!(matches!(
        group.send(&a, 0),
        Err(DistributedError::Peer { .. })
    ));
    assert!(matches!(
        group.broadcast_tensor(x.view(), 1),
        Err(DistributedError::Peer { .. })
    ));
}

#[test]
fn no_launcher_environment_is_a_typed_error() {
    if Transport::from_env().is_some() {
        eprintln!("skipped: this process was started with a launcher's environment");
        return;
    }
    match Group::init(&GroupOptions::default()) {
        Err(DistributedError::NoGroup(message)) => {
            assert!(message.contains("MLX_HOSTFILE"), "{message}")
        }
        other => panic!("expected NoGroup, got {other:?}"),
    }
}

// ---- ranks: copies of this binary running `rank_process` ----

/// Steps of the multi-process training runs, and the rows of each global batch.
const STEPS: usize = 12;
const ROWS: usize = 23; // uneven shards for 2 and 4 ranks

/// Rows `start..start + len` of a `[rows, width]` tensor.
fn rows_of(t: &HostTensor, start: usize, len: usize) -> HostTensor {
    let width = t.shape()[1];
    let v = t.as_slice::<f32>().unwrap()[start * width..(start + len) * width].to_vec();
    HostTensor::from_vec(v, [len, width]).unwrap()
}

fn options() -> GroupOptions {
    let secs = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    GroupOptions::default()
        .join_timeout(Duration::from_secs(secs("RLX_DP_JOIN_TIMEOUT", 30)))
        .timeout(Duration::from_secs(secs("RLX_DP_TIMEOUT", 30)))
}

/// What one rank does, by `RLX_DP_ROLE`; its result (or error) goes to `RLX_DP_OUT`.
fn run_rank(role: &str, out: &Path) -> Result<String, Box<dyn std::error::Error>> {
    let group = Group::init(&options())?;
    let (me, size) = (group.rank(), group.size());
    match role {
        "collectives" => {
            let mine = HostTensor::from_vec(vec![(me + 1) as f32; 5], [5])?;
            let sum = group.all_sum_tensor(mine.view())?;
            let expected = (size * (size + 1) / 2) as f32;
            assert_eq!(sum.as_slice::<f32>()?, &[expected; 5]);
            let gathered = group.all_gather_tensor(HostTensor::scalar(me as i64).view())?;
            assert_eq!(
                gathered.as_slice::<i64>()?,
                &(0..size as i64).collect::<Vec<_>>()[..]
            );
            // Bit for bit, -0.0 and NaN payloads included.
            let special =
                HostTensor::from_vec(vec![-0.0f32, f32::from_bits(0x7fc0_1234), me as f32], [3])?;
            let root = group.broadcast_tensor(special.view(), 1)?;
            let bits: Vec<u32> = root
                .as_slice::<f32>()?
                .iter()
                .map(|x| x.to_bits())
                .collect();
            assert_eq!(bits, [0x8000_0000, 0x7fc0_1234, 1.0f32.to_bits()]);
            // Point to point around the ring: send right, receive from the left.
            let right = (me + 1) % size;
            let left = (me + size - 1) % size;
            let token = Array::from_tensor(HostTensor::from_vec(vec![me as i32; 3], [3])?.view())?;
            if me % 2 == 0 {
                group.send(&token, right)?;
                let got = group.recv(&[3], DType::I32, left)?.to_host()?;
                assert_eq!(got.as_slice::<i32>()?, &[left as i32; 3]);
            } else {
                let got = group.recv(&[3], DType::I32, left)?.to_host()?;
                assert_eq!(got.as_slice::<i32>()?, &[left as i32; 3]);
                group.send(&token, right)?;
            }
            assert!(matches!(
                group.send(&token, me),
                Err(DistributedError::Peer { .. })
            ));
            group.barrier()?;
            Ok(format!("rank {me} of {size} ok"))
        }
        "train" | "train-mlx" | "die" => {
            let graph = mlp();
            // Small buckets: several of them.
            let mut trainer = if role == "train-mlx" {
                let mlx = MlxBackend::new(MlxMode::Lazy);
                DataParallelTrainer::with_bucket_bytes(&mlx, &graph, "loss", config(), group, 300)?
            } else {
                let cpu = CpuBackend::default();
                DataParallelTrainer::with_bucket_bytes(&cpu, &graph, "loss", config(), group, 300)?
            };
            // Every rank starts elsewhere; the broadcast makes them rank 0's.
            for (name, value) in initial(7 + me as u64) {
                trainer.set_weight(name, value.view())?;
            }
            trainer.broadcast_weights()?;
            for step in 0..STEPS {
                if role == "die" && step == 3 && me == 1 {
                    std::process::exit(17);
                }
                let (x, y) = batch(step, ROWS);
                // Every fourth step rank 0 takes the whole batch and the others have no
                // samples (weight 0).
                let (start, len) = match (step % 4, me) {
                    (0, 0) => (0, ROWS),
                    (0, _) => (0, 0),
                    _ => {
                        let mine = trainer.group().shard(ROWS);
                        (mine.start, mine.len())
                    }
                };
                let (x, y) = (rows_of(&x, start, len), rows_of(&y, start, len));
                trainer.step_weighted(&[("x", x.view()), ("y", y.view())], len as f64)?;
            }
            trainer.check_in_sync()?;
            trainer.save(out)?;
            Ok(format!("rank {me} trained"))
        }
        "stall" => {
            if me == 1 {
                std::thread::sleep(Duration::from_secs(600));
            }
            let first = group.barrier();
            if first.is_err() {
                // The group is unusable after a failure, and says so.
                let again = group.barrier();
                assert!(
                    matches!(again, Err(DistributedError::Broken(_))),
                    "{again:?}"
                );
            }
            first?;
            Ok("passed a barrier".into())
        }
        other => Err(format!("unknown role {other:?}").into()),
    }
}

/// The entry point of a rank process (started by the tests below, never on its own).
#[test]
#[ignore = "a rank process, started by the other tests of this file"]
fn rank_process() {
    let role = std::env::var("RLX_DP_ROLE").expect("started by a test with RLX_DP_ROLE");
    let out = PathBuf::from(std::env::var("RLX_DP_OUT").expect("and RLX_DP_OUT"));
    let report = match run_rank(&role, &out) {
        Ok(message) => format!("ok: {message}"),
        Err(e) => {
            let kind = match e.downcast_ref::<DistributedError>() {
                Some(d) => kind_of(d),
                None => match e.downcast_ref::<TrainError>() {
                    Some(TrainError::Distributed(d)) => kind_of(d),
                    _ => "other",
                },
            };
            format!("error {kind}: {e}")
        }
    };
    std::fs::write(out.with_extension("txt"), report).expect("write the report");
}

fn kind_of(e: &DistributedError) -> &'static str {
    match e {
        DistributedError::NoGroup(_) => "NoGroup",
        DistributedError::JoinTimeout { .. } => "JoinTimeout",
        DistributedError::Timeout { .. } => "Timeout",
        DistributedError::Failed { .. } => "Failed",
        DistributedError::Broken(_) => "Broken",
        DistributedError::Peer { .. } => "Peer",
        _ => "Mlx",
    }
}

/// The transport of the multi-process tests: the ring over loopback, or NCCL between
/// GPUs with `RLX_DP_TRANSPORT=nccl` (where the compute runs on MLX's GPU too).
fn transport() -> Transport {
    match std::env::var("RLX_DP_TRANSPORT").as_deref() {
        Ok("nccl") => Transport::Nccl,
        _ => Transport::Ring,
    }
}

/// Ranks of one group started as processes, each with its output file.
struct Ranks {
    children: Vec<(usize, Child)>,
    dir: PathBuf,
    _launch: LocalLaunch,
}

impl Ranks {
    /// Starts the ranks `which` of a ring of `size`, in `role`, with extra environment.
    fn start(size: usize, which: &[usize], role: &str, env: &[(&str, &str)]) -> Ranks {
        let launch = LocalLaunch::new(transport(), size).unwrap();
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rlx-dp-{}-{run}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let exe = std::env::current_exe().unwrap();
        let children = which
            .iter()
            .map(|&rank| {
                let child = Command::new(&exe)
                    .args([
                        "rank_process",
                        "--exact",
                        "--ignored",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .envs(launch.env(rank))
                    .env("RLX_DP_ROLE", role)
                    .env("RLX_DP_OUT", dir.join(format!("rank{rank}.safetensors")))
                    .envs(env.iter().copied())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                (rank, child)
            })
            .collect();
        Ranks {
            children,
            dir,
            _launch: launch,
        }
    }

    /// Waits for every rank (killing any still running after `limit`) and returns each
    /// one's report with the seconds it took.
    fn finish(&mut self, limit: Duration) -> Vec<(usize, String, f64)> {
        let start = Instant::now();
        let mut done = Vec::new();
        while !self.children.is_empty() {
            let mut i = 0;
            while i < self.children.len() {
                if let Some(status) = self.children[i].1.try_wait().unwrap() {
                    let (rank, _) = self.children.remove(i);
                    let report = std::fs::read_to_string(self.report(rank))
                        .unwrap_or_else(|_| format!("no report ({status})"));
                    done.push((rank, report, start.elapsed().as_secs_f64()));
                } else {
                    i += 1;
                }
            }
            if start.elapsed() > limit {
                for (rank, child) in &mut self.children {
                    let _ = child.kill();
                    let _ = child.wait();
                    done.push((
                        *rank,
                        "killed by the test".into(),
                        start.elapsed().as_secs_f64(),
                    ));
                }
                self.children.clear();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        done.sort_by_key(|d| d.0);
        done
    }

    fn report(&self, rank: usize) -> PathBuf {
        self.dir.join(format!("rank{rank}.txt"))
    }

    fn weights(&self, rank: usize) -> PathBuf {
        self.dir.join(format!("rank{rank}.safetensors"))
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn collectives_on_a_loopback_ring() {
    let mut ranks = Ranks::start(3, &[0, 1, 2], "collectives", &[]);
    for (rank, report, _) in ranks.finish(Duration::from_secs(120)) {
        assert!(report.starts_with("ok"), "rank {rank}: {report}");
    }
}

/// The reference: one process, [`Trainer`], whole batches, rank 0's initial weights.
fn one_process() -> Vec<(&'static str, HostTensor)> {
    let mut single = Trainer::new(&CpuBackend::default(), &mlp(), "loss", config()).unwrap();
    for (name, value) in initial(7) {
        single.set_weight(name, value.view()).unwrap();
    }
    for step in 0..STEPS {
        let (x, y) = batch(step, ROWS);
        single.step(&[("x", x.view()), ("y", y.view())]).unwrap();
    }
    WEIGHTS
        .iter()
        .map(|&(n, _)| (n, single.weight(n).unwrap()))
        .collect()
}

fn train_and_compare(size: usize, role: &str) {
    let reference = one_process();
    let mut ranks = Ranks::start(size, &(0..size).collect::<Vec<_>>(), role, &[]);
    for (rank, report, _) in ranks.finish(Duration::from_secs(180)) {
        assert!(report.starts_with("ok"), "rank {rank}: {report}");
    }
    let mut trained = Vec::new();
    for rank in 0..size {
        // Each rank saved its state; a one-process trainer resumes from it.
        let mut t = Trainer::new(&CpuBackend::default(), &mlp(), "loss", config()).unwrap();
        t.load(&ranks.weights(rank)).unwrap();
        assert_eq!(t.steps(), STEPS as u64);
        trained.push(
            WEIGHTS
                .iter()
                .map(|&(n, _)| t.weight(n).unwrap())
                .collect::<Vec<_>>(),
        );
    }
    for (rank, weights) in trained.iter().enumerate() {
        assert_eq!(weights, &trained[0], "rank {rank} differs from rank 0");
    }
    let worst = reference
        .iter()
        .zip(&trained[0])
        .map(|((_, a), b)| max_diff(a, b))
        .fold(0.0, f64::max);
    eprintln!("{size} ranks ({role}): max |w - w_one_process| = {worst:.3e}");
    // f32 rounding: sums over other orders, through 12 Adam steps, of weights below 1.
    assert!(worst <= 1e-5, "{size} ranks: {worst}");
}

#[test]
fn two_and_four_ranks_match_one_process() {
    train_and_compare(2, "train");
    train_and_compare(4, "train");
    train_and_compare(2, "train-mlx");
}

#[test]
fn a_killed_rank_fails_the_others() {
    let mut ranks = Ranks::start(3, &[0, 1, 2], "die", &[("RLX_DP_TIMEOUT", "20")]);
    for (rank, report, seconds) in ranks.finish(Duration::from_secs(120)) {
        eprintln!("rank {rank} after {seconds:.2} s: {report}");
        if rank == 1 {
            continue; // the one that exited
        }
        assert!(
            report.starts_with("error Failed") || report.starts_with("error Timeout"),
            "rank {rank}: {report}"
        );
        assert!(seconds < 20.0 + 10.0, "rank {rank} took {seconds} s");
    }
}

#[test]
fn a_stalled_rank_times_out_the_others() {
    let mut ranks = Ranks::start(3, &[0, 1, 2], "stall", &[("RLX_DP_TIMEOUT", "2")]);
    // The others give up after 2 s (the first to time out exits, which a neighbour may see
    // first as a lost connection); the staller is killed after 8.
    let mut timeouts = 0;
    for (rank, report, seconds) in ranks.finish(Duration::from_secs(8)) {
        eprintln!("rank {rank} after {seconds:.2} s: {report}");
        if rank == 1 {
            assert_eq!(report, "killed by the test");
            continue;
        }
        timeouts += usize::from(report.starts_with("error Timeout"));
        assert!(
            report.starts_with("error Timeout") || report.starts_with("error Failed"),
            "rank {rank}: {report}"
        );
        assert!(seconds < 2.0 + 5.0, "rank {rank} took {seconds} s");
    }
    assert!(timeouts >= 1, "no rank timed out");
}

#[test]
fn a_rank_that_never_joins_fails_the_join() {
    // Rank 1 of 3 is never started.
    let mut ranks = Ranks::start(3, &[0, 2], "collectives", &[("RLX_DP_JOIN_TIMEOUT", "2")]);
    for (rank, report, seconds) in ranks.finish(Duration::from_secs(60)) {
        eprintln!("rank {rank} after {seconds:.2} s: {report}");
        assert!(
            report.starts_with("error JoinTimeout") || report.starts_with("error NoGroup"),
            "rank {rank}: {report}"
        );
        assert!(seconds < 2.0 + 10.0, "rank {rank} took {seconds} s");
    }
}

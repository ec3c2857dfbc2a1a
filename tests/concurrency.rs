//! One compiled model shared by many threads (issue 17): runs with different batch sizes from
//! several threads at once give exactly what one thread gives, a bad call on one thread
//! leaves the others alone, and weights swapped while others run reach each run whole (all
//! old or all new). On the CPU (one and two worker threads per run) and on MLX (every mode,
//! on its default device).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rlx::backend::{Backend, RunError};
use rlx::cpu::{CpuBackend, CpuExecutable, CpuOptions};
use rlx::model::Compiled;
use rlx::models::bert::Bert;
use rlx::tensor::HostTensor;
use rlx_testkit::rng::Rng;
use rlx_testkit::testing::tiny_bert;

/// Threads running at once, and runs per thread.
const THREADS: usize = 4;
const RUNS: usize = 24;
/// Batch sizes 1..=BATCHES, each with its own sequence length: four plans in use at once.
const BATCHES: usize = 4;

fn compile<B: Backend>(backend: &B) -> Arc<Compiled>
where
    B::Executable: 'static,
{
    Arc::new(Bert::compile(backend, &tiny_bert()).unwrap().into_inner())
}

/// A deterministic weight set: values in [-0.1, 0.1) drawn from `seed`.
fn weights(model: &Compiled, seed: u64) -> Vec<(String, HostTensor)> {
    let mut rng = Rng(seed);
    model
        .manifest()
        .params
        .iter()
        .map(|spec| {
            let shape = spec.static_shape().unwrap();
            let n: usize = shape.iter().product();
            let values = (0..n).map(|_| rng.uniform(-0.1, 0.1) as f32).collect();
            (
                spec.name.clone(),
                HostTensor::from_vec(values, shape).unwrap(),
            )
        })
        .collect()
}

fn bind(model: &Compiled, weights: &[(String, HostTensor)]) {
    let views: Vec<(&str, _)> = weights
        .iter()
        .map(|(n, t)| (n.as_str(), t.view()))
        .collect();
    model.executable().set_weights(&views).unwrap();
}

/// Batch `b` (1-based): `b` rows of `2 b + 3` tokens, odd rows with their last token masked.
fn batch(b: usize) -> [HostTensor; 3] {
    let seq = 2 * b + 3;
    let ids = (0..b * seq).map(|k| ((k * 7 + b) % 50) as i64).collect();
    let mask = (0..b * seq)
        .map(|k| i64::from(!(k / seq % 2 == 1 && k % seq == seq - 1)))
        .collect();
    let types = (0..b * seq).map(|k| ((k % seq) * 2 / seq) as i64).collect();
    [ids, mask, types].map(|v| HostTensor::from_vec(v, [b, seq]).unwrap())
}

fn run(model: &Compiled, b: usize) -> Result<Vec<HostTensor>, RunError> {
    let [ids, mask, types] = batch(b);
    model.run_named(&[
        ("input_ids", ids.view()),
        ("attention_mask", mask.view()),
        ("token_type_ids", types.view()),
    ])
}

/// Whether `got` matches `want` output for output: bit for bit with `tolerance` 0, else
/// within `tolerance` of each value's magnitude (at least 1).
fn same(got: &[HostTensor], want: &[HostTensor], tolerance: f64) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| {
            g.shape() == w.shape()
                && g.to_f64_vec()
                    .iter()
                    .zip(w.to_f64_vec())
                    .all(|(a, b)| (a - b).abs() <= tolerance * b.abs().max(1.0))
        })
}

/// `THREADS` threads each run `RUNS` batches of rotating sizes; every result must match the
/// single-threaded one. Thread 0 also sends a wrongly typed input every fourth run, which
/// must fail with its own typed error and disturb no one.
fn shared_runs_match_single_threaded(label: &str, model: Arc<Compiled>, tolerance: f64) {
    bind(&model, &weights(&model, 7));
    let reference: Vec<Vec<HostTensor>> = (1..=BATCHES).map(|b| run(&model, b).unwrap()).collect();
    let reference = Arc::new(reference);
    let mismatches = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (model, reference) = (Arc::clone(&model), Arc::clone(&reference));
            let mismatches = Arc::clone(&mismatches);
            std::thread::spawn(move || {
                for r in 0..RUNS {
                    if t == 0 && r % 4 == 3 {
                        let bad = HostTensor::from_vec(vec![0.5f32; 14], [2, 7]).unwrap();
                        let [_, mask, types] = batch(2);
                        let refused = model.run_named(&[
                            ("input_ids", bad.view()),
                            ("attention_mask", mask.view()),
                            ("token_type_ids", types.view()),
                        ]);
                        assert!(
                            matches!(refused, Err(RunError::DType { .. })),
                            "{refused:?}"
                        );
                        continue;
                    }
                    let b = 1 + (t + r) % BATCHES;
                    let got = run(&model, b).unwrap();
                    if !same(&got, &reference[b - 1], tolerance) {
                        mismatches.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let mismatches = mismatches.load(Ordering::Relaxed);
    assert_eq!(
        mismatches, 0,
        "{label}: {mismatches} runs differ from one thread's"
    );
}

/// Runs on `THREADS - 1` threads while another swaps between two weight sets as fast as it
/// can: every run's outputs must all come from one set.
fn swapped_weights_reach_runs_whole(label: &str, model: Arc<Compiled>, tolerance: f64) {
    let sets = [weights(&model, 11), weights(&model, 23)];
    let mut reference: Vec<Vec<Vec<HostTensor>>> = Vec::new();
    for set in &sets {
        bind(&model, set);
        reference.push((1..=BATCHES).map(|b| run(&model, b).unwrap()).collect());
    }
    let reference = Arc::new(reference);
    let sets = Arc::new(sets);
    let running = Arc::new(AtomicBool::new(true));
    let swapper = {
        let (model, sets, running) = (Arc::clone(&model), Arc::clone(&sets), Arc::clone(&running));
        std::thread::spawn(move || {
            let mut swaps = 0usize;
            while running.load(Ordering::Relaxed) || swaps < 2 {
                bind(&model, &sets[swaps % 2]);
                swaps += 1;
                // A pause lets runs start under each set, not only the one bound longest.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            swaps
        })
    };
    let seen = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let runners: Vec<_> = (0..THREADS - 1)
        .map(|t| {
            let (model, reference, seen) = (
                Arc::clone(&model),
                Arc::clone(&reference),
                Arc::clone(&seen),
            );
            std::thread::spawn(move || {
                for r in 0..RUNS {
                    let b = 1 + (t + r) % BATCHES;
                    let got = run(&model, b).unwrap();
                    let which = (0..2)
                        .find(|&s| same(&got, &reference[s][b - 1], tolerance))
                        .unwrap_or(2);
                    seen[which].fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for runner in runners {
        runner.join().unwrap();
    }
    running.store(false, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let [a, b, mixed] = [0, 1, 2].map(|i| seen[i].load(Ordering::Relaxed));
    println!("{label}: {swaps} swaps; runs with set A {a}, set B {b}, neither {mixed}");
    assert!(swaps >= 2);
    assert_eq!(
        mixed, 0,
        "{label}: {mixed} runs saw neither weight set whole"
    );
}

fn cpu(threads: usize) -> CpuBackend {
    CpuBackend::new(CpuOptions {
        threads,
        ..CpuOptions::default()
    })
}

#[test]
fn executables_and_models_are_shareable_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<CpuExecutable>();
    shareable::<Compiled>();
    shareable::<Bert>();
    shareable::<rlx::models::minilm::SentenceEmbedder>();
    #[cfg(feature = "mlx")]
    shareable::<rlx::mlx::MlxExecutable>();
}

#[test]
fn cpu_runs_from_many_threads_match_one_thread() {
    for threads in [1, 2] {
        let label = format!("cpu threads={threads}");
        shared_runs_match_single_threaded(&label, compile(&cpu(threads)), 0.0);
    }
}

#[test]
fn cpu_weights_swap_atomically_under_load() {
    for threads in [1, 2] {
        let label = format!("cpu threads={threads}");
        swapped_weights_reach_runs_whole(&label, compile(&cpu(threads)), 0.0);
    }
}

#[cfg(feature = "mlx")]
#[test]
fn mlx_runs_from_many_threads_match_one_thread() {
    use rlx::mlx::{MlxBackend, MlxMode};
    for mode in [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled] {
        let label = format!("mlx {mode:?}");
        shared_runs_match_single_threaded(&label, compile(&MlxBackend::new(mode)), 1e-5);
    }
}

#[cfg(feature = "mlx")]
#[test]
fn mlx_weights_swap_atomically_under_load() {
    use rlx::mlx::{MlxBackend, MlxMode};
    for mode in [MlxMode::Lazy, MlxMode::Compiled] {
        let label = format!("mlx {mode:?}");
        swapped_weights_reach_runs_whole(&label, compile(&MlxBackend::new(mode)), 1e-5);
    }
}

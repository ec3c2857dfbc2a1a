//! Data-parallel training and the collectives under it (`rlx::distributed`), on a ring over
//! loopback: ranks are copies of this test binary, started by the tests themselves.

use rlx::backend::Backend;
use rlx::cpu::CpuBackend;
use rlx::distributed::Group;
use rlx::ir::Graph;
use rlx::prelude::*;
use rlx::tensor::HostTensor;
use rlx::train::{DataParallelTrainer, Optimizer, TrainConfig, Trainer};
use rlx_workspace::rng::Rng;

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

fn rows_of(t: &HostTensor, start: usize, len: usize) -> HostTensor {
    let width = t.shape()[1];
    let v = t.as_slice::<f32>().unwrap()[start * width..(start + len) * width].to_vec();
    HostTensor::from_vec(v, [len, width]).unwrap()
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

/// A group of one runs the same step as [`Trainer`], bit for bit.
fn single_matches_trainer<B: Backend>(backend: &B)
where
    B::Executable: 'static,
{
    let graph = mlp();
    let mut single = Trainer::new(backend, &graph, "loss", config()).unwrap();
    let mut dp =
        DataParallelTrainer::new(backend, &graph, "loss", config(), Group::single()).unwrap();
    dp.set_bucket_bytes(256); // several buckets
    for (name, value) in initial(7) {
        single.set_weight(name, value.view()).unwrap();
        dp.set_weight(name, value.view()).unwrap();
    }
    for step in 0..5 {
        let (x, y) = batch(step, 24);
        let inputs = [("x", x.view()), ("y", y.view())];
        let a = single.step(&inputs).unwrap();
        let b = dp.step_weighted(&inputs, 24.0).unwrap();
        assert_eq!(a, b, "loss of step {step}");
    }
    for (name, _) in WEIGHTS {
        let d = max_diff(&single.weight(name).unwrap(), &dp.weight(name).unwrap());
        assert_eq!(d, 0.0, "{name}");
    }
    dp.check_in_sync().unwrap();
}

#[test]
fn group_of_one_matches_trainer() {
    single_matches_trainer(&CpuBackend::default());
    single_matches_trainer(&rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Lazy));
}

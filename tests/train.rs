//! Training through the public API: each optimizer's update against a reference written
//! from PyTorch's update rules, the cross-entropy loss, and a small classifier learning.

use rlx::backend::{Backend, Executable};
use rlx::cpu::CpuBackend;
use rlx::prelude::*;
use rlx::tensor::HostTensor;
use rlx::train::{Optimizer, Schedule, TrainConfig, Trainer};
use rlx::typed::{Const, Tensor, build};

/// `loss = Σ (w·a)² / 2 + Σ w·c` over a weight `w: f64[4]`: `∂loss/∂w = w·a² + c`.
fn quadratic() -> (Graph, [f64; 4], [f64; 4]) {
    let a = [0.5, -1.0, 2.0, 1.5];
    let c = [0.1, -0.2, 0.3, 0.0];
    let mut b = GraphBuilder::new();
    let w = b.param("w", DType::F64, [4]).unwrap();
    let av = b.constant(ConstantData::from_slice(&a, [4]).unwrap());
    let cv = b.constant(ConstantData::from_slice(&c, [4]).unwrap());
    let wa = b.mul(w, av).unwrap();
    let sq = b.mul(wa, wa).unwrap();
    let half = b.scalar(0.5, DType::F64);
    let sq = b.mul(sq, half).unwrap();
    let lin = b.mul(w, cv).unwrap();
    let total = b.add(sq, lin).unwrap();
    let loss = b.reduce(ReduceOp::Sum, total, &[0], false).unwrap();
    b.output("loss", loss).unwrap();
    (b.finish().unwrap(), a, c)
}

/// PyTorch's update rules, step by step, in f64.
fn reference(config: &TrainConfig, a: &[f64; 4], c: &[f64; 4], steps: usize) -> Vec<f64> {
    let mut w = vec![1.0, -0.5, 0.25, 2.0];
    let (mut m, mut v) = (vec![0.0; 4], vec![0.0; 4]);
    for t in 1..=steps {
        let lr = config.optimizer.lr() * config.schedule.factor((t - 1) as u64);
        let mut g: Vec<f64> = (0..4).map(|i| w[i] * a[i] * a[i] + c[i]).collect();
        if let Some(max) = config.clip_grad_norm {
            let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
            let factor = (max / (norm + 1e-6)).min(1.0);
            g.iter_mut().for_each(|x| *x *= factor);
        }
        match &config.optimizer {
            Optimizer::Sgd {
                momentum,
                nesterov,
                weight_decay,
                ..
            } => {
                for i in 0..4 {
                    let mut d = g[i] + weight_decay * w[i];
                    if *momentum != 0.0 {
                        m[i] = momentum * m[i] + d;
                        d = if *nesterov { d + momentum * m[i] } else { m[i] };
                    }
                    w[i] -= lr * d;
                }
            }
            Optimizer::Adam(s) | Optimizer::AdamW(s) => {
                let decoupled = matches!(config.optimizer, Optimizer::AdamW(_));
                let (b1, b2) = s.betas;
                for i in 0..4 {
                    let mut d = g[i];
                    if decoupled {
                        w[i] *= 1.0 - lr * s.weight_decay;
                    } else {
                        d += s.weight_decay * w[i];
                    }
                    m[i] = b1 * m[i] + (1.0 - b1) * d;
                    v[i] = b2 * v[i] + (1.0 - b2) * d * d;
                    let bc1 = 1.0 - b1.powi(t as i32);
                    let bc2 = 1.0 - b2.powi(t as i32);
                    let denom = v[i].sqrt() / bc2.sqrt() + s.eps;
                    w[i] -= lr / bc1 * m[i] / denom;
                }
            }
        }
    }
    w
}

fn configs() -> Vec<(&'static str, TrainConfig)> {
    vec![
        ("sgd", TrainConfig::new(Optimizer::sgd(0.1))),
        (
            "sgd momentum + decay",
            TrainConfig::new(Optimizer::sgd(0.05).momentum(0.9, false).weight_decay(0.01)),
        ),
        (
            "sgd nesterov, step schedule",
            TrainConfig::new(Optimizer::sgd(0.05).momentum(0.8, true)).schedule(Schedule::Step {
                every: 2,
                gamma: 0.5,
            }),
        ),
        (
            "adam + L2, clipped",
            TrainConfig::new(Optimizer::adam(0.01).weight_decay(0.1)).clip_grad_norm(0.5),
        ),
        (
            "adamw, warmup cosine",
            TrainConfig::new(Optimizer::adamw(0.02).betas(0.8, 0.99)).schedule(
                Schedule::WarmupCosine {
                    warmup: 2,
                    total: 5,
                    min_factor: 0.1,
                },
            ),
        ),
    ]
}

fn check_updates<B: Backend>(label: &str, backend: &B, tolerance: f64)
where
    B::Executable: 'static,
{
    let (graph, a, c) = quadratic();
    for (name, config) in configs() {
        let mut trainer = Trainer::new(backend, &graph, "loss", config.clone()).unwrap();
        let w0 = HostTensor::from_vec(vec![1.0f64, -0.5, 0.25, 2.0], [4]).unwrap();
        trainer.set_weight("w", w0.view()).unwrap();
        for _ in 0..6 {
            trainer.step(&[]).unwrap();
        }
        let got = trainer.weight("w").unwrap().to_f64_vec();
        let expected = reference(&config, &a, &c, 6);
        for (g, e) in got.iter().zip(&expected) {
            assert!(
                (g - e).abs() <= tolerance * e.abs().max(1.0),
                "{label} {name}: {got:?} vs {expected:?}"
            );
        }
        assert_eq!(trainer.steps(), 6);
    }
}

#[test]
fn each_optimizer_matches_its_reference_on_the_cpu() {
    check_updates("cpu", &CpuBackend::default(), 1e-12);
}

#[cfg(feature = "mlx")]
#[test]
fn each_optimizer_matches_its_reference_on_mlx() {
    use rlx::mlx::{Device, MlxBackend, MlxMode};
    for mode in [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled] {
        // The weights are f64, which MLX computes on its CPU device only (and whose sqrt it
        // evaluates in f32).
        let backend = MlxBackend::new(mode).with_device(Device::Cpu);
        check_updates(&format!("mlx {mode:?}"), &backend, 1e-5);
    }
}

#[test]
fn optimizer_state_is_named_like_the_weights() {
    let (graph, _, _) = quadratic();
    let config = TrainConfig::new(Optimizer::adam(0.01));
    let step = rlx::train::training_graph(&graph, "loss", &config).unwrap();
    let names: Vec<&str> = step.optimizer_state.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(names, ["optimizer.w.exp_avg", "optimizer.w.exp_avg_sq"]);
    assert_eq!(step.weights, ["w"]);
    // The weight and the moments are states the step writes; the outputs are the model's.
    let names = |outputs: &[rlx::ir::Output]| -> Vec<String> {
        outputs.iter().map(|o| o.name.clone()).collect()
    };
    assert_eq!(names(step.graph.outputs()), ["loss"]);
    assert_eq!(
        names(step.graph.writes()),
        ["w", "optimizer.w.exp_avg", "optimizer.w.exp_avg_sq"]
    );
    let bad = TrainConfig::new(Optimizer::sgd(0.1).momentum(0.0, true));
    assert!(rlx::train::training_graph(&graph, "loss", &bad).is_err());
}

#[test]
fn cross_entropy_matches_log_sum_exp() {
    rlx::dims!(Batch);
    let graph = build(|g| {
        let logits: Tensor<(Batch, Const<3>), f64> = g.input("logits");
        let labels: Tensor<(Batch,), i64> = g.input("labels");
        g.output("loss", logits.cross_entropy(labels));
    })
    .unwrap();
    let logits = [2.0, -1.0, 0.5, 100.0, 99.0, -50.0];
    let labels = [2i64, 1];
    let exe = CpuBackend::default().compile(&graph).unwrap();
    let lt = HostTensor::from_vec(logits.to_vec(), [2, 3]).unwrap();
    let lb = HostTensor::from_vec(labels.to_vec(), [2]).unwrap();
    let out = exe
        .run(&[("logits", lt.view()), ("labels", lb.view())], &[])
        .unwrap();
    let mut expected = 0.0;
    for row in 0..2 {
        let r = &logits[row * 3..row * 3 + 3];
        let max = r.iter().cloned().fold(f64::MIN, f64::max);
        let lse = max + r.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        expected += lse - r[labels[row] as usize];
    }
    expected /= 2.0;
    let got = out[0].to_f64_vec()[0];
    assert!((got - expected).abs() < 1e-12, "{got} vs {expected}");
}

/// Two interleaved spirals' worth of points in 2-D: not linearly separable.
fn rings(n: usize) -> (Vec<f32>, Vec<i64>) {
    let mut xs = Vec::with_capacity(2 * n);
    let mut ys = Vec::with_capacity(n);
    for i in 0..n {
        let class = (i % 2) as i64;
        let t = i as f32 / n as f32 * 6.0;
        let radius = if class == 0 { 0.5 } else { 1.5 } + 0.1 * (t * 7.0).sin();
        xs.push(radius * t.cos());
        xs.push(radius * t.sin());
        ys.push(class);
    }
    (xs, ys)
}

/// A 2 → 32 → 2 MLP on two concentric rings: AdamW reaches full training accuracy.
fn classifier_learns<B: Backend>(backend: &B)
where
    B::Executable: 'static,
{
    rlx::dims!(Batch);
    type C<const N: usize> = Const<N>;
    let graph = build(|g| {
        let x: Tensor<(Batch, C<2>)> = g.input("x");
        let labels: Tensor<(Batch,), i64> = g.input("labels");
        let w1: Tensor<(C<32>, C<2>)> = g.param("fc1.weight");
        let b1: Tensor<(C<32>,)> = g.param("fc1.bias");
        let w2: Tensor<(C<2>, C<32>)> = g.param("fc2.weight");
        let b2: Tensor<(C<2>,)> = g.param("fc2.bias");
        let h = (x.matmul_t(w1) + b1).relu();
        let logits = h.matmul_t(w2) + b2;
        g.output("loss", logits.cross_entropy(labels));
        g.output("logits", logits);
    })
    .unwrap();
    let config = TrainConfig::new(Optimizer::adamw(0.05).weight_decay(0.0));
    let mut trainer = Trainer::new(backend, &graph, "loss", config).unwrap();
    // Fixed pseudo-random initial weights.
    let mut state = 7u64;
    let mut uniform = |n: usize, bound: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * bound
            })
            .collect()
    };
    let init = [
        ("fc1.weight", vec![32, 2], 0.7),
        ("fc1.bias", vec![32], 0.7),
        ("fc2.weight", vec![2, 32], 0.17),
        ("fc2.bias", vec![2], 0.17),
    ];
    for (name, dims, bound) in init {
        let n = dims.iter().product();
        let t = HostTensor::from_vec(uniform(n, bound), dims).unwrap();
        trainer.set_weight(name, t.view()).unwrap();
    }
    let (xs, ys) = rings(200);
    let x = HostTensor::from_vec(xs, [200, 2]).unwrap();
    let y = HostTensor::from_vec(ys.clone(), [200]).unwrap();
    let first = trainer
        .step(&[("x", x.view()), ("labels", y.view())])
        .unwrap();
    let mut last = first;
    for _ in 0..300 {
        last = trainer
            .step(&[("x", x.view()), ("labels", y.view())])
            .unwrap();
    }
    assert!(last < first * 0.1, "loss went from {first} to {last}");
    let logits = trainer.outputs()[1].to_f64_vec();
    let correct = ys
        .iter()
        .enumerate()
        .filter(|(i, y)| (logits[2 * i + 1] > logits[2 * i]) == (**y == 1))
        .count();
    assert!(correct >= 196, "{correct} of 200 correct");
}

#[test]
fn a_classifier_learns_on_the_cpu() {
    classifier_learns(&CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn a_classifier_learns_on_mlx_compiled() {
    classifier_learns(&rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled));
}

#[test]
fn saving_and_loading_resumes_exactly() {
    use rlx::cpu::CpuOptions;
    let (graph, _, _) = quadratic();
    let backend = CpuBackend::new(CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    });
    let config = TrainConfig::new(Optimizer::adamw(0.05)).schedule(Schedule::WarmupCosine {
        warmup: 3,
        total: 20,
        min_factor: 0.0,
    });
    let w0 = HostTensor::from_vec(vec![1.0f64, -0.5, 0.25, 2.0], [4]).unwrap();
    let fresh = || {
        let mut t = Trainer::new(&backend, &graph, "loss", config.clone()).unwrap();
        t.set_weight("w", w0.view()).unwrap();
        t
    };
    let mut straight = fresh();
    for _ in 0..20 {
        straight.step(&[]).unwrap();
    }
    let path = std::env::temp_dir().join(format!("rlx-resume-{}.safetensors", std::process::id()));
    let mut first = fresh();
    for _ in 0..10 {
        first.step(&[]).unwrap();
    }
    first.save(&path).unwrap();
    let mut resumed = Trainer::new(&backend, &graph, "loss", config.clone()).unwrap();
    resumed.load(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(resumed.steps(), 10);
    for _ in 0..10 {
        resumed.step(&[]).unwrap();
    }
    for name in ["w", "optimizer.w.exp_avg", "optimizer.w.exp_avg_sq"] {
        let a = straight.weight(name).unwrap().to_f64_vec();
        let b = resumed.weight(name).unwrap().to_f64_vec();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b), "{name}");
    }
}

mod from_a_model {
    use rlx::cpu::CpuBackend;
    use rlx::nn::Linear;
    use rlx::tensor::HostTensor;
    use rlx::train::{Optimizer, TrainConfig, Trainer};
    use rlx::typed::{Const, Tensor};

    rlx::dims!(Batch);

    #[derive(rlx::Params)]
    pub struct RegressorParams<'g> {
        fc: Linear<'g, Const<3>, Const<1>>,
    }

    /// A `#[rlx::model]` whose second output is its training loss, in the same typed Rust.
    #[rlx::model(outputs(prediction, loss))]
    pub fn regressor<'g>(
        p: &RegressorParams<'g>,
        x: Tensor<'g, (Batch, Const<3>)>,
        target: Tensor<'g, (Batch, Const<1>)>,
    ) -> (Tensor<'g, (Batch, Const<1>)>, Tensor<'g, ()>) {
        let prediction = p.fc.forward(x);
        (prediction, prediction.mse(target))
    }

    #[test]
    fn a_model_trains_through_its_loss_output() {
        let graph = Regressor::build().unwrap();
        let config = TrainConfig::new(Optimizer::sgd(0.1).momentum(0.9, true));
        let mut trainer = Trainer::new(&CpuBackend::default(), &graph, "loss", config).unwrap();
        // The bound layout is `[in, out]` (the checkpoint's `[out, in]` is transposed on load).
        let zeros3 = HostTensor::from_vec(vec![0.0f32; 3], [3, 1]).unwrap();
        trainer.set_weight("fc.weight", zeros3.view()).unwrap();
        let bias = HostTensor::from_vec(vec![0.0f32], [1]).unwrap();
        trainer.set_weight("fc.bias", bias.view()).unwrap();
        // target = x · [1, -2, 0.5] + 0.25
        let xs: Vec<f32> = (0..24).map(|i| ((i * 7) % 11) as f32 / 5.0 - 1.0).collect();
        let ys: Vec<f32> = xs
            .chunks(3)
            .map(|r| r[0] - 2.0 * r[1] + 0.5 * r[2] + 0.25)
            .collect();
        let x = HostTensor::from_vec(xs, [8, 3]).unwrap();
        let y = HostTensor::from_vec(ys, [8, 1]).unwrap();
        let mut loss = f64::INFINITY;
        for _ in 0..300 {
            loss = trainer
                .step(&[("x", x.view()), ("target", y.view())])
                .unwrap();
        }
        assert!(loss < 1e-8, "loss {loss}");
        let w = trainer.weight("fc.weight").unwrap().to_f64_vec();
        for (got, want) in w.iter().zip([1.0, -2.0, 0.5]) {
            assert!((got - want).abs() < 1e-3, "{w:?}");
        }
    }
}

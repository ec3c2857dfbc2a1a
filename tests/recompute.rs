//! Activation recomputation through the public API: a training step that keeps only the
//! checkpoints gives the same gradients and steps as one that keeps everything, on the
//! CPU and MLX, with a smaller live peak in the CPU's plan; adapters' dropout draws the
//! same masks again.

use rlx::autodiff::{Recompute, Wrt, gradients, gradients_with};
use rlx::backend::{Backend, Executable};
use rlx::cpu::CpuBackend;
use rlx::ir::{BinaryOp, DType, Graph, Op, ReduceOp, UnaryOp, evaluate_reference};
use rlx::models::llama::{LlamaConfig, LlamaFiles, LlamaLoss, LoraAdapter, LoraConfig, LoraTarget};
use rlx::tensor::HostTensor;
use rlx::train::{Optimizer, TrainConfig, Trainer, training_graph};
use rlx_testkit::llm::{Scratch, ids, reference, write_checkpoint};
use rlx_testkit::rng::Rng;

/// Rows of the chain's input: many, so its activations outweigh its gradients.
const ROWS: usize = 256;

/// `layers` blocks `x + tanh(x·U_i)·D_i` (`U_i` widening four times), each output a
/// checkpoint, then a sum.
fn chain(layers: usize, width: usize) -> Graph {
    let mut b = rlx::GraphBuilder::new();
    let mut x = b.input("x", DType::F64, [ROWS, width]).unwrap();
    for i in 0..layers {
        let up = b
            .param(&format!("u{i}"), DType::F64, [width, 4 * width])
            .unwrap();
        let down = b
            .param(&format!("d{i}"), DType::F64, [4 * width, width])
            .unwrap();
        let h = b.matmul(x, up).unwrap();
        let h = b.unary(UnaryOp::Tanh, h).unwrap();
        let h = b.matmul(h, down).unwrap();
        let h = b.binary(BinaryOp::Add, x, h).unwrap();
        x = b.op(Op::Checkpoint, &[h]).unwrap();
    }
    let loss = b.reduce(ReduceOp::Sum, x, &[0, 1], false).unwrap();
    b.output("loss", loss).unwrap();
    b.finish().unwrap()
}

/// The gradients of a chain are the same values with and without recomputation (by the
/// float64 reference and on the CPU); the recomputing graph reads its checkpoints through
/// `after`, and its plan's live peak is lower.
#[test]
fn recomputed_chain_has_the_same_gradients_and_a_lower_peak() {
    let (layers, width) = (6, 16);
    let forward = chain(layers, width);
    let kept = gradients(&forward, "loss", &Wrt::Params).unwrap();
    let again = gradients_with(
        &forward,
        "loss",
        &Wrt::Params,
        Recompute::BetweenCheckpoints,
    )
    .unwrap();
    let afters = again.iter().filter(|(_, n)| n.op == Op::After).count();
    assert!(afters >= layers - 1, "{afters} `after` nodes");
    assert_eq!(kept.iter().filter(|(_, n)| n.op == Op::After).count(), 0);

    let mut rng = Rng(61);
    let mut values: Vec<(String, HostTensor)> = vec![(
        "x".into(),
        HostTensor::from_vec(
            (0..ROWS * width)
                .map(|_| rng.uniform(-1.0, 1.0))
                .collect::<Vec<f64>>(),
            [ROWS, width],
        )
        .unwrap(),
    )];
    for i in 0..layers {
        for (name, dims) in [("u", [width, 4 * width]), ("d", [4 * width, width])] {
            let w: Vec<f64> = (0..4 * width * width)
                .map(|_| rng.uniform(-0.2, 0.2))
                .collect();
            values.push((format!("{name}{i}"), HostTensor::from_vec(w, dims).unwrap()));
        }
    }
    let named: Vec<(&str, &HostTensor)> = values.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let want = evaluate_reference(&kept, &named[..1], &named[1..], &[]).unwrap();
    let have = evaluate_reference(&again, &named[..1], &named[1..], &[]).unwrap();
    assert_eq!(want, have, "the float64 reference");

    let cpu = CpuBackend::default();
    let run = |graph: &Graph| {
        let exe = cpu.compile(graph).unwrap();
        for (name, t) in &values[1..] {
            exe.set_weight(name, t.view()).unwrap();
        }
        let out = exe.run(&[("x", values[0].1.view())], &[]).unwrap();
        (out, exe.plan_report(&[]).unwrap())
    };
    let (want, plain) = run(&kept);
    let (have, recomputing) = run(&again);
    for (k, (a, b)) in want.iter().zip(&have).enumerate() {
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!(
                (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                "output {k}: {x} against {y}"
            );
        }
    }
    println!(
        "live peak {} -> {} bytes, arena {} -> {}",
        plain.lower_bound, recomputing.lower_bound, plain.peak_bytes, recomputing.peak_bytes
    );
    assert!(recomputing.lower_bound < plain.lower_bound);
}

/// The tiny Llama of `tests/data/llm/tiny_decoders.json` with rank-4 adapters on every
/// projection, its checkpoint written to `dir`.
fn tiny_llama(dir: &std::path::Path) -> LlamaConfig {
    let data = reference("tiny_decoders");
    let case = &data["cases"]["llama"];
    write_checkpoint(case, false, dir, false);
    let mut config = LlamaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap();
    config.lora = Some(LoraConfig::new(4, 8.0, &LoraTarget::ALL));
    config
}

/// Five LoRA steps on the tiny Llama with `backend`, recomputing or not: the losses and
/// the trained adapter.
fn lora_steps<B: Backend>(
    backend: &B,
    dir: &std::path::Path,
    config: &LlamaConfig,
    recompute: bool,
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let graph = LlamaLoss::build(config).unwrap();
    let mut train = TrainConfig::new(Optimizer::adamw(1e-2)).train_only(config.adapter_params());
    if recompute {
        train = train.recompute_activations();
    }
    let mut trainer = Trainer::new(backend, &graph, "loss", train).unwrap();
    let manifest = LlamaLoss::manifest(config).unwrap();
    LlamaFiles::open(dir)
        .unwrap()
        .load_weights(trainer.executable(), &manifest, config)
        .unwrap();
    let adapter = LoraAdapter::init(config, config.lora.clone().unwrap(), 3).unwrap();
    adapter.bind_trainer(&mut trainer, config).unwrap();
    let prompt = ids(&reference("tiny_decoders")["prompt"]);
    let n = prompt.len();
    let rows: Vec<i64> = prompt.iter().chain(prompt.iter().rev()).copied().collect();
    let input = HostTensor::from_vec(rows.clone(), [2, n]).unwrap();
    let labels: Vec<i64> = rows.iter().map(|t| (t * 7 + 3) % 128).collect();
    let labels = HostTensor::from_vec(labels, [2, n]).unwrap();
    let dropout = config.lora.as_ref().is_some_and(|l| l.dropout > 0.0);
    let losses = (0..5i64)
        .map(|step| {
            let seed = HostTensor::from_vec(vec![step], [0usize; 0]).unwrap();
            let mut batch = vec![("input_ids", input.view()), ("labels", labels.view())];
            if dropout {
                batch.push(("dropout_seed", seed.view()));
            }
            trainer.step(&batch).unwrap()
        })
        .collect();
    let adapter = config
        .adapter_params()
        .iter()
        .map(|name| trainer.weight(name).unwrap().to_f64_vec())
        .collect();
    (losses, adapter)
}

fn assert_same_steps(
    label: &str,
    want: &(Vec<f64>, Vec<Vec<f64>>),
    have: &(Vec<f64>, Vec<Vec<f64>>),
) {
    for (a, b) in want.0.iter().zip(&have.0) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "{label}: loss {a} against {b}"
        );
    }
    for (w, h) in want.1.iter().zip(&have.1) {
        for (a, b) in w.iter().zip(h) {
            assert!((a - b).abs() <= 1e-5, "{label}: adapter {a} against {b}");
        }
    }
}

/// LoRA steps on a decoder whose layers are checkpoints: recomputing gives the steps that
/// keeping gives, on the CPU and on MLX, and the CPU plan's live peak is lower.
#[test]
fn recomputing_decoder_layers_keeps_the_steps() {
    let dir = Scratch::new("recompute-llama");
    let config = tiny_llama(dir.path());
    let cpu = CpuBackend::default();
    let kept = lora_steps(&cpu, dir.path(), &config, false);
    let again = lora_steps(&cpu, dir.path(), &config, true);
    assert!(kept.0[4] < kept.0[0], "the steps learn: {:?}", kept.0);
    assert_same_steps("cpu", &kept, &again);

    let graph = LlamaLoss::build(&config).unwrap();
    let report = |recompute: bool| {
        let mut train =
            TrainConfig::new(Optimizer::adamw(1e-2)).train_only(config.adapter_params());
        if recompute {
            train = train.recompute_activations();
        }
        let step = training_graph(&graph, "loss", &train).unwrap();
        let checkpoints = step
            .graph
            .iter()
            .filter(|(_, n)| n.op == Op::Checkpoint)
            .count();
        assert_eq!(checkpoints, config.num_layers, "one checkpoint per layer");
        let exe = cpu.compile(&step.graph).unwrap();
        exe.plan_report(&[("batch", 4), ("seq", 64)]).unwrap()
    };
    let (plain, recomputing) = (report(false), report(true));
    println!(
        "tiny Llama LoRA step, 4x64 tokens: live peak {} -> {} bytes",
        plain.lower_bound, recomputing.lower_bound
    );
    assert!(recomputing.lower_bound < plain.lower_bound);

    // With dropout on the adapters' inputs, the masks a step draws again in the backward
    // pass are the forward pass's: recomputing still gives the same steps.
    let mut dropping = config.clone();
    dropping.lora = dropping.lora.map(|l| l.with_dropout(0.3));
    let kept_dropping = lora_steps(&cpu, dir.path(), &dropping, false);
    let again_dropping = lora_steps(&cpu, dir.path(), &dropping, true);
    assert_same_steps("cpu with dropout", &kept_dropping, &again_dropping);
    assert!(
        (kept_dropping.0[1] - kept.0[1]).abs() > 1e-4,
        "dropout changes the steps: {:?} {:?}",
        kept_dropping.0,
        kept.0
    );

    #[cfg(feature = "mlx")]
    {
        use rlx::mlx::{MlxBackend, MlxMode};
        for mode in [MlxMode::Eager, MlxMode::Compiled] {
            let mlx = MlxBackend::new(mode);
            let label = format!("MLX {mode:?}");
            let kept_mlx = lora_steps(&mlx, dir.path(), &config, false);
            let again_mlx = lora_steps(&mlx, dir.path(), &config, true);
            assert_same_steps(&label, &kept_mlx, &again_mlx);
            // MLX draws the CPU's masks.
            let dropping_mlx = lora_steps(&mlx, dir.path(), &dropping, true);
            assert_same_steps(
                &format!("{label} with dropout"),
                &kept_dropping,
                &dropping_mlx,
            );
        }
    }
}

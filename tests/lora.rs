//! Low-rank adapters through the public API: the layer's gradients against finite
//! differences, the token loss against its definition, fine-tuning that trains the adapter
//! alone, switching and merging adapters, and PEFT's files both ways against PEFT itself
//! (`scripts/tiny_lora.py`, `tests/data/llm/tiny_lora.json`).

use rlx::autodiff::{Wrt, gradients};
use rlx::backend::{Backend, Executable};
use rlx::cpu::CpuBackend;
use rlx::ir::{Graph, evaluate_reference};
use rlx::models::llama::{
    Llama, LlamaConfig, LlamaLoss, LoraAdapter, LoraConfig, LoraError, LoraTarget,
    load_hf_checkpoint,
};
use rlx::nn::{Lora, LoraRank, Projection};
use rlx::tensor::HostTensor;
use rlx::train::{Optimizer, TrainConfig, Trainer};
use rlx::typed::{Const, Sizes, Tensor, build_with};
use rlx_testkit::llm::{Scratch, checkpoint_tensors, formula, ids, reference, write_checkpoint};
use rlx_testkit::rng::Rng;

rlx::dims!(Rows);

/// The tiny Llama of `tests/data/llm/tiny_decoders.json`, its checkpoint written to `dir`.
fn tiny_llama(dir: &std::path::Path) -> LlamaConfig {
    let data = reference("tiny_decoders");
    let case = &data["cases"]["llama"];
    write_checkpoint(case, false, dir, false);
    LlamaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap()
}

fn random(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect()
}

/// `Σ ((x·W + s·x·Aᵀ·Bᵀ) ⊙ r)` in f64: the gradients with respect to `x`, `A` and `B` from
/// the gradient graph against central differences (both by the float64 reference), and the
/// CPU's against the reference.
#[test]
fn lora_layer_gradients_match_finite_differences() {
    #[derive(rlx::Params)]
    struct Adapted<'g> {
        base: Projection<'g, Const<5>, Const<4>, f64>,
        adapter: Lora<'g, Const<5>, Const<4>, f64>,
    }
    let graph = build_with(&Sizes::new().with::<LoraRank>(3), |g| {
        let p: Adapted = g.params();
        let x: Tensor<(Rows, Const<5>), f64> = g.input("x");
        let r: Tensor<(Rows, Const<4>), f64> = g.input("r");
        let y = p.base.forward(x) + p.adapter.forward(x, 1.5);
        g.output("loss", (y * r).sum::<0>().sum::<0>());
    })
    .unwrap();
    let wrt = ["x", "adapter.lora_a", "adapter.lora_b"];
    let backward = gradients(
        &graph,
        "loss",
        &Wrt::Named(wrt.iter().map(|s| s.to_string()).collect()),
    )
    .unwrap();
    let mut rng = Rng(11);
    let mut values: Vec<(&str, HostTensor)> = [
        ("x", vec![2, 5]),
        ("r", vec![2, 4]),
        ("base.weight", vec![5, 4]),
        ("adapter.lora_a", vec![3, 5]),
        ("adapter.lora_b", vec![4, 3]),
    ]
    .into_iter()
    .map(|(name, dims)| {
        let n = dims.iter().product();
        (
            name,
            HostTensor::from_vec(random(&mut rng, n), dims).unwrap(),
        )
    })
    .collect();
    let eval = |graph: &Graph, values: &[(&str, HostTensor)]| {
        let inputs: Vec<(&str, &HostTensor)> = values[..2].iter().map(|(n, t)| (*n, t)).collect();
        let params: Vec<(&str, &HostTensor)> = values[2..].iter().map(|(n, t)| (*n, t)).collect();
        evaluate_reference(graph, &inputs, &params, &[]).unwrap()
    };
    let exact = eval(&backward, &values);
    for (k, name) in wrt.iter().enumerate() {
        let grad = exact[1 + k].to_f64_vec();
        let slot = values.iter().position(|(n, _)| n == name).unwrap();
        let base = values[slot].1.clone();
        for i in 0..grad.len() {
            let mut at = |delta: f64| {
                let mut v = base.to_f64_vec();
                v[i] += delta;
                values[slot].1 = HostTensor::from_vec(v, base.shape().to_vec()).unwrap();
                eval(&graph, &values)[0].to_f64_vec()[0]
            };
            let h = 1e-6;
            let fd = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (grad[i] - fd).abs() <= 1e-7 + 1e-7 * fd.abs(),
                "grad/{name}[{i}] {} vs {fd}",
                grad[i]
            );
        }
        values[slot].1 = base;
    }
    // The CPU's gradients against the reference's.
    let exe = CpuBackend::default().compile(&backward).unwrap();
    for (name, value) in &values[2..] {
        exe.set_weight(name, value.view()).unwrap();
    }
    let inputs: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
        values[..2].iter().map(|(n, t)| (*n, t.view())).collect();
    let got = exe.run(&inputs, &[]).unwrap();
    for (g, e) in got.iter().zip(&exact) {
        for (a, b) in g.to_f64_vec().iter().zip(e.to_f64_vec()) {
            assert!((a - b).abs() < 1e-12 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }
}

/// The token loss: the mean of `-log softmax(logits)[label]` over labelled rows alone, as
/// computed here in f64; and its gradient against central differences.
#[test]
fn masked_cross_entropy_skips_unlabelled_rows() {
    let graph = build_with(&Sizes::new(), |g| {
        let logits: Tensor<(Rows, Const<6>), f64> = g.input("logits");
        let labels: Tensor<(Rows,), i64> = g.input("labels");
        g.output("loss", logits.masked_cross_entropy(labels));
    })
    .unwrap();
    let mut rng = Rng(5);
    let logits = random(&mut rng, 4 * 6)
        .iter()
        .map(|v| 3.0 * v)
        .collect::<Vec<_>>();
    let labels = vec![2i64, -100, 5, 6];
    let expected = {
        let mut sum = 0.0;
        for (row, &label) in labels
            .iter()
            .enumerate()
            .filter(|(_, l)| (0..6).contains(*l))
        {
            let z = &logits[row * 6..row * 6 + 6];
            let lse = z.iter().map(|v| v.exp()).sum::<f64>().ln();
            sum += lse - z[label as usize];
        }
        sum / 2.0
    };
    let labels = HostTensor::from_vec(labels, [4]).unwrap();
    let at = |logits: &[f64]| {
        let logits = HostTensor::from_vec(logits.to_vec(), [4, 6]).unwrap();
        evaluate_reference(
            &graph,
            &[("logits", &logits), ("labels", &labels)],
            &[],
            &[],
        )
        .unwrap()[0]
            .to_f64_vec()[0]
    };
    assert!((at(&logits) - expected).abs() < 1e-12);
    let backward = gradients(&graph, "loss", &Wrt::Named(vec!["logits".into()])).unwrap();
    let t = HostTensor::from_vec(logits.clone(), [4, 6]).unwrap();
    let grad = evaluate_reference(&backward, &[("logits", &t), ("labels", &labels)], &[], &[])
        .unwrap()[1]
        .to_f64_vec();
    for i in 0..logits.len() {
        let h = 1e-6;
        let (mut up, mut down) = (logits.clone(), logits.clone());
        up[i] += h;
        down[i] -= h;
        let fd = (at(&up) - at(&down)) / (2.0 * h);
        assert!(
            (grad[i] - fd).abs() < 1e-8,
            "logits[{i}]: {} vs {fd}",
            grad[i]
        );
    }
    // Nothing labelled: a loss of 0, not a division by zero.
    let none = HostTensor::from_vec(vec![-100i64; 4], [4]).unwrap();
    let t = HostTensor::from_vec(logits, [4, 6]).unwrap();
    let loss = evaluate_reference(&graph, &[("logits", &t), ("labels", &none)], &[], &[]).unwrap();
    assert_eq!(loss[0].to_f64_vec()[0], 0.0);
}

/// The prompt's logits of `model`, flattened.
fn logits_of(model: &Llama, prompt: &[i64]) -> Vec<f32> {
    let input = HostTensor::from_vec(prompt.to_vec(), [1, prompt.len()]).unwrap();
    model
        .run(&input)
        .unwrap()
        .as_slice::<f32>()
        .unwrap()
        .to_vec()
}

/// The tiny Llama of `config` compiled on the CPU, the checkpoint in `dir` loaded.
fn loaded(config: &LlamaConfig, dir: &std::path::Path) -> Llama {
    let model = Llama::compile(&CpuBackend::default(), config).unwrap();
    load_hf_checkpoint(&model, config, dir).unwrap();
    model
}

/// The index of the largest value of `row`.
fn argmax(row: &[f32]) -> usize {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap()
}

fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// An adapter of `rank` on `targets` of a model of `config`, valued by the formula.
fn formula_adapter(
    config: &LlamaConfig,
    rank: usize,
    alpha: f64,
    targets: &[LoraTarget],
) -> LoraAdapter {
    let lora = LoraConfig::new(rank, alpha, targets);
    let mut room = config.clone();
    room.lora = Some(lora.clone());
    let manifest = Llama::manifest(&room).unwrap();
    let tensors = room.adapter_params().into_iter().map(|name| {
        let shape = manifest.get(&name).unwrap().file_shape().unwrap();
        let values = formula(&name, shape.iter().product(), false);
        (name, HostTensor::from_vec(values, shape).unwrap())
    });
    LoraAdapter::new(config, lora, tensors).unwrap()
}

/// Room for adapters of rank 4 on every projection.
fn with_room(config: &LlamaConfig) -> LlamaConfig {
    let mut config = config.clone();
    config.lora = Some(LoraConfig::new(4, 8.0, &LoraTarget::ALL));
    config
}

/// A fresh adapter leaves the model as it was; fine-tuning moves the adapter alone (the
/// frozen weights stay bit for bit, and the optimizer holds state for the adapter only)
/// and lowers the loss of what it is shown; the trained adapter, bound to a compiled
/// model, gives what the trainer's model gives.
#[test]
fn fine_tuning_trains_the_adapter_alone() {
    let dir = Scratch::new("lora-finetune");
    let base_config = tiny_llama(dir.path());
    let config = with_room(&base_config);
    let backend = CpuBackend::default();
    let prompt = ids(&reference("tiny_decoders")["prompt"]);

    let base = loaded(&base_config, dir.path());
    let adapted = loaded(&config, dir.path());
    let before = logits_of(&base, &prompt);
    assert_eq!(logits_of(&adapted, &prompt), before, "zero adapters");
    let fresh = LoraAdapter::init(&config, config.lora.clone().unwrap(), 7).unwrap();
    fresh.bind(&adapted, &config).unwrap();
    assert_eq!(
        logits_of(&adapted, &prompt),
        before,
        "a fresh adapter (B = 0)"
    );

    // Learn to continue each position of the prompt with a fixed token.
    let graph = LlamaLoss::build(&config).unwrap();
    let train = TrainConfig::new(Optimizer::adamw(1e-2)).train_only(config.adapter_params());
    let mut trainer = Trainer::new(&backend, &graph, "loss", train).unwrap();
    let manifest = LlamaLoss::manifest(&config).unwrap();
    let files = rlx::models::llama::LlamaFiles::open(dir.path()).unwrap();
    files
        .load_weights(trainer.executable(), &manifest, &config)
        .unwrap();
    fresh.bind_trainer(&mut trainer, &config).unwrap();
    let frozen = trainer.weight("blk.0.attn_q.weight").unwrap();
    let n = prompt.len();
    let input = HostTensor::from_vec(prompt.clone(), [1, n]).unwrap();
    // The first half of the positions unlabelled, the rest labelled 42.
    let labels: Vec<i64> = (0..n).map(|i| if i < n / 2 { -100 } else { 42 }).collect();
    let labels = HostTensor::from_vec(labels, [1, n]).unwrap();
    let batch = [("input_ids", input.view()), ("labels", labels.view())];
    let first = trainer.step(&batch).unwrap();
    let mut last = first;
    for _ in 0..30 {
        last = trainer.step(&batch).unwrap();
    }
    println!("loss {first:.4} -> {last:.4}");
    assert!(last < 0.1 * first, "loss {first} -> {last}");
    assert_eq!(trainer.weight("blk.0.attn_q.weight").unwrap(), frozen);
    let saved = Scratch::new("lora-finetune-state");
    let state = saved.path().join("state.safetensors");
    trainer.save(&state).unwrap();
    let mut names = Vec::new();
    rlx::weights::read_tensors(&state, &mut |name, _| {
        names.push(name.to_string());
        Ok(())
    })
    .unwrap();
    assert!(
        names
            .iter()
            .all(|n| n.contains(".lora_") || n == "optimizer.step"),
        "{names:?}"
    );
    assert_eq!(names.len(), 3 * config.adapter_params().len() + 1);

    // The trained adapter on a compiled model: the position after the prompt now says 42.
    let trained = LoraAdapter::from_trainer(&trainer, &config).unwrap();
    trained.bind(&adapted, &config).unwrap();
    let after = logits_of(&adapted, &prompt);
    let vocab = config.vocab_size;
    let last_row = &after[(n - 1) * vocab..];
    assert_eq!(argmax(last_row), 42);
}

/// Adapters of lower rank and fewer targets bind to one compiled model and switch per
/// run; merged into a model without adapters they give the same logits, and unmerged
/// the base again.
#[test]
fn adapters_switch_and_merge() {
    let dir = Scratch::new("lora-switch");
    let base_config = tiny_llama(dir.path());
    let config = with_room(&base_config);
    let prompt = ids(&reference("tiny_decoders")["prompt"]);
    let adapted = loaded(&config, dir.path());
    let base = loaded(&base_config, dir.path());
    let plain = logits_of(&base, &prompt);

    // Two adapters valued by the formula: rank 2 on two targets, rank 4 on every one.
    let make =
        |rank, alpha, targets: &[LoraTarget]| formula_adapter(&base_config, rank, alpha, targets);
    let small = make(2, 3.0, &[LoraTarget::Key, LoraTarget::Down]);
    let full = make(4, 2.0, &LoraTarget::ALL);
    small.bind(&adapted, &config).unwrap();
    let with_small = logits_of(&adapted, &prompt);
    full.bind(&adapted, &config).unwrap();
    let with_full = logits_of(&adapted, &prompt);
    small.bind(&adapted, &config).unwrap();
    assert_eq!(logits_of(&adapted, &prompt), with_small, "switching back");
    assert!(largest_difference(&with_small, &plain) > 0.1);
    assert!(largest_difference(&with_full, &with_small) > 0.1);
    LoraAdapter::unbind(&adapted).unwrap();
    assert_eq!(logits_of(&adapted, &prompt), plain);

    for (adapter, expected) in [(&small, &with_small), (&full, &with_full)] {
        adapter.merge_into(&base, &base_config).unwrap();
        let merged = logits_of(&base, &prompt);
        let error = largest_difference(&merged, expected);
        println!("merged: largest logit difference {error:.2e}");
        assert!(error < 1e-4, "merged logits off by {error}");
        adapter.unmerge_from(&base, &base_config).unwrap();
        let error = largest_difference(&logits_of(&base, &prompt), &plain);
        assert!(error < 1e-5, "unmerged logits off by {error}");
    }

    // What does not fit is an error, not a wrong model.
    let wide = make(8, 8.0, &[LoraTarget::Query]);
    assert!(matches!(
        wide.bind(&adapted, &config),
        Err(LoraError::Config(_))
    ));
    assert!(matches!(
        small.bind(&base, &base_config),
        Err(LoraError::Config(_))
    ));
    let bad = LoraAdapter::new(
        &base_config,
        LoraConfig::new(2, 2.0, &[LoraTarget::Key]),
        [(
            "blk.0.attn_k.lora_a".to_string(),
            HostTensor::zeros(rlx::ir::DType::F32, [3, 64]),
        )],
    );
    assert!(matches!(bad, Err(LoraError::Bind { .. })));
}

/// PEFT's files both ways: an adapter PEFT saved (its `adapter_config.json` as PEFT wrote
/// it, its factors valued by the formula under PEFT's names) loads and gives PEFT's
/// logits; an adapter RLX saves is byte for byte the one PEFT was shown
/// (`tests/data/llm/tiny_lora_rlx/`), and PEFT's logits with it are RLX's.
#[test]
fn peft_adapters_both_ways() {
    let dir = Scratch::new("lora-peft");
    let base_config = tiny_llama(dir.path());
    let config = with_room(&base_config);
    let ours = formula_adapter(
        &base_config,
        2,
        3.0,
        &[LoraTarget::Key, LoraTarget::Gate, LoraTarget::Up],
    );
    let fixture = rlx_testkit::llm::data_dir().join("llm/tiny_lora_rlx");
    if std::env::var_os("RLX_UPDATE_LORA_FIXTURE").is_some() {
        ours.save_peft(&fixture, "tiny-llama").unwrap();
        return;
    }
    let data = reference("tiny_lora");
    let prompt = ids(&data["prompt"]);
    let model = loaded(&config, dir.path());
    let expect = |record: &serde_json::Value| -> Vec<f32> {
        record["logits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
            })
            .collect()
    };

    // PEFT to RLX.
    let peft = &data["peft_saved"];
    let saved = Scratch::new("lora-peft-saved");
    std::fs::write(
        saved.path().join("adapter_config.json"),
        peft["adapter_config"].as_str().unwrap(),
    )
    .unwrap();
    // PEFT's names and shapes, valued by the formula as the script valued them.
    let tensors = checkpoint_tensors(peft, false);
    rlx::weights::save_tensors(&saved.path().join("adapter_model.safetensors"), &tensors).unwrap();
    let adapter = LoraAdapter::load_peft(saved.path(), &base_config).unwrap();
    assert_eq!(adapter.config().rank, 4);
    assert_eq!(adapter.config().targets.len(), 4);
    adapter.bind(&model, &config).unwrap();
    let error = largest_difference(&logits_of(&model, &prompt), &expect(peft));
    println!("PEFT's adapter: largest logit difference {error:.2e}");
    assert!(error < 1e-4, "logits off by {error}");

    // RLX to PEFT.
    let written = Scratch::new("lora-rlx-saved");
    ours.save_peft(written.path(), "tiny-llama").unwrap();
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        let a = std::fs::read(written.path().join(file)).unwrap();
        let b = std::fs::read(fixture.join(file)).unwrap();
        assert!(a == b, "{file} differs from what PEFT was shown");
    }
    assert_eq!(
        LoraAdapter::load_peft(written.path(), &base_config).unwrap(),
        ours
    );
    ours.bind(&model, &config).unwrap();
    let error = largest_difference(&logits_of(&model, &prompt), &expect(&data["rlx_saved"]));
    println!("RLX's adapter in PEFT: largest logit difference {error:.2e}");
    assert!(error < 1e-4, "logits off by {error}");
}

/// Adapter files PEFT's settings RLX cannot apply, or broken ones: typed errors naming
/// the setting, never a panic.
#[test]
fn unsupported_or_broken_peft_files_are_errors() {
    let dir = Scratch::new("lora-hostile");
    let base_config = tiny_llama(dir.path());
    let good = formula_adapter(&base_config, 2, 4.0, &[LoraTarget::Query]);
    let case = Scratch::new("lora-hostile-case");
    good.save_peft(case.path(), "tiny").unwrap();
    let config_path = case.path().join("adapter_config.json");
    let original = std::fs::read_to_string(&config_path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&original).unwrap();
    for (key, value, says) in [
        ("use_dora", serde_json::json!(true), "use_dora"),
        ("bias", serde_json::json!("all"), "bias"),
        (
            "rank_pattern",
            serde_json::json!({"q_proj": 8}),
            "rank_pattern",
        ),
        (
            "modules_to_save",
            serde_json::json!(["lm_head"]),
            "modules_to_save",
        ),
        (
            "target_modules",
            serde_json::json!(["embed_tokens"]),
            "embed_tokens",
        ),
        (
            "target_modules",
            serde_json::json!(".*proj"),
            "target_modules",
        ),
        ("r", serde_json::json!(0), "r must"),
        ("r", serde_json::json!(3), "takes f32 [3"),
        ("lora_alpha", serde_json::json!("big"), "lora_alpha"),
        ("peft_type", serde_json::json!("IA3"), "IA3"),
        (
            "lora_dropout",
            serde_json::json!(1.5),
            "dropout must be in [0, 1)",
        ),
        ("lora_dropout", serde_json::json!("some"), "lora_dropout"),
    ] {
        let mut changed = json.clone();
        changed[key] = value;
        std::fs::write(&config_path, changed.to_string()).unwrap();
        let error = LoraAdapter::load_peft(case.path(), &base_config).unwrap_err();
        assert!(error.to_string().contains(says), "{key}: {error}");
    }
    // PEFT's dropout is read, and written back.
    let mut dropping = json.clone();
    dropping["lora_dropout"] = serde_json::json!(0.05);
    std::fs::write(&config_path, dropping.to_string()).unwrap();
    let loaded = LoraAdapter::load_peft(case.path(), &base_config).unwrap();
    assert_eq!(loaded.config().dropout, 0.05);
    loaded.save_peft(case.path(), "tiny").unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    assert_eq!(written["lora_dropout"], 0.05);
    std::fs::write(&config_path, "{not json").unwrap();
    assert!(matches!(
        LoraAdapter::load_peft(case.path(), &base_config),
        Err(LoraError::File { .. })
    ));
    std::fs::write(&config_path, &original).unwrap();
    let weights = case.path().join("adapter_model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    for cut in [0, 7, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&weights, &bytes[..cut]).unwrap();
        assert!(
            LoraAdapter::load_peft(case.path(), &base_config).is_err(),
            "cut at {cut}"
        );
    }
    // One factor without the other.
    let only_a = vec![(
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".to_string(),
        HostTensor::zeros(rlx::ir::DType::F32, [2, 64]),
    )];
    rlx::weights::save_tensors(&weights, &only_a).unwrap();
    let error = LoraAdapter::load_peft(case.path(), &base_config).unwrap_err();
    assert!(error.to_string().contains("lora_b"), "{error}");
    // A model of other sizes.
    std::fs::write(&weights, &bytes).unwrap();
    let mut wider = base_config.clone();
    wider.hidden_size = 128;
    assert!(LoraAdapter::load_peft(case.path(), &wider).is_err());
}

/// Decoders with an adapter, as `09_generate --adapter` and `rlx-serve --adapter` make them
/// (`LlamaFiles::config_for`, room for the adapter, `decoder_for` / `batch_decoder_for`,
/// `bind`): greedy tokens through the caches are those of the whole-prompt model with the
/// same adapter, for one sequence and for a batch.
#[test]
fn decoders_generate_with_an_adapter() {
    use rlx::generate::{BatchGenerator, GenerateOptions, Generator, SamplingParams};
    use std::sync::Arc;
    let dir = Scratch::new("lora-decoders");
    let base_config = tiny_llama(dir.path());
    let backend = CpuBackend::default();
    let prompt = ids(&reference("tiny_decoders")["prompt"]);
    let adapter = formula_adapter(&base_config, 2, 3.0, &[LoraTarget::Value, LoraTarget::Up]);

    // The reference: greedy by hand over the whole-prompt model.
    let mut room = base_config.clone();
    room.lora = Some(adapter.config().clone());
    let whole = loaded(&room, dir.path());
    adapter.bind(&whole, &room).unwrap();
    let mut expected = prompt.clone();
    let vocab = room.vocab_size;
    for _ in 0..6 {
        let logits = logits_of(&whole, &expected);
        let last = &logits[logits.len() - vocab..];
        expected.push(argmax(last) as i64);
    }
    let expected = expected[prompt.len()..].to_vec();

    let files = rlx::models::llama::LlamaFiles::open(dir.path()).unwrap();
    let config = files.config_for(None).unwrap();
    assert_eq!(config, base_config);
    let mut config = config;
    config.lora = Some(adapter.config().clone());
    let options = GenerateOptions {
        max_tokens: expected.len(),
        sampling: SamplingParams::greedy(),
        stop_tokens: vec![],
    };
    let single = files.decoder_for(&backend, config.clone(), 64).unwrap();
    adapter.bind(single.compiled(), &config).unwrap();
    let generator = Generator::new(&backend, Arc::new(single)).unwrap();
    let tokens: Vec<i64> = generator
        .generate(&prompt, options.clone())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tokens, expected, "one sequence");

    let batch = files
        .batch_decoder_for(&backend, config.clone(), 64, 2)
        .unwrap();
    adapter.bind(batch.compiled(), &config).unwrap();
    let generator = BatchGenerator::new(&backend, Arc::new(batch)).unwrap();
    let short = &prompt[..5];
    let steps: Vec<Vec<Option<i64>>> = generator
        .generate(&[&prompt, short], &[options.clone(), options])
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let row: Vec<i64> = steps.iter().filter_map(|s| s[0]).collect();
    assert_eq!(row, expected, "a batch row");
}

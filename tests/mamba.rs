//! Mamba decoders against transformers (`scripts/tiny_mamba.py`,
//! `tests/data/llm/tiny_mamba.json`): tiny random configs whose weights come from a
//! formula both sides compute, written here as a Hugging Face folder and loaded through
//! the public API. Logits of the whole prompt; 10 greedy tokens through the carried
//! states (a `Generator`, and steps of 5 tokens with padding after the last); a context
//! started again at position 0 forgets what it held.

use std::sync::Arc;

use rlx::backend::Backend;
use rlx::generate::{Decoder, GenerateOptions, Generator, SamplingParams};
use rlx::models::mamba::{Mamba, MambaConfig, MambaDecoder, load_mamba_checkpoint};
use rlx::tensor::HostTensor;
use rlx_testkit::llm::{
    Scratch, argmax, case_logits, ids, largest_difference, reference, write_checkpoint,
};

const CASES: [&str; 2] = ["mamba", "mamba_bias"];

/// Logits within this of transformers' (both f32; the two sides differ in the order of
/// their sums and in how the scan composes its steps: under 1e-7 measured).
const BOUND: f64 = 1e-5;

fn mamba_matches<B: Backend<Executable: 'static>>(label: &str, backend: &B) {
    let data = reference("tiny_mamba");
    let prompt = ids(&data["prompt"]);
    for name in CASES {
        let case = &data["cases"][name];
        let dir = Scratch::new(&format!("tiny-{name}-{label}"));
        write_checkpoint(case, false, dir.path(), name == "mamba_bias");
        let config = MambaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap();

        // The whole prompt at once.
        let model = Mamba::compile(backend, &config).unwrap();
        let report = load_mamba_checkpoint(&model, &config, dir.path()).unwrap();
        assert_eq!(
            report.loaded,
            case["tensors"].as_array().unwrap().len(),
            "{name}"
        );
        let input = HostTensor::from_vec(prompt.clone(), [1, prompt.len()]).unwrap();
        let logits = model.run(&input).unwrap();
        let expected = case_logits(case);
        let worst = largest_difference(logits.as_slice::<f32>().unwrap(), &expected);
        println!("{name} {label}: largest logit error {worst:.2e} (bound {BOUND})");
        assert!(worst < BOUND, "{name} {label}: logits off by {worst}");

        // Greedy through the carried states.
        let margin = case["greedy_margin"].as_f64().unwrap();
        assert!(
            margin > 100.0 * BOUND,
            "{name}: the reference's greedy lead {margin} is too thin to compare"
        );
        let expected_tokens = ids(&case["greedy"]);
        let decoder = Arc::new(MambaDecoder::from_hf_dir(backend, dir.path(), 64).unwrap());
        let generator = Generator::new(backend, decoder.clone()).unwrap();
        let options = GenerateOptions {
            max_tokens: expected_tokens.len(),
            sampling: SamplingParams::greedy(),
            stop_tokens: vec![],
        };
        let tokens: Vec<i64> = generator
            .generate(&prompt, options)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(tokens, expected_tokens, "{name} {label} greedy");

        // Steps of 5 tokens, the last chunk of the prompt padded to 5 with tokens that
        // must leave no trace; then the same context from position 0 again.
        let mut ctx = decoder.new_context().unwrap();
        for round in 0..2 {
            let mut fed = prompt.clone();
            let mut pos = 0;
            let mut first_logits = None;
            while fed.len() < prompt.len() + expected_tokens.len() {
                let end = if pos < prompt.len() {
                    (pos + 5).min(prompt.len())
                } else {
                    fed.len()
                };
                let mut chunk = fed[pos..end].to_vec();
                while pos < prompt.len() && chunk.len() < 5 {
                    chunk.push(127);
                }
                let logits = decoder.step(&mut ctx, &chunk, pos, end - pos - 1).unwrap();
                let row = logits.as_slice::<f32>().unwrap();
                if end == prompt.len() {
                    let want = &expected[(prompt.len() - 1) * 128..prompt.len() * 128];
                    let worst = largest_difference(row, want);
                    assert!(worst < BOUND, "{name} {label}: step logits off by {worst}");
                    first_logits = Some(row.to_vec());
                }
                pos = end;
                if pos == fed.len() {
                    fed.push(argmax(row).expect("a row of logits"));
                }
            }
            assert!(first_logits.is_some());
            assert_eq!(
                fed[prompt.len()..],
                expected_tokens[..],
                "{name} {label} greedy in steps of 5, round {round}"
            );
        }
    }
}

#[test]
fn mamba_matches_transformers_on_the_cpu() {
    mamba_matches("cpu", &rlx::cpu::CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn mamba_matches_transformers_on_mlx() {
    mamba_matches("mlx", &rlx::mlx::MlxBackend::default());
}

/// What the code cannot build is an error naming its key; transformers' defaults fill
/// what a config leaves out.
#[test]
fn mamba_configs_name_what_is_wrong() {
    let base = r#""hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128"#;
    let config =
        MambaConfig::from_hf_json(&format!(r#"{{"model_type": "mamba", {base}}}"#)).unwrap();
    assert_eq!(
        (
            config.intermediate_size,
            config.state_size,
            config.conv_kernel,
            config.time_step_rank
        ),
        (128, 16, 4, 4)
    );
    assert!(config.tied_output && config.conv_bias && !config.proj_bias);
    let error = |extra: &str| {
        MambaConfig::from_hf_json(&format!("{{{base}, {extra}}}"))
            .unwrap_err()
            .to_string()
    };
    assert!(error(r#""model_type": "llama""#).starts_with("model_type"));
    assert!(error(r#""model_type": "mamba", "hidden_act": "gelu""#).starts_with("hidden_act"));
    assert!(error(r#""model_type": "mamba", "state_size": 0"#).starts_with("state_size"));
    assert!(error(r#""model_type": "mamba", "conv_kernel": 1"#).starts_with("conv_kernel"));
    assert!(
        error(r#""model_type": "mamba", "num_hidden_layers": 100000"#)
            .starts_with("num_hidden_layers")
    );
    assert!(error(r#""model_type": "mamba", "vocab_size": -3"#).starts_with("vocab_size"));
    assert!(
        MambaConfig::from_hf_json("{")
            .unwrap_err()
            .to_string()
            .starts_with("config.json")
    );
    let missing = MambaConfig::from_hf_json(r#"{"model_type": "mamba", "hidden_size": 64}"#);
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .contains("num_hidden_layers")
    );
    // A config made by hand is held to the same checks when the graph is built.
    let mut by_hand = config.clone();
    by_hand.conv_kernel = 0;
    let Err(error) = Mamba::compile(&rlx::cpu::CpuBackend::default(), &by_hand) else {
        panic!("a convolution of no taps compiled");
    };
    assert!(error.to_string().contains("conv_kernel"), "{error}");
}

/// A tiny Mamba learns a batch through `mamba_loss` and `Trainer`: gradients flow through
/// the scan, the convolution and every projection; recomputing each block's activations
/// in the backward pass gives the same steps as keeping them.
fn mamba_trains<B: Backend>(label: &str, backend: &B) {
    use rlx::models::mamba::MambaLoss;
    use rlx::train::{Optimizer, TrainConfig, Trainer};
    let data = reference("tiny_mamba");
    let config =
        MambaConfig::from_hf_json(data["cases"]["mamba_bias"]["config_json"].as_str().unwrap())
            .unwrap();
    let graph = MambaLoss::build(&config).unwrap();
    let manifest = MambaLoss::manifest(&config).unwrap();
    let prompt = ids(&data["prompt"]);
    let n = prompt.len();
    let input = HostTensor::from_vec(prompt.clone(), [1, n]).unwrap();
    // Each position's next token is the prompt's, shifted; the first two unlabelled.
    let labels: Vec<i64> = (0..n)
        .map(|i| if i < 2 { -100 } else { prompt[(i + 1) % n] })
        .collect();
    let labels = HostTensor::from_vec(labels, [1, n]).unwrap();
    let batch = [("input_ids", input.view()), ("labels", labels.view())];
    let mut runs = Vec::new();
    for recompute in [false, true] {
        let mut train = TrainConfig::new(Optimizer::adamw(1e-2));
        if recompute {
            train = train.recompute_activations();
        }
        let mut trainer = Trainer::new(backend, &graph, "loss", train).unwrap();
        for spec in &manifest.params {
            let shape = spec.static_shape().unwrap();
            let len = shape.iter().product();
            let values = rlx_testkit::llm::formula(&spec.name, len, false);
            let value = HostTensor::from_vec(values, shape).unwrap();
            trainer.set_weight(&spec.name, value.view()).unwrap();
        }
        let losses: Vec<f64> = (0..30).map(|_| trainer.step(&batch).unwrap()).collect();
        println!(
            "{label} recompute={recompute}: loss {:.4} -> {:.4}",
            losses[0], losses[29]
        );
        assert!(losses.iter().all(|l| l.is_finite()), "{label}: {losses:?}");
        assert!(losses[29] < 0.2 * losses[0], "{label}: {losses:?}");
        runs.push(losses);
    }
    for (kept, recomputed) in runs[0].iter().zip(&runs[1]) {
        assert!(
            (kept - recomputed).abs() <= 1e-4 * kept.abs().max(1.0),
            "{label}: kept {kept} recomputed {recomputed}"
        );
    }
}

#[test]
fn mamba_trains_on_the_cpu() {
    mamba_trains("cpu", &rlx::cpu::CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn mamba_trains_on_mlx() {
    mamba_trains("mlx", &rlx::mlx::MlxBackend::default());
}

//! The tutorials in `examples/` run as part of the test suite, so they cannot rot.

use std::path::PathBuf;
use std::process::Command;

/// Builds an example with the cargo running this test (a no-op when it is fresh) and runs
/// it with `args`, returning its stdout.
fn run_example(name: &str, args: &[&str]) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut build = vec!["build", "--quiet", "--example", name];
    if !cfg!(debug_assertions) {
        // Same profile as this test, so the binary found below is the fresh one.
        build.push("--release");
    }
    let status = Command::new(env!("CARGO"))
        .args(&build)
        .current_dir(root)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building example {name} failed");
    // Test binaries live in <target>/<profile>/deps; examples in <target>/<profile>/examples.
    let profile_dir: PathBuf = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .to_path_buf();
    let exe = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let output = Command::new(&exe)
        .args(args)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "example {name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn graph_basics() {
    let dot = std::env::temp_dir().join(format!("rlx-example-01-{}.dot", std::process::id()));
    let stdout = run_example("01_graph_basics", &[dot.to_str().unwrap()]);
    assert!(
        stdout.contains("inner dims 16 and 32 differ"),
        "the rejected op is shown:\n{stdout}"
    );
    assert!(stdout.contains("%5:f32[batch,32] = matmul[transpose_b] %0, %1\n"));
    assert!(stdout.contains("return probs=%10, class=%11\n"));
    let written = std::fs::read_to_string(&dot).unwrap();
    let _ = std::fs::remove_file(&dot);
    assert!(written.starts_with("digraph rlx {"));
}

#[test]
fn typed_shapes() {
    let stdout = run_example("02_typed_shapes", &[]);
    assert!(stdout.contains("= gather[axis=0] %1, %0"), "{stdout}");
    assert!(
        stdout.contains("f32[batch,64] = mean[axes=[1]]"),
        "{stdout}"
    );
    assert!(stdout.contains("1 error building the graph:"), "{stdout}");
    assert!(
        stdout.contains(
            "cannot reshape [batch,6] (6*batch elements) to [batch,4] (4*batch elements)"
        ),
        "{stdout}"
    );
}

#[test]
fn typed_encoder() {
    let stdout = run_example("typed_encoder", &["4"]);
    assert!(stdout.contains("built 12 layers: 505 nodes"), "{stdout}");
    assert!(
        stdout.contains("output [1, 4, 384], finite: true"),
        "{stdout}"
    );
}

#[test]
fn mlp_tutorial() {
    let stdout = run_example("03_mlp", &["3"]);
    assert!(
        stdout.contains(
            "fc1.weight: f32[784,128] (checkpoint fc1.weight is f32[128,784], transposed)"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("and loaded 4 weights back"), "{stdout}");
    assert_eq!(
        stdout.matches("probabilities sum to 1.0000").count(),
        3,
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "wrong input: input \"x\" has shape [3, 783], expected [batch,784] = [3, 784]"
        ),
        "{stdout}"
    );
}

#[test]
fn attention_tutorial() {
    let stdout = run_example("04_attention", &["32", "4"]);
    assert!(stdout.contains("block: hidden 32, 4 heads"), "{stdout}");
    assert!(stdout.contains("output shape [2, 5, 32]"), "{stdout}");
    let diff: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("padded vs unpadded, max |diff| over the real positions: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no diff line:\n{stdout}"));
    assert!(diff <= 1e-5, "padding changed real positions by {diff}");
}

/// The last line's `test_accuracy=` value of a digits run.
fn digits_accuracy(stdout: &str, backend: &str) -> f64 {
    let last = stdout.lines().last().unwrap_or_default();
    let prefix = format!("digits backend={backend} epochs=3 test_accuracy=");
    last.strip_prefix(&prefix)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("unexpected last line: {last:?}"))
}

#[test]
fn digits_tutorial() {
    let out = std::env::temp_dir().join(format!("rlx-digits-{}", std::process::id()));
    let out_arg = out.to_string_lossy().into_owned();
    let stdout = run_example("07_train_digits", &["--epochs", "3", "--out", &out_arg]);
    // Three epochs already classify most test digits (30 reach about 0.99).
    assert!(digits_accuracy(&stdout, "cpu") >= 0.9, "{stdout}");
    assert!(out.join("digits-cpu.safetensors").exists());
    let svg = std::fs::read_to_string(out.join("digits-cpu-loss.svg")).unwrap();
    assert!(svg.contains("<polyline"), "{svg}");
    #[cfg(feature = "mlx")]
    {
        let args = ["--epochs", "3", "--backend", "mlx", "--out", &out_arg];
        let stdout = run_example("07_train_digits", &args);
        assert!(digits_accuracy(&stdout, "mlx") >= 0.9, "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// The 08 tutorial on a loopback ring: the ranks end where one process training on the
/// whole batches ends, with its accuracy.
#[cfg(feature = "mlx")]
#[test]
fn data_parallel_tutorial() {
    for ranks in ["2", "4"] {
        let stdout = run_example("08_data_parallel", &["--ranks", ranks, "--epochs", "2"]);
        let mut lines = stdout.lines().rev();
        let last = lines.next().unwrap_or_default();
        let single = lines
            .next()
            .and_then(|l| l.strip_prefix("single_process test_accuracy="))
            .unwrap_or_else(|| panic!("no single-process line:\n{stdout}"));
        let field = |key: &str| -> f64 {
            last.split_whitespace()
                .find_map(|f| f.strip_prefix(key))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {last:?}"))
        };
        assert!(
            last.starts_with(&format!("data_parallel ranks={ranks} backend=cpu ")),
            "{last}"
        );
        // Two epochs of AdamW: f32 rounding (other summation orders), nothing more. Much
        // longer runs can drift further when a ReLU input sits within rounding of zero.
        let diff = field("max_weight_diff_vs_single=");
        assert!(diff <= 1e-5, "{ranks} ranks: {diff}");
        assert_eq!(
            field("test_accuracy="),
            single.parse::<f64>().unwrap(),
            "{stdout}"
        );
        assert!(field("test_accuracy=") >= 0.85, "{stdout}");
    }
}

#[test]
fn minilm_tutorial() {
    let stdout = run_example(
        "06_minilm",
        &["--json", "A man is eating food.", "A man is eating pasta."],
    );
    let vectors: Vec<Vec<f64>> = serde_json::from_str(stdout.trim()).expect("only JSON on stdout");
    assert_eq!(vectors.len(), 2);
    for v in &vectors {
        assert_eq!(v.len(), 384);
        let norm: f64 = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "unit length, got {norm}");
    }
    let cosine: f64 = vectors[0].iter().zip(&vectors[1]).map(|(a, b)| a * b).sum();
    assert!(cosine > 0.5, "related sentences are close: {cosine}");

    #[cfg(feature = "mlx")]
    {
        let args = [
            "--backend",
            "mlx",
            "--json",
            "A man is eating food.",
            "A man is eating pasta.",
        ];
        let stdout = run_example("06_minilm", &args);
        let on_mlx: Vec<Vec<f64>> = serde_json::from_str(stdout.trim()).expect("JSON");
        for (a, b) in on_mlx.iter().flatten().zip(vectors.iter().flatten()) {
            assert!((a - b).abs() < 1e-5, "MLX {a} vs CPU {b}");
        }
        let stdout = run_example("minilm_bench", &["--backend", "mlx", "--shapes", "1x8"]);
        assert!(
            stdout.starts_with("minilm backend=mlx batch=1 seq=8 ms="),
            "{stdout}"
        );
        let stdout = run_example("05_mlx_backend", &[]);
        assert!(stdout.contains("max |cpu - mlx|"), "{stdout}");
    }

    let stdout = run_example("06_minilm", &["one sentence", "another one"]);
    assert!(
        stdout.starts_with("cosine similarity (cpu backend):\n 1.000"),
        "{stdout}"
    );

    let stdout = run_example("minilm_bench", &["--shapes", "1x8"]);
    assert!(
        stdout.starts_with("minilm backend=cpu batch=1 seq=8 ms="),
        "{stdout}"
    );
}

/// The fine-tuning tutorial in a short form: SmolLM2-135M-Instruct answers none of the
/// held-out lists right before, and at least 9 in 10 after (80 steps on the CPU reach
/// about 0.95, 150 reach 1.0), on the CPU and on MLX; the adapter comes out in PEFT's
/// files, and the loss curve as a picture.
#[test]
fn finetune_tutorial() {
    let out = std::env::temp_dir().join(format!("rlx-finetune-{}", std::process::id()));
    let out_arg = out.to_string_lossy().into_owned();
    // The CPU's last: its adapter is the one tutorial 09 takes below. MLX's CPU device
    // trains at about half the CPU backend's rate, so its run is shorter (the longest test
    // of CI): 30 steps reached 0.9 on its 10 held-out lists, and 0.65 on 20.
    let mut runs = vec![];
    if cfg!(feature = "mlx") {
        runs.push(("mlx", "30", "10", 0.5));
    }
    runs.push(("cpu", "80", "30", 0.9));
    for (backend, steps, eval, least_after) in runs {
        let args = [
            "--backend",
            backend,
            "--steps",
            steps,
            "--eval",
            eval,
            "--out",
            &out_arg,
        ];
        let stdout = run_example("10_finetune_lora", &args);
        let last = stdout.lines().last().unwrap_or_default();
        let prefix = format!("finetune backend={backend} steps={steps} before=");
        assert!(last.starts_with(&prefix), "{stdout}");
        let field = |key: &str| -> f64 {
            let value = last.split(' ').find_map(|kv| kv.strip_prefix(key)).unwrap();
            value.parse().unwrap()
        };
        assert!(field("before=") <= 0.1, "{last}");
        assert!(field("after=") >= least_after, "{last}");
        assert!(field("tok_s=") > 0.0, "{last}");
        let config = std::fs::read_to_string(out.join("adapter/adapter_config.json")).unwrap();
        assert!(config.contains("\"peft_type\": \"LORA\""), "{config}");
        assert!(out.join("adapter/adapter_model.safetensors").exists());
        let svg = std::fs::read_to_string(out.join("loss.svg")).unwrap();
        assert!(svg.contains("<polyline"), "{svg}");
    }
    // The adapter as a user takes it: chatting through tutorial 09.
    let adapter = out.join("adapter");
    let args = [
        "--chat",
        "--prompt",
        "Reverse the order of these words: apple river stone",
        "--adapter",
        adapter.to_str().unwrap(),
    ];
    let stdout = run_example("09_generate", &args);
    assert!(stdout.starts_with("stone river apple\n"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The generation tutorial: its stdout is exactly the generated text, a newline and the
/// figures line; greedy, so the text is transformers' continuation of the prompt.
#[test]
fn generate_tutorial() {
    let expected = " the primary colors of the RGB color model: red, blue, and green.";
    let mut backends = vec!["cpu"];
    if cfg!(feature = "mlx") {
        backends.push("mlx");
    }
    for backend in backends {
        let args = ["--backend", backend, "--max-tokens", "16"];
        let stdout = run_example("09_generate", &args);
        let (text, last) = stdout.trim_end_matches('\n').rsplit_once('\n').unwrap();
        assert_eq!(text, expected, "{backend}: {stdout}");
        let prefix =
            format!("generate backend={backend} prompt_tokens=5 new_tokens=16 prefill_tok_s=");
        assert!(last.starts_with(&prefix), "{last}");
        assert!(last.contains(" decode_tok_s="), "{last}");
    }
    let stdout = run_example("09_generate", &["--stop", "blue"]);
    assert!(
        stdout.starts_with(" the primary colors of the RGB color model: red, \ngenerate "),
        "{stdout}"
    );
    let stdout = run_example(
        "09_generate",
        &["--chat", "--prompt", "What is the capital of France?"],
    );
    assert!(
        stdout.starts_with("The capital of France is Paris.\n"),
        "{stdout}"
    );
    assert!(stdout.contains("new_tokens=7 "), "{stdout}");

    // `--model DIR`: a Hugging Face folder (the tiny Gemma 3 of scripts/tiny_decoders.py
    // with the tiny tokenizer of scripts/tiny_tokenizer.py), chat template and all.
    let data = rlx_testkit::llm::data_dir().join("llm");
    let dir = rlx_testkit::llm::Scratch::new("example-09-hf");
    let cases = rlx_testkit::llm::reference("tiny_decoders");
    rlx_testkit::llm::write_checkpoint(&cases["cases"]["gemma3"], true, dir.path(), false);
    for file in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        std::fs::copy(
            data.join("tiny_tokenizer").join(file),
            dir.path().join(file),
        )
        .unwrap();
    }
    // The prompt the example should build: the user turn in the folder's template.
    let template = rlx::generate::ChatTemplate::from_hf_dir(dir.path()).unwrap();
    let message = rlx::generate::ChatMessage::new("user", " What boils at sea level? ");
    let text = template.render(&[message], true).unwrap();
    let tokenizer = rlx::tokenizer::Tokenizer::from_hf_dir(dir.path()).unwrap();
    let prompt = tokenizer.encode_plain(&text).unwrap().len();
    let model = dir.path().to_str().unwrap();
    let stdout = run_example(
        "09_generate",
        &[
            "--model",
            model,
            "--chat",
            "--prompt",
            " What boils at sea level? ",
            "--max-tokens",
            "5",
        ],
    );
    let last = stdout.trim_end().lines().last().unwrap();
    let prefix = format!("generate backend=cpu prompt_tokens={prompt} new_tokens=5 ");
    assert!(last.starts_with(&prefix), "{stdout}");
}

/// The LoRA memory benchmark's figures for SmolLM2-135M-Instruct: recomputing each
/// layer's activations in the backward pass lowers the step's live peak.
#[test]
fn lora_memory_bench_figures() {
    let stdout = run_example("lora_memory_bench", &["--shapes", "2x32", "--steps", "0"]);
    let peak = |recompute: &str| -> f64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("lora_memory recompute={recompute} batch=2 seq=32")))
            .unwrap_or_else(|| panic!("no figures with recompute={recompute}: {stdout}"));
        line.rsplit("peak_live_mib=")
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (kept, recomputed) = (peak("off"), peak("on"));
    assert!(recomputed < kept, "{stdout}");
}

/// The Mamba benchmark's figures, on a one-block model: every phase prints a positive rate.
#[test]
fn mamba_bench_figures() {
    let stdout = run_example(
        "mamba_bench",
        &[
            "--layers",
            "1",
            "--reps",
            "1",
            "--contexts",
            "8,600",
            "--new",
            "2",
        ],
    );
    for phase in [
        "prompt=128 phase=prefill",
        "prompt=512 phase=prefill",
        "context=8 phase=decode",
        "context=600 phase=decode",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("mamba_bench engine=rlx backend=cpu {phase}")))
            .unwrap_or_else(|| panic!("no {phase} figure: {stdout}"));
        let rate: f64 = line.rsplit("tok_s=").next().unwrap().parse().unwrap();
        assert!(rate > 0.0, "{line}");
    }
}

/// The gated delta rule's benchmark at a small size: every phase prints a positive time.
#[test]
fn delta_bench_figures() {
    let stdout = run_example(
        "delta_bench",
        &[
            "--steps", "9", "--heads", "2", "--width", "16", "--reps", "1",
        ],
    );
    for phase in [
        "steps=9 phase=forward",
        "steps=9 phase=backward",
        "steps=1 phase=decode",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("delta_bench engine=rlx backend=cpu {phase} ")))
            .unwrap_or_else(|| panic!("no {phase} figure: {stdout}"));
        let ms: f64 = line.rsplit("ms=").next().unwrap().parse().unwrap();
        assert!(ms > 0.0, "{line}");
    }
}

/// The expert layer routed and dense at small sizes: both give figures and agree.
#[test]
fn moe_bench_figures() {
    let stdout = run_example(
        "moe_bench",
        &[
            "--experts",
            "8",
            "--per-token",
            "2",
            "--hidden",
            "64",
            "--width",
            "32",
            "--tokens",
            "1,40",
            "--reps",
            "1",
        ],
    );
    for tokens in [1, 40] {
        for path in ["routed", "dense"] {
            let prefix = format!("moe_bench engine=rlx backend=cpu tokens={tokens} path={path} ");
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no {prefix}figure: {stdout}"));
            let rate: f64 = line.rsplit("tok_s=").next().unwrap().parse().unwrap();
            assert!(rate > 0.0, "{line}");
        }
        let agree = format!("moe_bench engine=rlx backend=cpu tokens={tokens} largest_difference=");
        let line = stdout.lines().find(|l| l.starts_with(&agree)).unwrap();
        let difference: f64 = line.rsplit('=').next().unwrap().parse().unwrap();
        assert!(difference < 1e-5, "{line}");
    }
}

/// Tutorial 09 on a Mamba folder (the tiny Mamba of scripts/tiny_mamba.py with the tiny
/// tokenizer of scripts/tiny_tokenizer.py): the text it streams is what the library's
/// greedy generation decodes to.
#[test]
fn generate_tutorial_on_a_mamba_folder() {
    use std::sync::Arc;
    let data = rlx_testkit::llm::data_dir().join("llm");
    let dir = rlx_testkit::llm::Scratch::new("example-09-mamba");
    let cases = rlx_testkit::llm::reference("tiny_mamba");
    rlx_testkit::llm::write_checkpoint(&cases["cases"]["mamba"], false, dir.path(), false);
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(
            data.join("tiny_tokenizer").join(file),
            dir.path().join(file),
        )
        .unwrap();
    }
    let tokenizer = rlx::tokenizer::Tokenizer::from_hf_dir(dir.path()).unwrap();
    let prompt: Vec<i64> = tokenizer
        .encode("hello world")
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    let backend = rlx::cpu::CpuBackend::default();
    let decoder = rlx::models::mamba::MambaDecoder::from_hf_dir(&backend, dir.path(), 64).unwrap();
    let generator = rlx::generate::Generator::new(&backend, Arc::new(decoder)).unwrap();
    let options = rlx::generate::GenerateOptions {
        max_tokens: 5,
        sampling: rlx::generate::SamplingParams::greedy(),
        stop_tokens: tokenizer
            .stop_tokens()
            .iter()
            .map(|t| i64::from(*t))
            .collect(),
    };
    let tokens: Vec<u32> = generator
        .generate(&prompt, options)
        .unwrap()
        .map(|t| u32::try_from(t.unwrap()).unwrap())
        .collect();
    let text = tokenizer.decode_text(&tokens).unwrap();

    let model = dir.path().to_str().unwrap();
    let stdout = run_example(
        "09_generate",
        &[
            "--model",
            model,
            "--prompt",
            "hello world",
            "--max-tokens",
            "5",
        ],
    );
    let (generated, last) = stdout.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(generated, text, "{stdout}");
    let prefix = format!(
        "generate backend=cpu prompt_tokens={} new_tokens={} ",
        prompt.len(),
        tokens.len()
    );
    assert!(last.starts_with(&prefix), "{stdout}");
}

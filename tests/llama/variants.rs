//! The family's variants — Llama with a separate output and Llama 3's RoPE scaling, Qwen2
//! (query/key/value biases), Qwen3 (per-head norms, wide heads, YaRN's RoPE scaling),
//! Gemma 3 (sliding-window layers, norms around each block, GeGLU, scaled embeddings,
//! soft-capped logits, linear RoPE scaling in its global layers), and the mixtures of
//! experts Qwen2-MoE (a shared expert, transformers 5's fused expert tensors), Qwen3-MoE
//! and Mixtral (the hub's per-expert tensors) — as
//! tiny Hugging Face checkpoints, against transformers (`scripts/tiny_decoders.py`,
//! `tests/data/llm/tiny_decoders.json`): the weights come from a formula both sides
//! compute, the checkpoint is written here in transformers' names (sharded for one case),
//! and RLX loads it through the public API. Logits of the whole prompt, and 10 greedy
//! tokens through the key/value caches.

use std::path::Path;
use std::sync::Arc;

use super::argmax;
use rlx::backend::Backend;
use rlx::generate::{Decoder, GenerateOptions, Generator, SamplingParams};
use rlx::models::llama::{Llama, LlamaConfig, LlamaDecoder, load_hf_checkpoint};
use rlx::tensor::HostTensor;
use rlx_testkit::llm::{
    Scratch, case_logits, formula, ids, largest_difference, reference, write_checkpoint,
};

const CASES: [&str; 7] = [
    "llama",
    "qwen2",
    "qwen3",
    "gemma3",
    "qwen2_moe",
    "qwen3_moe",
    "mixtral",
];

/// Logits within this of transformers' (both f32; the tiny models' logits are at most
/// 3.5 and the two sides differ only in the order of their sums, about 1e-6 measured).
const BOUND: f64 = 1e-4;

fn variants_match<B: Backend<Executable: 'static>>(label: &str, backend: &B) {
    let data = reference("tiny_decoders");
    let prompt = ids(&data["prompt"]);
    for name in CASES {
        let case = &data["cases"][name];
        let gemma = name == "gemma3";
        let dir = Scratch::new(&format!("tiny-{name}-{label}"));
        write_checkpoint(case, gemma, dir.path(), name == "qwen3");
        let config = LlamaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap();

        // The whole prompt at once.
        let model = Llama::compile(backend, &config).unwrap();
        let report = load_hf_checkpoint(&model, &config, dir.path()).unwrap();
        // Every weight, the experts stored one tensor each stacked into one.
        assert_eq!(report.loaded, model.manifest().params.len(), "{name}");
        assert!(report.ignored.is_empty(), "{name}: {:?}", report.ignored);
        let input = HostTensor::from_vec(prompt.clone(), [1, prompt.len()]).unwrap();
        let logits = model.run(&input).unwrap();
        let got = logits.as_slice::<f32>().unwrap();
        let worst = largest_difference(got, &case_logits(case));
        println!("{name} {label}: largest logit error {worst:.2e} (bound {BOUND})");
        assert!(worst < BOUND, "{name} {label}: logits off by {worst}");

        // Greedy through the caches: a Generator, and steps of 5 tokens by hand (so local
        // layers see windows that span steps).
        let margin = case["greedy_margin"].as_f64().unwrap();
        assert!(
            margin > 100.0 * BOUND,
            "{name}: the reference's greedy lead {margin} is too thin to compare"
        );
        let expected = ids(&case["greedy"]);
        let decoder = Arc::new(LlamaDecoder::from_hf_dir(backend, dir.path(), 64).unwrap());
        let generator = Generator::new(backend, decoder.clone()).unwrap();
        let options = GenerateOptions {
            max_tokens: expected.len(),
            sampling: SamplingParams::greedy(),
            stop_tokens: vec![],
        };
        let tokens: Vec<i64> = generator
            .generate(&prompt, options)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(tokens, expected, "{name} {label} greedy");

        let mut ctx = decoder.new_context().unwrap();
        let mut fed = prompt.clone();
        let mut pos = 0;
        while fed.len() < prompt.len() + expected.len() {
            let end = if pos < prompt.len() {
                (pos + 5).min(prompt.len())
            } else {
                fed.len()
            };
            let logits = decoder
                .step(&mut ctx, &fed[pos..end], pos, end - pos - 1)
                .unwrap();
            pos = end;
            if pos == fed.len() {
                fed.push(argmax(logits.as_slice::<f32>().unwrap()));
            }
        }
        assert_eq!(
            fed[prompt.len()..],
            expected[..],
            "{name} {label} greedy in steps of 5"
        );
    }
}

#[test]
fn variants_match_transformers_on_the_cpu() {
    variants_match("cpu", &rlx::cpu::CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn variants_match_transformers_on_mlx() {
    variants_match("mlx", &rlx::mlx::MlxBackend::default());
}

/// The config keys of older files (`rope_theta`, `rope_scaling`, `rope_local_base_freq`,
/// `sliding_window_pattern`) read as transformers reads them, and what RLX cannot build
/// is an error naming its key.
#[test]
fn hf_configs_read_old_keys_and_name_what_is_unsupported() {
    let gemma = LlamaConfig::from_hf_json(
        r#"{"model_type": "gemma3", "text_config": {"hidden_size": 64,
            "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 32, "intermediate_size": 96, "vocab_size": 128,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 8.0},
            "sliding_window": 512, "sliding_window_pattern": 3, "query_pre_attn_scalar": 16}}"#,
    )
    .unwrap();
    let window = gemma.sliding_window.as_ref().unwrap();
    assert_eq!(window.size, 512);
    assert_eq!(window.local, [true, true, false, true, true, false, true]);
    assert_eq!(
        (gemma.rope_base, window.rope_base, gemma.rope_scale),
        (1e6, 1e4, 0.125)
    );
    assert_eq!(gemma.attention_scale, 0.25);
    assert!(gemma.tied_output && gemma.sandwich_norms && gemma.qk_norm);
    assert_eq!(gemma.embedding_scale, 8.0);

    let base = r#""hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 96, "vocab_size": 128"#;
    let error = |extra: &str| {
        LlamaConfig::from_hf_json(&format!("{{{base}, {extra}}}"))
            .unwrap_err()
            .to_string()
    };
    assert!(
        error(r#""model_type": "llama", "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}"#)
            .starts_with("rope_scaling.rope_type")
    );
    assert!(
        error(r#""model_type": "llama", "attention_bias": true"#).starts_with("attention_bias")
    );
    assert!(error(r#""model_type": "llama", "num_key_value_heads": 3"#).contains("head_count_kv"));
    assert!(error(r#""model_type": "mamba""#).starts_with("model_type"));
    assert!(error(r#""model_type": "llama", "hidden_act": "relu""#).starts_with("hidden_act"));
    assert!(error(r#""model_type": "llama", "vocab_size": -1"#).starts_with("vocab_size"));
    let missing = LlamaConfig::from_hf_json(r#"{"model_type": "qwen3", "hidden_size": 64}"#);
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .contains("num_attention_heads")
    );
}

/// A checkpoint that does not fit the config is a typed error listing what is wrong, and
/// an index that points outside the folder is refused.
#[test]
fn hf_checkpoints_that_do_not_fit_are_errors() {
    let data = reference("tiny_decoders");
    let case = &data["cases"]["qwen2"];
    let dir = Scratch::new("tiny-misfit");
    write_checkpoint(case, false, dir.path(), false);
    let cpu = rlx::cpu::CpuBackend::default();
    // Qwen3's config over Qwen2's tensors: biases unexpected, norms missing.
    let mut config = LlamaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap();
    config.qkv_bias = false;
    config.qk_norm = true;
    let model = Llama::compile(&cpu, &config).unwrap();
    let message = load_hf_checkpoint(&model, &config, dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("missing: blk.0.attn_q_norm.weight"),
        "{message}"
    );
    assert!(
        message.contains("unexpected: blk.0.attn_q.bias"),
        "{message}"
    );

    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}}"#,
    )
    .unwrap();
    let message = LlamaDecoder::from_hf_dir(&cpu, dir.path(), 16)
        .unwrap_err()
        .to_string();
    assert!(message.contains("not a file in the folder"), "{message}");
    let message = LlamaDecoder::from_hf_dir(&cpu, Path::new("/nonexistent"), 16)
        .unwrap_err()
        .to_string();
    assert!(message.contains("config.json"), "{message}");
}

/// Qwen2, Qwen3 and Gemma 3 as llama.cpp's converter writes them (Hugging Face tensors
/// renamed, dims reversed, query and key rows not permuted: these architectures rotate
/// halves; Qwen3's YaRN as `rope.scaling.type`, `factor` and `original_context_length`;
/// Gemma's norm scales stored as `1 + w`, its layer pattern as
/// `attention.sliding_window_pattern`) read through [`LlamaConfig::from_gguf`] and
/// `load_gguf_checkpoint`, against the same references.
#[test]
fn gguf_variants_match_transformers() {
    use rlx_testkit::gguf::{Meta, write};
    let data = reference("tiny_decoders");
    let prompt = ids(&data["prompt"]);
    let cpu = rlx::cpu::CpuBackend::default();
    for name in ["qwen2", "qwen3", "gemma3", "qwen2_moe", "qwen3_moe"] {
        let case = &data["cases"][name];
        let arch = name.replace('_', "");
        let name = arch.as_str();
        let json: serde_json::Value =
            serde_json::from_str(case["config_json"].as_str().unwrap()).unwrap();
        let hf = LlamaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap();
        let key = |k: &str| format!("{name}.{k}");
        let mut metadata = vec![
            ("general.architecture".to_string(), Meta::string(name)),
            (key("embedding_length"), Meta::u32(hf.hidden_size as u32)),
            (key("block_count"), Meta::u32(hf.num_layers as u32)),
            (key("attention.head_count"), Meta::u32(hf.num_heads as u32)),
            (
                key("attention.head_count_kv"),
                Meta::u32(hf.num_kv_heads as u32),
            ),
            (key("attention.key_length"), Meta::u32(hf.head_dim as u32)),
            (
                key("feed_forward_length"),
                Meta::u32(hf.intermediate_size as u32),
            ),
            (key("context_length"), Meta::u32(hf.context_length as u32)),
            (key("vocab_size"), Meta::u32(hf.vocab_size as u32)),
            (
                key("attention.layer_norm_rms_epsilon"),
                Meta::f32(hf.rms_norm_eps as f32),
            ),
            (key("rope.freq_base"), Meta::f32(hf.rope_base as f32)),
        ];
        if let Some(window) = &hf.sliding_window {
            metadata.push((
                key("attention.sliding_window"),
                Meta::u32(window.size as u32),
            ));
            let pattern: Vec<Meta> = window.local.iter().map(|l| Meta::bool(*l)).collect();
            metadata.push((
                key("attention.sliding_window_pattern"),
                Meta::array(&pattern),
            ));
        }
        if hf.rope_scale != 1.0 {
            metadata.push((key("rope.scaling.type"), Meta::string("linear")));
            metadata.push((
                key("rope.scaling.factor"),
                Meta::f32((1.0 / hf.rope_scale) as f32),
            ));
        }
        // Qwen3's YaRN as llama.cpp's converter writes it.
        let rope = &json["rope_parameters"];
        if rope["rope_type"] == "yarn" {
            metadata.push((key("rope.scaling.type"), Meta::string("yarn")));
            metadata.push((
                key("rope.scaling.factor"),
                Meta::f32(rope["factor"].as_f64().unwrap() as f32),
            ));
            metadata.push((
                key("rope.scaling.original_context_length"),
                Meta::u32(rope["original_max_position_embeddings"].as_u64().unwrap() as u32),
            ));
        }
        if let Some(cap) = hf.final_logit_softcap {
            metadata.push((key("final_logit_softcapping"), Meta::f32(cap as f32)));
        }
        if let Some(m) = &hf.mixture {
            metadata.push((key("expert_count"), Meta::u32(m.experts as u32)));
            metadata.push((
                key("expert_used_count"),
                Meta::u32(m.experts_per_token as u32),
            ));
            let width = m.expert_intermediate_size as u32;
            metadata.push((key("expert_feed_forward_length"), Meta::u32(width)));
            if let Some(shared) = m.shared_expert_intermediate_size {
                let shared = Meta::u32(shared as u32);
                metadata.push((key("expert_shared_feed_forward_length"), shared));
            }
        }
        let tensors = gguf_tensors(case, &hf);
        let metadata: Vec<(&str, Meta)> = metadata
            .iter()
            .map(|(k, m)| (k.as_str(), m.clone()))
            .collect();
        let (bytes, _) = write(&metadata, &tensors, 32);
        let file = rlx::gguf::Gguf::from_bytes(bytes).unwrap();
        let mut config = LlamaConfig::from_gguf(&file).unwrap();
        assert!(!config.rope_traditional, "{name}");
        assert_eq!(config.tied_output, hf.tied_output, "{name}");
        if name == "gemma3" {
            // GGUF has no query scalar: llama.cpp scales by the head width (this tiny
            // model's 24 is transformers' key); the rest must equal the config.json's.
            let by_head = 1.0 / (hf.head_dim as f64).sqrt();
            assert!((config.attention_scale - by_head).abs() < 1e-12);
            config.attention_scale = hf.attention_scale;
        }
        // Everything else as config.json says (the epsilon through an f32).
        assert!(
            (config.rms_norm_eps - hf.rms_norm_eps).abs() < 1e-12,
            "{name}"
        );
        config.rms_norm_eps = hf.rms_norm_eps;
        assert_eq!(format!("{config:?}"), format!("{hf:?}"), "{name}");
        let model = Llama::compile(&cpu, &config).unwrap();
        rlx::models::llama::load_gguf_checkpoint(&model, &config, &file).unwrap();
        let input = HostTensor::from_vec(prompt.clone(), [1, prompt.len()]).unwrap();
        let logits = model.run(&input).unwrap();
        let worst = largest_difference(logits.as_slice::<f32>().unwrap(), &case_logits(case));
        assert!(worst < BOUND, "{name} from GGUF: logits off by {worst}");
    }
}

/// Gemma 3 files as llama.cpp reads them where they are silent: every sixth layer global,
/// local layers at base 10,000, queries scaled by the head width, but by the width per head
/// for the 62-block (27B) model; Llama 3's `rope_freqs.weight` divides each pair's
/// frequency, is read as configuration and is not a weight to bind.
#[test]
fn gguf_configs_follow_llama_cpp_where_files_are_silent() {
    use rlx_testkit::gguf::{Meta, Tensor, write};
    let gemma = |layers: u32| {
        let metadata = [
            ("general.architecture", Meta::string("gemma3")),
            ("gemma3.embedding_length", Meta::u32(5376)),
            ("gemma3.block_count", Meta::u32(layers)),
            ("gemma3.attention.head_count", Meta::u32(32)),
            ("gemma3.attention.head_count_kv", Meta::u32(16)),
            ("gemma3.attention.key_length", Meta::u32(128)),
            ("gemma3.feed_forward_length", Meta::u32(21504)),
            ("gemma3.context_length", Meta::u32(131072)),
            ("gemma3.vocab_size", Meta::u32(262_144)),
            ("gemma3.attention.sliding_window", Meta::u32(1024)),
        ];
        let (bytes, _) = write(&metadata, &[], 32);
        LlamaConfig::from_gguf(&rlx::gguf::Gguf::from_bytes(bytes).unwrap()).unwrap()
    };
    let big = gemma(62);
    assert!((big.attention_scale - 1.0 / 168f64.sqrt()).abs() < 1e-12);
    let window = big.sliding_window.as_ref().unwrap();
    assert_eq!(window.size, 1024);
    assert_eq!(window.rope_base, 10_000.0);
    let globals: Vec<usize> = (0..62).filter(|i| !window.local[*i]).collect();
    assert_eq!(globals, [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]);
    assert_eq!((big.rope_base, big.rms_norm_eps), (1_000_000.0, 1e-6));
    assert!(big.tied_output && big.sandwich_norms && big.qk_norm);
    assert!((gemma(34).attention_scale - 1.0 / 128f64.sqrt()).abs() < 1e-12);

    // Llama 3: one divisor per rotated pair.
    let config = LlamaConfig::new(64, 1, 4, 2, 96, 32);
    let factors: [f32; 8] = [1.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0];
    let metadata = [
        ("general.architecture", Meta::string("llama")),
        ("llama.embedding_length", Meta::u32(64)),
        ("llama.block_count", Meta::u32(1)),
        ("llama.attention.head_count", Meta::u32(4)),
        ("llama.attention.head_count_kv", Meta::u32(2)),
        ("llama.feed_forward_length", Meta::u32(96)),
        ("llama.context_length", Meta::u32(64)),
        ("llama.vocab_size", Meta::u32(32)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::f32(1e-5)),
        ("llama.rope.freq_base", Meta::f32(500_000.0)),
    ];
    let manifest = Llama::manifest(&config).unwrap();
    let mut tensors: Vec<Tensor> = manifest
        .file_tensors()
        .iter()
        .map(|f| Tensor {
            name: f.key.clone(),
            dims: f.shape.iter().rev().map(|d| *d as u64).collect(),
            type_id: 0,
            data: vec![0; 4 * f.shape.iter().product::<usize>()],
        })
        .collect();
    tensors.push(Tensor {
        name: "rope_freqs.weight".into(),
        dims: vec![8],
        type_id: 0,
        data: factors.iter().flat_map(|f| f.to_le_bytes()).collect(),
    });
    let (bytes, _) = write(&metadata, &tensors, 32);
    let file = rlx::gguf::Gguf::from_bytes(bytes).unwrap();
    let read = LlamaConfig::from_gguf(&file).unwrap();
    let freqs = read.rope_freqs.clone().unwrap();
    for (i, (got, factor)) in freqs.iter().zip(factors).enumerate() {
        let want = 500_000f64.powf(-2.0 * i as f64 / 16.0) / f64::from(factor);
        assert!(
            (got - want).abs() <= 1e-12 * want,
            "pair {i}: {got} vs {want}"
        );
    }
    let cpu = rlx::cpu::CpuBackend::default();
    let model = Llama::compile(&cpu, &read).unwrap();
    rlx::models::llama::load_gguf_checkpoint(&model, &read, &file).unwrap();
    // Read as configuration only: strict loading alone calls it unexpected.
    assert!(model.load_gguf(&file).is_err());
    // A factor per pair, each positive, or the key is named.
    tensors.last_mut().unwrap().data[..4].copy_from_slice(&(-1f32).to_le_bytes());
    let (bytes, _) = write(&metadata, &tensors, 32);
    let bad = LlamaConfig::from_gguf(&rlx::gguf::Gguf::from_bytes(bytes).unwrap());
    assert!(bad.unwrap_err().to_string().contains("rope_freqs.weight"));
}

/// A Hugging Face folder's tokenizer (`tokenizer.json` of the SentencePiece style, with
/// `tokenizer_config.json` and `generation_config.json`) and chat template give
/// transformers' ids, text and rendering (`scripts/tiny_tokenizer.py`).
#[test]
fn hf_tokenizer_and_chat_template_match_transformers() {
    use rlx::generate::{ChatMessage, ChatTemplate};
    use rlx::tokenizer::Tokenizer;
    let dir = rlx_testkit::llm::data_dir().join("llm/tiny_tokenizer");
    let tokenizer = Tokenizer::from_hf_dir(&dir).unwrap();
    assert_eq!(tokenizer.vocab_size(), 128);
    assert_eq!(tokenizer.bos(), Some(1));
    assert_eq!(tokenizer.stop_tokens(), [2, 4]);
    let r = reference("tiny_tokenizer");
    for case in r["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let got: Vec<i64> = tokenizer
            .encode(text)
            .unwrap()
            .into_iter()
            .map(i64::from)
            .collect();
        assert_eq!(got, ids(&case["ids"]), "{text:?}");
        let ids: Vec<u32> = got.iter().map(|i| *i as u32).collect();
        assert_eq!(
            tokenizer.decode_text(&ids).unwrap(),
            case["decoded"].as_str().unwrap(),
            "{text:?}"
        );
    }
    let template = ChatTemplate::from_hf_dir(&dir).unwrap();
    let messages: Vec<ChatMessage> = r["chat"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let text = template.render(&messages, true).unwrap();
    assert_eq!(text, r["chat"]["text"].as_str().unwrap());
    // The rendered text already starts with `<s>`; encoding it adds another, as
    // transformers' tokenizer would with its special tokens on.
    let got: Vec<i64> = tokenizer
        .encode(&text)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    assert_eq!(got[1..], ids(&r["chat"]["ids"])[..]);

    let missing = Tokenizer::from_hf_dir(Path::new("/nonexistent")).unwrap_err();
    assert!(missing.to_string().contains("tokenizer.json"), "{missing}");
}

/// A batched step whose rows are sequences at positions of their own (prompts of 8, 5 and
/// 3 tokens prefilled together, padded; then one token each per step; the third slot
/// starting a new sequence midway) gives, row by row, the logits of each sequence stepped
/// alone, for Gemma 3 (local windows across steps) and Qwen3 (YaRN, per-head norms).
fn batch_rows_match_single_sequences<B: Backend<Executable: 'static>>(label: &str, backend: &B) {
    use rlx::models::llama::{LlamaBatchConfig, LlamaBatchStep};
    let data = reference("tiny_decoders");
    for name in ["gemma3", "qwen3"] {
        let case = &data["cases"][name];
        let dir = Scratch::new(&format!("batch-{name}-{label}"));
        write_checkpoint(case, name == "gemma3", dir.path(), false);
        let model = LlamaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap();
        let config = LlamaBatchConfig {
            model: model.clone(),
            capacity: 32,
            slots: 3,
        };
        let batch = LlamaBatchStep::compile(backend, &config).unwrap();
        load_hf_checkpoint(&batch, &model, dir.path()).unwrap();
        let single = LlamaDecoder::from_hf_dir(backend, dir.path(), 32).unwrap();
        let vocab = model.vocab_size;

        let prompts: [Vec<i64>; 3] = [
            (0..8).map(|i| (5 * i + 1) % 128).collect(),
            (0..5).map(|i| (11 * i + 7) % 128).collect(),
            (0..3).map(|i| (3 * i + 40) % 128).collect(),
        ];
        let mut histories: Vec<Vec<i64>> = prompts.to_vec();
        let mut contexts: Vec<_> = (0..3).map(|_| single.new_context().unwrap()).collect();
        let mut batch_ctx = batch.new_context().unwrap();
        let mut worst = 0f64;
        // Each row's new tokens this step, its position, and whether its slot starts over.
        let mut rows: Vec<(Vec<i64>, usize)> = prompts.iter().map(|p| (p.clone(), 0)).collect();
        for step in 0..7 {
            let seq = rows.iter().map(|r| r.0.len()).max().unwrap();
            let mut ids = Vec::new();
            for (tokens, _) in &rows {
                ids.extend(tokens);
                ids.extend(std::iter::repeat_n(0, seq - tokens.len()));
            }
            let pos: Vec<i64> = rows.iter().map(|r| r.1 as i64).collect();
            let last: Vec<i64> = rows.iter().map(|r| r.0.len() as i64 - 1).collect();
            let inputs = [
                ("input_ids", HostTensor::from_vec(ids, [3, seq]).unwrap()),
                ("pos", HostTensor::from_vec(pos, [3]).unwrap()),
                ("last", HostTensor::from_vec(last, [3]).unwrap()),
            ];
            let named: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
                inputs.iter().map(|(n, t)| (*n, t.view())).collect();
            let [logits] = batch.run_in_outputs(&mut batch_ctx, &named).unwrap();
            let logits = logits.as_slice::<f32>().unwrap();
            let mut next_rows = Vec::new();
            for (b, (tokens, pos)) in rows.iter().enumerate() {
                let alone = single
                    .step(&mut contexts[b], tokens, *pos, tokens.len() - 1)
                    .unwrap();
                let alone = alone.as_slice::<f32>().unwrap();
                let row = &logits[b * vocab..(b + 1) * vocab];
                let error = row
                    .iter()
                    .zip(alone)
                    .map(|(x, y)| f64::from((x - y).abs()))
                    .fold(0f64, f64::max);
                assert!(
                    error < BOUND,
                    "{name} {label} step {step} row {b}: off by {error}"
                );
                worst = worst.max(error);
                let token = argmax(row);
                if b == 2 && step == 3 {
                    // Slot 2 starts a new sequence of one token at position 0.
                    contexts[2] = single.new_context().unwrap();
                    histories[2] = vec![token];
                    next_rows.push((vec![token], 0));
                } else {
                    histories[b].push(token);
                    next_rows.push((vec![token], histories[b].len() - 1));
                }
            }
            rows = next_rows;
        }
        println!("{name} {label} batch of 3: rows within {worst:.2e} of single sequences");
    }
}

#[test]
fn batch_rows_match_single_sequences_on_the_cpu() {
    batch_rows_match_single_sequences("cpu", &rlx::cpu::CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn batch_rows_match_single_sequences_on_mlx() {
    batch_rows_match_single_sequences("mlx", &rlx::mlx::MlxBackend::default());
}

/// The tensors of a tiny case as llama.cpp's converter writes them (GGUF names, dims
/// reversed, Gemma's norms as scales): Qwen2-MoE's fused experts split and stacked as
/// `ffn_{gate,up,down}_exps`, Qwen3-MoE's per-expert tensors kept one per expert
/// (`ffn_gate.E`, as older files store experts), the shared expert's gate a vector.
fn gguf_tensors(case: &serde_json::Value, hf: &LlamaConfig) -> Vec<rlx_testkit::gguf::Tensor> {
    let tensor = |name: String, dims: &[u64], values: &[f32]| rlx_testkit::gguf::Tensor {
        name,
        dims: dims.iter().rev().copied().collect(),
        type_id: 0,
        data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let mut tensors = Vec::new();
    for t in case["tensors"].as_array().unwrap() {
        let hf_name = t[0].as_str().unwrap();
        let dims: Vec<u64> = t[1]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        let mut values = formula(
            hf_name,
            dims.iter().product::<u64>() as usize,
            hf.sandwich_norms,
        );
        let (layer, rest) = hf_name
            .strip_prefix("model.layers.")
            .and_then(|r| r.split_once('.'))
            .unwrap_or(("", ""));
        if let Some(gguf) = rlx::models::llama::hf_tensor_name(hf_name, hf) {
            if hf.sandwich_norms && gguf.ends_with("norm.weight") {
                values.iter_mut().for_each(|v| *v += 1.0);
            }
            let dims = if gguf.ends_with("ffn_gate_inp_shexp.weight") {
                vec![dims[1]]
            } else {
                dims
            };
            tensors.push(tensor(gguf, &dims, &values));
        } else if rest == "mlp.experts.gate_up_proj" {
            let (experts, rows, cols) = (dims[0] as usize, dims[1] as usize / 2, dims[2] as usize);
            for (half, stacked) in ["ffn_gate_exps", "ffn_up_exps"].iter().enumerate() {
                let part: Vec<f32> = (0..experts)
                    .flat_map(|e| {
                        let start = (2 * e + half) * rows * cols;
                        values[start..start + rows * cols].to_vec()
                    })
                    .collect();
                let dims = [experts as u64, rows as u64, cols as u64];
                tensors.push(tensor(
                    format!("blk.{layer}.{stacked}.weight"),
                    &dims,
                    &part,
                ));
            }
        } else if rest == "mlp.experts.down_proj" {
            tensors.push(tensor(
                format!("blk.{layer}.ffn_down_exps.weight"),
                &dims,
                &values,
            ));
        } else {
            let (expert, projection) = rest
                .strip_prefix("mlp.experts.")
                .and_then(|r| r.split_once('.'))
                .unwrap_or_else(|| panic!("{hf_name} has no GGUF name"));
            let gguf = match projection {
                "gate_proj.weight" => "ffn_gate",
                "up_proj.weight" => "ffn_up",
                _ => "ffn_down",
            };
            tensors.push(tensor(
                format!("blk.{layer}.{gguf}.{expert}.weight"),
                &dims,
                &values,
            ));
        }
    }
    tensors
}

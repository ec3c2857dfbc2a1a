//! Hostile `config.json` files of BERT and of the Llama family (a Gemma 3 config, which
//! has the most keys): fixed-seed mutations of a valid config (fields missing, of the
//! wrong type, zero, negative, huge, up to `u64::MAX`; broken JSON), each parsed and, when
//! it parses, built and compiled for the CPU under a memory limit. The only
//! acceptable outcomes are a model or a typed error: no panic, no abort, no huge
//! allocation.

use crate::Rng;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rlx::backend::CompileError;
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::model::ModelError;
use rlx::models::bert::{Bert, BertConfig};
use rlx::models::llama::{LlamaCacheConfig, LlamaConfig, LlamaStep};

const CASES: usize = 600;
const SEED: u64 = 0xc0f1_6c0f_2026_1122;

const FIELDS: [&str; 10] = [
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "hidden_act",
    "model_type",
];

const BERT: &str = r#"{"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 16,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
    "model_type": "bert"}"#;

const GEMMA3: &str = r#"{"model_type": "gemma3_text", "vocab_size": 50, "hidden_size": 16,
    "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 8, "intermediate_size": 32, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 8, "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "final_logit_softcapping": 30.0, "tie_word_embeddings": true,
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0,
        "rope_theta": 1000000.0}, "sliding_attention": {"rope_type": "default",
        "rope_theta": 10000.0}}}"#;

const LLAMA_FIELDS: [&str; 16] = [
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "query_pre_attn_scalar",
    "sliding_window",
    "layer_types",
    "final_logit_softcapping",
    "rope_parameters",
    "tie_word_embeddings",
];

fn mutated(rng: &mut Rng, valid: &str, fields: &[&str]) -> String {
    let values: Vec<serde_json::Value> = [
        "0",
        "1",
        "3",
        "-1",
        "65536",
        "2147483648",
        "4294967297",
        "9223372036854775807",
        "18446744073709551615",
        "1e300",
        "0.5",
        "null",
        "true",
        "\"32\"",
        "[]",
        "{}",
        "\"relu\"",
        "\"gelu_new\"",
        "1e-400",
        "-1e-12",
    ]
    .iter()
    .map(|v| serde_json::from_str(v).unwrap())
    .collect();
    let mut config: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(valid).unwrap();
    for _ in 0..1 + rng.below(3) {
        let field = fields[rng.below(fields.len())];
        match rng.below(6) {
            0 => {
                config.remove(field);
            }
            1 => {
                config.insert(format!("{field}_typo"), serde_json::Value::from(3));
            }
            _ => {
                config.insert(field.to_string(), values[rng.below(values.len())].clone());
            }
        }
    }
    let text = serde_json::Value::Object(config).to_string();
    match rng.below(10) {
        0 => text[..rng.below(text.len())].to_string(),
        _ => text,
    }
}

fn compiled<T>(result: Result<T, ModelError>) -> &'static str {
    match result {
        Ok(_) => "compiled",
        Err(ModelError::Build(_)) => "build error",
        Err(ModelError::Compile(CompileError::OutOfMemory { .. })) => "out of memory",
        Err(ModelError::Compile(_)) => "compile error",
    }
}

#[test]
fn mutated_configs_build_or_fail_with_a_typed_error() {
    hostile(
        "bert",
        BERT,
        &FIELDS,
        |backend, text| match BertConfig::from_json(text) {
            Err(_) => "config error",
            Ok(config) => compiled(Bert::compile(backend, &config)),
        },
    );
}

#[test]
fn mutated_llama_family_configs_build_or_fail_with_a_typed_error() {
    hostile(
        "llama",
        GEMMA3,
        &LLAMA_FIELDS,
        |backend, text| match LlamaConfig::from_hf_json(text) {
            Err(_) => "config error",
            Ok(model) => {
                let config = LlamaCacheConfig {
                    capacity: model.context_length.min(16),
                    model,
                };
                compiled(LlamaStep::compile(backend, &config))
            }
        },
    );
}

/// Runs the mutations of `valid` through `build`, counting outcomes; fails on a panic.
fn hostile(
    label: &str,
    valid: &str,
    fields: &[&str],
    build: impl Fn(&CpuBackend, &str) -> &'static str,
) {
    let backend = CpuBackend::new(CpuOptions {
        memory_limit: Some(256 << 20),
        ..CpuOptions::default()
    });
    let mut rng = Rng(SEED);
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut panics = Vec::new();
    for case in 0..CASES {
        let text = mutated(&mut rng, valid, fields);
        let outcome = catch_unwind(AssertUnwindSafe(|| build(&backend, &text)));
        match outcome {
            Ok(kind) => *outcomes.entry(kind).or_default() += 1,
            Err(_) => panics.push(format!("case {case}: {text}")),
        }
    }
    println!(
        "hostile {label} configs: {CASES} cases (seed {SEED:#x}): {outcomes:?}, {} panics",
        panics.len()
    );
    assert!(panics.is_empty(), "{panics:#?}");
    assert!(
        outcomes.get("config error").copied().unwrap_or(0) > CASES / 4,
        "{outcomes:?}"
    );
    assert!(
        outcomes.get("compiled").copied().unwrap_or(0) > 0,
        "{outcomes:?}"
    );
}

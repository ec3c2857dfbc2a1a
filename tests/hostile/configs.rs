//! Hostile BERT `config.json` files: fixed-seed mutations of a valid config (fields
//! missing, of the wrong type, zero, negative, huge, up to `u64::MAX`; broken JSON), each
//! parsed and, when it parses, built and compiled for the CPU under a memory limit. The only
//! acceptable outcomes are a model or a typed error: no panic, no abort, no huge
//! allocation.

use crate::Rng;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rlx::backend::CompileError;
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::model::ModelError;
use rlx::models::bert::{Bert, BertConfig};

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

fn valid() -> serde_json::Map<String, serde_json::Value> {
    let text = r#"{"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 16,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
        "model_type": "bert"}"#;
    serde_json::from_str(text).unwrap()
}

fn mutated(rng: &mut Rng) -> String {
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
    let mut config = valid();
    for _ in 0..1 + rng.below(3) {
        let field = FIELDS[rng.below(FIELDS.len())];
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

#[test]
fn mutated_configs_build_or_fail_with_a_typed_error() {
    let backend = CpuBackend::new(CpuOptions {
        memory_limit: Some(256 << 20),
        ..CpuOptions::default()
    });
    let mut rng = Rng(SEED);
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    let mut panics = Vec::new();
    for case in 0..CASES {
        let text = mutated(&mut rng);
        let outcome = catch_unwind(AssertUnwindSafe(|| match BertConfig::from_json(&text) {
            Err(_) => "config error",
            Ok(config) => match Bert::compile(&backend, &config) {
                Ok(_) => "compiled",
                Err(ModelError::Build(_)) => "build error",
                Err(ModelError::Compile(CompileError::OutOfMemory { .. })) => "out of memory",
                Err(ModelError::Compile(_)) => "compile error",
            },
        }));
        match outcome {
            Ok(kind) => *outcomes.entry(kind).or_default() += 1,
            Err(_) => panics.push(format!("case {case}: {text}")),
        }
    }
    println!(
        "hostile configs: {CASES} cases (seed {SEED:#x}): {outcomes:?}, {} panics",
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

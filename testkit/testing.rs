//! Fixtures the integration tests share.

use std::path::PathBuf;

use rlx::models::bert::BertConfig;

/// The folder of the tests' reference files: `$RLX_TEST_DATA` when set (a copy packed for a
/// machine without the source tree, which `scripts/gpu-check.sh run` points it at), else
/// `tests/data` of the checkout the tests were built from.
///
/// ```
/// assert!(rlx_testkit::testing::data_dir().ends_with("data"));
/// ```
pub fn data_dir() -> PathBuf {
    match std::env::var_os("RLX_TEST_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data")),
    }
}

/// A two-layer BERT small enough to run thousands of times in a test: hidden size 32,
/// 4 heads, sequences of up to 16 tokens.
///
/// ```
/// assert_eq!(rlx_testkit::testing::tiny_bert().num_hidden_layers, 2);
/// ```
pub fn tiny_bert() -> BertConfig {
    BertConfig::from_json(
        r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64,
            "max_position_embeddings": 16, "type_vocab_size": 2,
            "layer_norm_eps": 1e-12, "hidden_act": "gelu"}"#,
    )
    .expect("a valid config")
}

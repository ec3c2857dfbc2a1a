//! What the decoder-LLM tests share: SmolLM2's GGUF file, transformers' reference outputs
//! (`tests/data/llm/`, or `$RLX_TEST_DATA/llm/`), and GPT-2's byte-level alphabet.

use std::path::{Path, PathBuf};

use rlx::gguf::Gguf;
use rlx::models::fetch::{SMOLLM2_135M_INSTRUCT, SMOLLM2_GGUF};

/// The test data folder: `$RLX_TEST_DATA`, else the repository's `tests/data`.
pub fn data_dir() -> PathBuf {
    std::env::var("RLX_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"))
}

/// The reference record `llm/{name}.json`.
///
/// # Panics
/// When the file is missing or not JSON: a test fixture is broken.
pub fn reference(name: &str) -> serde_json::Value {
    let path = data_dir().join(format!("llm/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON array of token ids.
///
/// # Panics
/// When `v` is not an array of integers.
pub fn ids(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_i64().expect("an integer id"))
        .collect()
}

/// SmolLM2-135M-Instruct's GGUF file, fetched on first use.
///
/// # Panics
/// When it cannot be found or fetched.
pub fn smollm2() -> Gguf {
    let dir = SMOLLM2_135M_INSTRUCT
        .locate(None)
        .unwrap_or_else(|e| panic!("{e}"));
    Gguf::open(dir.join(SMOLLM2_GGUF)).unwrap_or_else(|e| panic!("{e}"))
}

/// Byte `b` as GPT-2's byte-level alphabet spells it: printable bytes stand for
/// themselves, the others for U+0100, U+0101, … in byte order.
///
/// ```
/// assert_eq!(rlx_testkit::llm::byte_symbol(b'a'), "a");
/// assert_eq!(rlx_testkit::llm::byte_symbol(b' '), "Ġ");
/// ```
pub fn byte_symbol(b: u8) -> String {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let b = u32::from(b);
    let code = if printable(b) {
        b
    } else {
        256 + (0..b).filter(|c| !printable(*c)).count() as u32
    };
    char::from_u32(code).map(String::from).unwrap_or_default()
}

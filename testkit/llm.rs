//! What the decoder-LLM tests share: SmolLM2's GGUF file, transformers' reference outputs
//! (`tests/data/llm/`, or `$RLX_TEST_DATA/llm/`), GPT-2's byte-level alphabet, and the tiny
//! Hugging Face checkpoints of `scripts/tiny_decoders.py` written from their formula.

use std::path::{Path, PathBuf};

use rlx::gguf::Gguf;
use rlx::models::fetch::model_or_smollm2;
use rlx::tensor::HostTensor;

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

/// The index of the largest value of `row` (of equal ones, the last), or `None` when it
/// is empty: a greedy token.
///
/// ```
/// assert_eq!(rlx_testkit::llm::argmax(&[0.5, 2.0, 2.0, -1.0]), Some(2));
/// assert_eq!(rlx_testkit::llm::argmax(&[]), None);
/// ```
pub fn argmax(row: &[f32]) -> Option<i64> {
    row.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as i64)
}

/// A reference case's `logits` (rows of numbers), flattened row by row.
///
/// # Panics
/// When the case has no such array of arrays of numbers.
pub fn case_logits(case: &serde_json::Value) -> Vec<f64> {
    case["logits"]
        .as_array()
        .expect("an array of rows of logits")
        .iter()
        .flat_map(|row| {
            row.as_array()
                .expect("a row of logits")
                .iter()
                .map(|v| v.as_f64().expect("a logit"))
        })
        .collect()
}

/// The largest `|got − expected|` over two sequences of logits of one length.
///
/// ```
/// assert_eq!(rlx_testkit::llm::largest_difference(&[1.0, 2.5], &[1.0, 2.0]), 0.5);
/// ```
///
/// # Panics
/// When the lengths differ.
pub fn largest_difference(got: &[f32], expected: &[f64]) -> f64 {
    assert_eq!(got.len(), expected.len(), "logits of different lengths");
    got.iter()
        .zip(expected)
        .map(|(g, e)| (f64::from(*g) - e).abs())
        .fold(0f64, f64::max)
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
    let path = model_or_smollm2(None).unwrap_or_else(|e| panic!("{e}"));
    Gguf::open(path).unwrap_or_else(|e| panic!("{e}"))
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

/// A folder removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// An empty folder under the temp dir, named after `label` and this process.
    ///
    /// # Panics
    /// When it cannot be made.
    pub fn new(label: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("rlx-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(2_166_136_261u64, |h, b| {
        ((h ^ u64::from(b)) * 16_777_619) & 0xFFFF_FFFF
    })
}

/// The weights of `scripts/tiny_decoders.py` (which computes the same): element `i` of tensor `name`, a multiple of 0.001 in [-1, 1]
/// scaled by the tensor's role.
pub fn formula(name: &str, len: usize, gemma: bool) -> Vec<f32> {
    let seed = fnv1a(name);
    (0..len as u64)
        .map(|i| {
            let mut x = (i.wrapping_mul(2_654_435_761) + seed) & 0xFFFF_FFFF;
            x ^= x >> 15;
            x = x.wrapping_mul(2_246_822_519) & 0xFFFF_FFFF;
            x ^= x >> 13;
            let u = ((x % 2001) as f64 - 1000.0) / 1000.0;
            let v = if name.ends_with("norm.weight") {
                if gemma { 0.1 * u } else { 1.0 + 0.1 * u }
            } else if name.ends_with(".bias") {
                0.1 * u
            } else {
                0.2 * u
            };
            v as f32
        })
        .collect()
}

/// Writes a case of `tests/data/llm/tiny_decoders.json` as a Hugging Face folder: `config.json` and the formula's weights,
/// in two shards with an index when `sharded`.
///
/// # Panics
/// When the case is malformed or the files cannot be written.
pub fn write_checkpoint(case: &serde_json::Value, gemma: bool, dir: &Path, sharded: bool) {
    write_tensors(case, &checkpoint_tensors(case, gemma), dir, sharded);
}

/// The tensors of a case of `tests/data/llm/tiny_decoders.json`, in transformers' names,
/// valued by the formula.
///
/// # Panics
/// When the case is malformed.
pub fn checkpoint_tensors(case: &serde_json::Value, gemma: bool) -> Vec<(String, HostTensor)> {
    case["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t[0].as_str().unwrap().to_string();
            let shape: Vec<usize> = t[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as usize)
                .collect();
            let values = formula(&name, shape.iter().product(), gemma);
            (name, HostTensor::from_vec(values, shape).unwrap())
        })
        .collect()
}

/// Writes `tensors` as the checkpoint of `case` (its `config.json` beside them), in two
/// shards with an index when `sharded`.
///
/// # Panics
/// When the files cannot be written.
pub fn write_tensors(
    case: &serde_json::Value,
    tensors: &[(String, HostTensor)],
    dir: &Path,
    sharded: bool,
) {
    std::fs::write(
        dir.join("config.json"),
        case["config_json"].as_str().unwrap(),
    )
    .unwrap();
    if !sharded {
        rlx::weights::save_tensors(&dir.join("model.safetensors"), tensors).unwrap();
        return;
    }
    let (first, second) = tensors.split_at(tensors.len() / 2);
    let mut map = serde_json::Map::new();
    for (file, part) in [
        ("model-1-of-2.safetensors", first),
        ("model-2-of-2.safetensors", second),
    ] {
        rlx::weights::save_tensors(&dir.join(file), part).unwrap();
        for (name, _) in part {
            map.insert(name.clone(), file.into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

/// A GGUF file holding only the SentencePiece vocabulary `model` of `llm/tiny_spm.json`
/// (`scripts/tiny_spm.py`): pieces, scores and token types as `tokenizer.ggml.*`, with
/// `<s>` added first when `add_bos`.
///
/// # Panics
/// When the record is not what the script writes.
pub fn tiny_spm_gguf(model: &serde_json::Value, add_bos: bool) -> Gguf {
    use crate::gguf::{Meta, write};
    let tokens: Vec<Meta> = model["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| Meta::string(t.as_str().expect("a piece")))
        .collect();
    let scores: Vec<Meta> = model["scores"]
        .as_array()
        .expect("scores")
        .iter()
        .map(|s| Meta::f32(s.as_f64().expect("a score") as f32))
        .collect();
    let types: Vec<Meta> = model["token_types"]
        .as_array()
        .expect("token types")
        .iter()
        .map(|t| Meta::raw(5, &(t.as_i64().expect("a type") as i32).to_le_bytes()))
        .collect();
    let id = |key: &str| Meta::u32(model[key].as_u64().expect("an id") as u32);
    let metadata = [
        ("tokenizer.ggml.model", Meta::string("llama")),
        ("tokenizer.ggml.tokens", Meta::array(&tokens)),
        ("tokenizer.ggml.scores", Meta::array(&scores)),
        ("tokenizer.ggml.token_type", Meta::array(&types)),
        ("tokenizer.ggml.unknown_token_id", id("unk")),
        ("tokenizer.ggml.bos_token_id", id("bos")),
        ("tokenizer.ggml.eos_token_id", id("eos")),
        ("tokenizer.ggml.add_bos_token", Meta::bool(add_bos)),
        (
            "tokenizer.ggml.add_space_prefix",
            Meta::bool(model["add_space_prefix"].as_bool().expect("a flag")),
        ),
    ];
    let (bytes, _) = write(&metadata, &[], 32);
    Gguf::from_bytes(bytes).expect("a well-formed file")
}

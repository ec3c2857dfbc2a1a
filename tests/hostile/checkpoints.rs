//! Hostile safetensors files: thousands of mutations of a valid BERT checkpoint (byte
//! flips, truncations, rewritten header lengths, dtypes, shapes and offsets, sizes near
//! `u64::MAX`), each loaded into a compiled model and read tensor by tensor. The only
//! acceptable outcomes are a correct load or a typed `WeightsError` that bound nothing: no
//! panic, no abort, no huge allocation.

use crate::Rng;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use rlx::cpu::CpuBackend;
use rlx::models::bert::{Bert, BertConfig};
use rlx::tensor::HostTensor;
use rlx::weights::{WeightsError, read_tensors};

/// Cases per mutation family; with the fixed seed every run tries the same files.
const CASES: usize = 400;
const SEED: u64 = 0x5eed_c0de_2026_1122;

fn tiny_bert() -> BertConfig {
    BertConfig::from_json(
        r#"{"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 32,
            "max_position_embeddings": 12, "type_vocab_size": 2,
            "layer_norm_eps": 1e-12, "hidden_act": "gelu"}"#,
    )
    .unwrap()
}

/// A file's parts: the JSON header and the data after it.
fn split(file: &[u8]) -> (String, Vec<u8>) {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(file[8..8 + n].to_vec()).unwrap();
    (header, file[8 + n..].to_vec())
}

fn join(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Replaces the `k`-th number in `text` (counting digit runs) by `value`.
fn replace_number(text: &str, k: usize, value: &str) -> String {
    let bytes = text.as_bytes();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    match runs.get(k % runs.len().max(1)) {
        Some(&(a, b)) => format!("{}{value}{}", &text[..a], &text[b..]),
        None => text.to_string(),
    }
}

/// One mutation of `file` from family `family`.
fn mutate(file: &[u8], family: usize, rng: &mut Rng) -> Vec<u8> {
    let (header, data) = split(file);
    let huge = [
        "18446744073709551615",
        "18446744073709551614",
        "9223372036854775807",
        "4294967296",
        "4294967295",
        "0",
        "1",
        "99999999999999999999999",
        "-1",
        "1e30",
    ];
    match family {
        // Random bytes anywhere, more often in the header.
        0 => {
            let mut out = file.to_vec();
            for _ in 0..1 + rng.below(8) {
                let at = if rng.below(3) > 0 {
                    rng.below(8 + header.len())
                } else {
                    rng.below(out.len())
                };
                out[at] = rng.next() as u8;
            }
            out
        }
        // Truncated, or with garbage appended.
        1 => {
            let mut out = file.to_vec();
            if rng.below(2) == 0 {
                out.truncate(rng.below(file.len()));
            } else {
                for _ in 0..1 + rng.below(64) {
                    out.push(rng.next() as u8);
                }
            }
            out
        }
        // The header length prefix rewritten.
        2 => {
            let mut out = file.to_vec();
            let n = match rng.below(4) {
                0 => u64::MAX - rng.below(16) as u64,
                1 => rng.next(),
                2 => header.len() as u64 + rng.below(64) as u64,
                _ => rng.below(header.len()) as u64,
            };
            out[..8].copy_from_slice(&n.to_le_bytes());
            out
        }
        // A number of the header (a shape dim or an offset) replaced.
        3 => {
            let k = rng.below(4096);
            let value = *rng.pick(&huge);
            join(&replace_number(&header, k, value), &data)
        }
        // Dtypes swapped for others, known or not.
        4 => {
            let dtypes = [
                "F32", "F16", "BF16", "F64", "I64", "I32", "U8", "BOOL", "F8_E4M3", "C64", "U64",
                "XYZ", "",
            ];
            let mut h = header.clone();
            for _ in 0..1 + rng.below(3) {
                let at = h
                    .match_indices("\"F32\"")
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>();
                if at.is_empty() {
                    break;
                }
                let i = *rng.pick(&at);
                h = format!("{}\"{}\"{}", &h[..i], rng.pick(&dtypes), &h[i + 5..]);
            }
            join(&h, &data)
        }
        // Structure: keys duplicated or renamed, JSON broken, non-UTF-8 or control bytes.
        _ => {
            let mut h = header.clone().into_bytes();
            match rng.below(5) {
                0 => {
                    let at = rng.below(h.len());
                    h.insert(at, 0xff);
                }
                1 => {
                    let at = rng.below(h.len());
                    h.truncate(at);
                }
                2 => {
                    let at = rng.below(h.len());
                    h.insert(at, rng.below(32) as u8);
                }
                3 => {
                    let text = String::from_utf8_lossy(&h).replace("weight", "weigth");
                    h = text.into_bytes();
                }
                _ => {
                    let text = String::from_utf8_lossy(&h).replacen(
                        "\"dtype\"",
                        "\"dtype\":\"F32\",\"dtype\"",
                        1,
                    );
                    h = text.into_bytes();
                }
            }
            let mut out = (h.len() as u64).to_le_bytes().to_vec();
            out.extend_from_slice(&h);
            out.extend_from_slice(&data);
            out
        }
    }
}

/// What loading one file gave.
#[derive(Default, Debug)]
struct Outcomes {
    loaded: usize,
    typed_errors: usize,
    panics: Vec<String>,
}

/// A weight the checks compare before and after a failed load.
const PROBE: &str = "embeddings.word_embeddings.weight";

fn try_file(model: &mut Bert, path: &Path, outcomes: &mut Outcomes) {
    let before = model.weight(PROBE).unwrap();
    let load = catch_unwind(AssertUnwindSafe(|| model.load_safetensors(path)));
    if matches!(load, Ok(Err(_))) {
        // A failed load binds nothing.
        assert_eq!(model.weight(PROBE).unwrap(), before, "{}", path.display());
    }
    let read = catch_unwind(AssertUnwindSafe(|| {
        let mut bytes = 0usize;
        read_tensors(path, &mut |_, t| {
            bytes += t.bytes.len();
            Ok::<(), WeightsError>(())
        })
    }));
    match (load, read) {
        (Ok(Ok(_)), Ok(Ok(()))) => outcomes.loaded += 1,
        (Ok(_), Ok(_)) => outcomes.typed_errors += 1,
        (load, read) => outcomes.panics.push(format!(
            "{}: load panicked: {}, read panicked: {}",
            path.display(),
            load.is_err(),
            read.is_err()
        )),
    }
}

#[test]
fn mutated_checkpoints_load_or_fail_with_a_typed_error() {
    let config = tiny_bert();
    let mut model = Bert::compile(&CpuBackend::default(), &config).unwrap();
    model
        .init_weights(|spec| {
            let shape = spec.static_shape().unwrap();
            let n: usize = shape.iter().product();
            HostTensor::from_vec((0..n).map(|i| i as f32 * 1e-3).collect(), shape).unwrap()
        })
        .unwrap();
    let dir = std::env::temp_dir().join(format!("rlx-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.safetensors");
    model.save_safetensors(&good).unwrap();
    let original = std::fs::read(&good).unwrap();
    let weights_before = model.weight(PROBE).unwrap();

    let mut rng = Rng(SEED);
    let families = [
        "byte flips",
        "truncated or extended",
        "header length",
        "numbers",
        "dtypes",
        "structure",
    ];
    let mut total = Outcomes::default();
    for (family, name) in families.iter().enumerate() {
        let mut outcomes = Outcomes::default();
        for case in 0..CASES {
            let bytes = mutate(&original, family, &mut rng);
            let path = dir.join(format!("case-{family}-{case}.safetensors"));
            std::fs::write(&path, &bytes).unwrap();
            try_file(&mut model, &path, &mut outcomes);
            std::fs::remove_file(&path).unwrap();
        }
        println!(
            "hostile checkpoints, {name}: {CASES} cases, {} loaded, {} typed errors, {} panics",
            outcomes.loaded,
            outcomes.typed_errors,
            outcomes.panics.len()
        );
        total.loaded += outcomes.loaded;
        total.typed_errors += outcomes.typed_errors;
        total.panics.extend(outcomes.panics);
    }
    println!(
        "hostile checkpoints: {} cases (seed {SEED:#x}), {} loaded, {} typed errors, {} panics",
        CASES * families.len(),
        total.loaded,
        total.typed_errors,
        total.panics.len()
    );
    assert!(total.panics.is_empty(), "{:#?}", total.panics);
    // Most mutations must be caught: a loader that accepted everything would pass the
    // no-panic check above.
    assert!(total.typed_errors > CASES * families.len() / 2, "{total:?}");

    // The model still works: the original file loads and restores the original values.
    model.load_safetensors(&good).unwrap();
    assert_eq!(model.weight(PROBE).unwrap(), weights_before);
    std::fs::remove_dir_all(&dir).unwrap();
}

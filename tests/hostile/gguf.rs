//! Hostile GGUF files: thousands of mutations of a valid file (byte flips, truncations,
//! rewritten counts, string lengths, value and tensor types, ranks, dims and offsets), each
//! opened and every tensor dequantized. The only acceptable outcomes are a file that reads
//! or a typed `GgufError`: no panic, no abort, no huge allocation.

use crate::Rng;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rlx::gguf::{Gguf, GgufError};
use rlx_testkit::gguf::{Fields, Meta, Tensor, write};

/// Cases per mutation family; with the fixed seed every run tries the same files.
const CASES: usize = 500;
const SEED: u64 = 0x6767_7566_2026_1127;

fn base() -> (Vec<u8>, Fields) {
    let block = |kind_bytes: usize, fill: u8| -> Vec<u8> {
        let mut b = vec![fill; kind_bytes];
        // A small finite f16 scale where each format keeps one.
        b[..2].copy_from_slice(&half::f16::from_f32(0.125).to_le_bytes());
        b
    };
    let tensors = vec![
        Tensor {
            name: "a.q4_0".into(),
            dims: vec![32, 2],
            type_id: 2,
            data: [block(18, 0x5a), block(18, 0xa5)].concat(),
        },
        Tensor {
            name: "b.q4_k".into(),
            dims: vec![256],
            type_id: 12,
            data: block(144, 0x37),
        },
        Tensor {
            name: "c.q6_k".into(),
            dims: vec![256, 1],
            type_id: 14,
            data: vec![0x21; 210],
        },
        Tensor {
            name: "d.f16".into(),
            dims: vec![3, 2],
            type_id: 1,
            data: vec![0x3c; 12],
        },
        Tensor {
            name: "e.f32".into(),
            dims: vec![4],
            type_id: 0,
            data: 1.5f32.to_le_bytes().repeat(4),
        },
    ];
    let metadata = [
        ("general.architecture", Meta::string("llama")),
        ("llama.block_count", Meta::u32(2)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::f32(1e-5)),
        ("tokenizer.ggml.add_bos_token", Meta::bool(true)),
        (
            "tokenizer.ggml.tokens",
            Meta::array(&[Meta::string("<s>"), Meta::string("é"), Meta::string("ab")]),
        ),
        (
            "tokenizer.ggml.scores",
            Meta::array(&[Meta::f32(0.0), Meta::f32(-1.0), Meta::f32(-2.0)]),
        ),
        ("nested", Meta::array(&[Meta::array(&[Meta::u32(7)])])),
    ];
    write(&metadata, &tensors, 32)
}

fn put_u64(file: &mut [u8], at: usize, v: u64) {
    if at + 8 <= file.len() {
        file[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
}

fn put_u32(file: &mut [u8], at: usize, v: u32) {
    if at + 4 <= file.len() {
        file[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

fn absurd(rng: &mut Rng, len: usize) -> u64 {
    let random = rng.next();
    *rng.pick(&[
        0,
        1,
        2,
        31,
        33,
        255,
        256,
        len as u64,
        (len / 2) as u64,
        1 << 31,
        1 << 40,
        u64::MAX / 8,
        u64::MAX - 1,
        u64::MAX,
        random,
    ])
}

fn mutate(file: &[u8], fields: &Fields, family: usize, rng: &mut Rng) -> Vec<u8> {
    let mut f = file.to_vec();
    let len = f.len();
    match family {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(len);
                f[at] ^= 1 << rng.below(8);
            }
        }
        1 => f.truncate(rng.below(len)),
        2 => {
            let at = fields.counts[rng.below(2)];
            let v = absurd(rng, len);
            put_u64(&mut f, at, v);
        }
        3 => {
            let at = *rng.pick(&fields.lengths);
            let v = absurd(rng, len);
            put_u64(&mut f, at, v);
        }
        4 => {
            let at = *rng.pick(&fields.value_types);
            let v = rng.below(16) as u32;
            put_u32(&mut f, at, v);
        }
        5 => {
            let at = *rng.pick(&fields.tensor_types);
            let small = rng.below(45) as u32;
            let v = *rng.pick(&[small, u32::MAX, 1000]);
            put_u32(&mut f, at, v);
        }
        6 => {
            let at = *rng.pick(&fields.dims);
            let v = absurd(rng, len);
            put_u64(&mut f, at, v);
        }
        7 => {
            let at = *rng.pick(&fields.offsets);
            let (wild, aligned) = (absurd(rng, len), 32 * rng.below(40) as u64);
            let v = *rng.pick(&[wild, aligned]);
            put_u64(&mut f, at, v);
        }
        _ => {
            let at = *rng.pick(&fields.ranks);
            let v = rng.below(9) as u32;
            put_u32(&mut f, at, v);
        }
    }
    f
}

#[derive(Default)]
struct Outcomes {
    read: usize,
    typed_errors: usize,
    panics: Vec<String>,
}

/// Opens the file and dequantizes every tensor it lists.
fn read_all(bytes: Vec<u8>) -> Result<usize, GgufError> {
    let file = Gguf::from_bytes(bytes)?;
    let mut values = 0;
    for info in file.tensors() {
        match file.tensor_f32(&info.name) {
            Ok(t) => values += t.shape().iter().product::<usize>(),
            Err(GgufError::Dequantize { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(values + file.metadata().len())
}

#[test]
fn mutated_gguf_files_read_or_fail_with_a_typed_error() {
    let (file, fields) = base();
    assert!(read_all(file.clone()).is_ok(), "the unmutated file reads");
    let mut rng = Rng(SEED);
    let mut total = Outcomes::default();
    let names = [
        "byte flips",
        "truncations",
        "counts",
        "lengths",
        "value types",
        "tensor types",
        "dims",
        "offsets",
        "ranks",
    ];
    for (family, name) in names.iter().enumerate() {
        let mut outcomes = Outcomes::default();
        for case in 0..CASES {
            let bytes = mutate(&file, &fields, family, &mut rng);
            match catch_unwind(AssertUnwindSafe(|| read_all(bytes))) {
                Ok(Ok(_)) => outcomes.read += 1,
                Ok(Err(_)) => outcomes.typed_errors += 1,
                Err(_) => outcomes.panics.push(format!("{name} case {case}")),
            }
        }
        println!(
            "hostile gguf, {name}: {CASES} cases, {} read, {} typed errors, {} panics",
            outcomes.read,
            outcomes.typed_errors,
            outcomes.panics.len()
        );
        total.read += outcomes.read;
        total.typed_errors += outcomes.typed_errors;
        total.panics.extend(outcomes.panics);
    }
    println!(
        "hostile gguf: {} cases (seed {SEED:#x}), {} read, {} typed errors, {} panics",
        names.len() * CASES,
        total.read,
        total.typed_errors,
        total.panics.len()
    );
    assert!(total.panics.is_empty(), "panics: {:?}", total.panics);
    assert!(
        total.typed_errors > names.len() * CASES / 2,
        "most mutations are caught"
    );
}

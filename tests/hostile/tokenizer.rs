//! Hostile input to GGUF tokenizers: SmolLM2's real tokenizer over the hostile strings of
//! `text.rs` (every one must round-trip: byte-level BPE loses nothing) and random ids,
//! and tokenizers built from mutated metadata (malformed merges, unknown or duplicate
//! tokens, wrong types, ids out of range, unknown models and pre-tokenizers, SentencePiece
//! scores that are not numbers, unknown token types) each then used
//! on text and ids. The only acceptable outcomes are a correct result or a typed error.

use crate::Rng;
use crate::text::text;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rlx::{gguf::Gguf, tokenizer::Tokenizer};
use rlx_testkit::gguf::{Meta, write};
use rlx_testkit::llm::{byte_symbol, smollm2};

const CASES: usize = 2000;
const SEED: u64 = 0x70c3_2026_1127;

#[test]
fn hostile_text_round_trips_through_the_smollm2_tokenizer() {
    let file = smollm2();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let vocab = tokenizer.vocab_size() as u32;
    // SmolLM2's vocabulary lacks 21 of the 256 byte tokens (0x04, 0xF1, …): bytes without
    // one are dropped, as transformers drops them. Text made of the others round-trips.
    let in_vocab: std::collections::HashSet<String> =
        (0..vocab).filter_map(|id| tokenizer.token(id)).collect();
    let representable: Vec<bool> = (0..=255u8)
        .map(|b| in_vocab.contains(&byte_symbol(b)))
        .collect();
    assert_eq!(representable.iter().filter(|r| !**r).count(), 21);
    let mut rng = Rng(SEED);
    let (mut round_trips, mut lossy, mut typed_errors) = (0usize, 0usize, 0usize);
    let mut panics = Vec::new();
    for case in 0..CASES {
        // Texts, with the file's special tokens mixed in now and then.
        let mut s = text(case % 6, &mut rng);
        if case % 7 == 0 {
            let middle = s.chars().count() / 2;
            let at = s.char_indices().nth(middle).map_or(s.len(), |(i, _)| i);
            s.insert_str(at, "<|im_start|>user\n");
        }
        let whole = s.bytes().all(|b| representable[b as usize]);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let ids = tokenizer.encode(&s)?;
            assert!(
                ids.iter().all(|&i| i < vocab),
                "case {case}: id out of range"
            );
            let back = tokenizer.decode(&ids)?;
            if whole {
                assert_eq!(back, s, "case {case}: text does not round-trip");
            }
            Ok::<_, rlx::tokenizer::TokenizerError>(whole)
        }));
        match outcome {
            Ok(Ok(true)) => round_trips += 1,
            Ok(Ok(false)) => lossy += 1,
            Ok(Err(_)) => typed_errors += 1,
            Err(_) => panics.push(format!("text case {case}")),
        }
        // Random ids, in and past the vocabulary.
        let ids: Vec<u32> = (0..rng.below(64))
            .map(|_| match rng.below(4) {
                0 => rng.next() as u32,
                _ => rng.below(vocab as usize + 10) as u32,
            })
            .collect();
        match catch_unwind(AssertUnwindSafe(|| {
            let _ = tokenizer.decode(&ids);
            let _ = tokenizer.decode_text(&ids);
        })) {
            Ok(()) => {}
            Err(_) => panics.push(format!("ids case {case}")),
        }
    }
    println!(
        "hostile tokenizer text: {CASES} strings (seed {SEED:#x}): {round_trips} round trips, \
         {lossy} with bytes the vocabulary lacks (ids checked), {typed_errors} typed errors, \
         {} panics",
        panics.len()
    );
    assert!(panics.is_empty(), "{panics:#?}");
    assert_eq!(typed_errors, 0, "every string tokenizes");
    assert!(round_trips > CASES / 3, "{round_trips} round trips");
}

/// Tokenizer metadata for a tiny byte-level vocabulary, each key mutated by `family`.
fn metadata(family: usize, rng: &mut Rng) -> Vec<(&'static str, Meta)> {
    let mut tokens: Vec<String> = ["<s>", "</s>", "a", "b", "Ġ", "ab", "Ġa", "é"]
        .map(String::from)
        .to_vec();
    let mut merges: Vec<String> = ["a b", "Ġ a"].map(String::from).to_vec();
    let mut types: Vec<Meta> = [3, 3, 1, 1, 1, 1, 1, 1]
        .map(|t| Meta::raw(5, &i32::to_le_bytes(t)))
        .to_vec();
    let mut model = Meta::string("gpt2");
    let mut pre = Meta::string("smollm");
    let (mut bos, mut eos) = (Meta::u32(0), Meta::u32(1));
    match family {
        0 => merges.push(["a", "a b c", "", " ", "zz yy", "a  b"][rng.below(6)].into()),
        1 => tokens.push(tokens[rng.below(tokens.len())].clone()),
        2 => tokens.clear(),
        3 => {
            types.truncate(rng.below(types.len()));
        }
        4 => {
            let wild = [u32::MAX, 8, 9, 1 << 31][rng.below(4)];
            if rng.below(2) == 0 {
                bos = Meta::u32(wild);
            } else {
                eos = Meta::u32(wild);
            }
        }
        5 => model = Meta::string(["llama", "bert", "", "gpt2 "][rng.below(4)]),
        6 => pre = Meta::string(["qwen2", "", "default", "gpt2"][rng.below(4)]),
        7 => {
            // Every key of the wrong type.
            return vec![
                ("tokenizer.ggml.model", Meta::u32(7)),
                ("tokenizer.ggml.tokens", Meta::u32(7)),
                ("tokenizer.ggml.merges", Meta::string("a b")),
                ("tokenizer.ggml.token_type", Meta::string("x")),
                ("tokenizer.ggml.bos_token_id", Meta::string("0")),
            ];
        }
        8 => {
            merges.clear();
            tokens.push("Ġab".repeat(1 + rng.below(2000)));
        }
        _ => return sentencepiece(rng),
    }
    let strings =
        |v: &[String]| Meta::array(&v.iter().map(|s| Meta::string(s)).collect::<Vec<_>>());
    vec![
        ("tokenizer.ggml.model", model),
        ("tokenizer.ggml.pre", pre),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.merges", strings(&merges)),
        ("tokenizer.ggml.token_type", Meta::array(&types)),
        ("tokenizer.ggml.bos_token_id", bos),
        ("tokenizer.ggml.eos_token_id", eos),
        (
            "tokenizer.ggml.add_bos_token",
            Meta::bool(rng.below(2) == 0),
        ),
    ]
}

/// Metadata for a tiny SentencePiece-style vocabulary (`tokenizer.ggml.model = llama`), one
/// thing about it hostile: scores that are not numbers or missing, unknown token types,
/// huge, empty or repeated pieces.
fn sentencepiece(rng: &mut Rng) -> Vec<(&'static str, Meta)> {
    let mut tokens: Vec<String> = [
        "<unk>",
        "<s>",
        "</s>",
        "\u{2581}",
        "a",
        "b",
        "\u{2581}a",
        "ab",
        "<0x41>",
        "é",
    ]
    .map(String::from)
    .to_vec();
    let mut scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
    let mut types: Vec<i32> = vec![2, 3, 3, 1, 1, 1, 1, 1, 6, 1];
    let n = tokens.len();
    match rng.below(6) {
        0 => scores[rng.below(n)] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][rng.below(3)],
        1 => scores.truncate(rng.below(n)),
        2 => types[rng.below(n)] = [-7, 0, 99, 4, 5][rng.below(5)],
        3 => {
            tokens.push("\u{2581}ab".repeat(1 + rng.below(2000)));
            scores.push(1.0);
            types.push(1);
        }
        4 => tokens[rng.below(n)] = String::new(),
        _ => tokens[rng.below(n)] = tokens[rng.below(n)].clone(),
    }
    let strings = Meta::array(&tokens.iter().map(|s| Meta::string(s)).collect::<Vec<_>>());
    vec![
        ("tokenizer.ggml.model", Meta::string("llama")),
        ("tokenizer.ggml.tokens", strings),
        (
            "tokenizer.ggml.scores",
            Meta::array(&scores.iter().map(|s| Meta::f32(*s)).collect::<Vec<_>>()),
        ),
        (
            "tokenizer.ggml.token_type",
            Meta::array(
                &types
                    .iter()
                    .map(|t| Meta::raw(5, &t.to_le_bytes()))
                    .collect::<Vec<_>>(),
            ),
        ),
        ("tokenizer.ggml.bos_token_id", Meta::u32(1)),
        (
            "tokenizer.ggml.add_space_prefix",
            Meta::bool(rng.below(2) == 0),
        ),
    ]
}

#[test]
fn tokenizers_from_hostile_metadata_work_or_fail_with_a_typed_error() {
    let mut rng = Rng(SEED ^ 0xbad);
    let families = 10;
    let (mut built, mut typed_errors, mut panics) = (0usize, 0usize, Vec::new());
    for case in 0..CASES / 2 {
        let meta = metadata(case % families, &mut rng);
        let (bytes, _) = write(&meta, &[], 32);
        let file = Gguf::from_bytes(bytes).expect("well-formed GGUF");
        let texts = [text(case % 6, &mut rng), "ab aab é b".to_string()];
        let ids: Vec<u32> = (0..rng.below(16)).map(|_| rng.below(20) as u32).collect();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let tokenizer = Tokenizer::from_gguf(&file)?;
            for t in &texts {
                let encoded = tokenizer.encode(t);
                if let Ok(encoded) = encoded {
                    let _ = tokenizer.decode(&encoded);
                }
            }
            let _ = tokenizer.decode(&ids);
            let _ = tokenizer.decode_text(&ids);
            let _ = tokenizer.stop_tokens();
            Ok::<_, rlx::tokenizer::TokenizerError>(())
        }));
        match outcome {
            Ok(Ok(())) => built += 1,
            Ok(Err(_)) => typed_errors += 1,
            Err(_) => panics.push(format!("metadata case {case} family {}", case % families)),
        }
    }
    println!(
        "hostile tokenizer metadata: {} files (seed {:#x}): {built} built and used, \
         {typed_errors} typed errors, {} panics",
        CASES / 2,
        SEED ^ 0xbad,
        panics.len()
    );
    assert!(panics.is_empty(), "{panics:#?}");
    assert!(built > 0 && typed_errors > 0, "both outcomes are exercised");
}

//! Hostile text through the MiniLM pipeline: thousands of fixed-seed strings (any Unicode
//! scalar, control characters, combining marks, emoji sequences, right-to-left text, NULs,
//! empty and whitespace-only strings, strings far past the token limit) tokenized, and a
//! sample embedded. The only acceptable outcomes are a correct result (ids within the
//! vocabulary and the length limit; finite unit-length embeddings) or a typed error: no
//! panic.

use crate::Rng;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rlx::cpu::CpuBackend;
use rlx::models::minilm::{ModelFiles, SentenceEmbedder};

const CASES: usize = 3000;
/// Every this-many-th string is also embedded (the whole set would be slow).
const EMBED_EVERY: usize = 15;
const SEED: u64 = 0x7e57_7e87_2026_1122;

/// One hostile string from family `family`.
pub(crate) fn text(family: usize, rng: &mut Rng) -> String {
    let len = rng.below(40);
    let any_scalar = |rng: &mut Rng| loop {
        if let Some(c) = char::from_u32(rng.below(0x11_0000) as u32) {
            return c;
        }
    };
    let from = |rng: &mut Rng, set: &[char]| set[rng.below(set.len())];
    match family {
        0 => (0..len).map(|_| any_scalar(rng)).collect(),
        1 => (0..len)
            .map(|_| char::from_u32(rng.below(0x20) as u32).unwrap())
            .collect(),
        2 => {
            let marks = ['\u{301}', '\u{308}', '\u{20dd}', '\u{36f}', '\u{489}'];
            let mut s = String::from("e");
            for _ in 0..len * 8 {
                s.push(from(rng, &marks));
            }
            s
        }
        3 => {
            let parts = [
                '\u{1f468}',
                '\u{200d}',
                '\u{1f469}',
                '\u{fe0f}',
                '\u{1f3fd}',
                '\u{1f1fa}',
                '\u{1f1f8}',
                '\u{200b}',
                '\u{feff}',
                '\u{2066}',
                '\u{202e}',
                '\u{5d0}',
                '\u{627}',
                '\u{0}',
            ];
            (0..len).map(|_| from(rng, &parts)).collect()
        }
        4 => match rng.below(4) {
            0 => String::new(),
            1 => " \t\n\r\u{a0}\u{3000}".repeat(1 + len),
            2 => "\u{0}".repeat(1 + len),
            _ => "[CLS] [SEP] [PAD] [UNK] [MASK] ##ing".to_string(),
        },
        // Far past the token limit: long words, many words, one huge unbroken run.
        _ => match rng.below(3) {
            0 => "word ".repeat(5_000 + rng.below(20_000)),
            1 => "x".repeat(50_000 + rng.below(50_000)),
            _ => (0..20_000).map(|_| any_scalar(rng)).collect(),
        },
    }
}

#[test]
fn hostile_strings_tokenize_and_embed_or_fail_with_a_typed_error() {
    let files = ModelFiles::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let model = SentenceEmbedder::new(&CpuBackend::default(), &files).unwrap();
    let vocab = model.config().vocab_size as u32;
    let limit = model.tokenizer().max_length();
    let mut rng = Rng(SEED);
    let (mut tokenized, mut typed_errors, mut panics) = (0usize, 0usize, Vec::new());
    let mut to_embed: Vec<String> = Vec::new();
    for case in 0..CASES {
        let s = text(case % 6, &mut rng);
        match catch_unwind(AssertUnwindSafe(|| model.tokenizer().ids(&s))) {
            Ok(Ok(ids)) => {
                tokenized += 1;
                assert!(ids.len() <= limit, "case {case}: {} ids", ids.len());
                assert!(
                    ids.iter().all(|&i| i < vocab),
                    "case {case}: id out of range"
                );
            }
            Ok(Err(_)) => typed_errors += 1,
            Err(_) => panics.push(format!(
                "tokenizing case {case} ({} chars)",
                s.chars().count()
            )),
        }
        if case % EMBED_EVERY == 0 {
            to_embed.push(s);
        }
    }
    let sentences: Vec<&str> = to_embed.iter().map(String::as_str).collect();
    let embedded = catch_unwind(AssertUnwindSafe(|| model.embed(&sentences)));
    let embedded = match embedded {
        Ok(Ok(vectors)) => {
            assert_eq!(vectors.len(), sentences.len());
            for (i, v) in vectors.iter().enumerate() {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!(
                    v.iter().all(|x| x.is_finite()) && (norm - 1.0).abs() < 1e-4,
                    "sentence {i}: norm {norm}"
                );
            }
            vectors.len()
        }
        Ok(Err(e)) => panic!("embedding strings that all tokenized failed: {e}"),
        Err(_) => {
            panics.push("embedding".to_string());
            0
        }
    };
    println!(
        "hostile text: {CASES} strings (seed {SEED:#x}): {tokenized} tokenized, {typed_errors} \
         typed errors, {} panics; {embedded} embedded to finite unit vectors",
        panics.len()
    );
    assert!(panics.is_empty(), "{panics:#?}");
}

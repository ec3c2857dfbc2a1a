//! The tokenizer a GGUF file carries (`tokenizer.ggml.*`).
//!
//! Two models, as llama.cpp names them in `tokenizer.ggml.model`: `gpt2`, byte-level BPE
//! with merges and the pre-tokenizers llama.cpp names `smollm` (each digit alone, then
//! GPT-2's split), `default`/`gpt2` (GPT-2's split), `llama-bpe` (Llama 3) and `qwen2`;
//! and `llama`, SentencePiece-style BPE
//! over scored pieces (Llama 1–2, Mistral, Gemma; [`super::sentencepiece`]). Control tokens
//! (`token_type` 3) are special: found whole in a text, never split, left out of text for a
//! reader. Other models and pre-tokenizers are a typed error naming the key.

use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::sentencepiece::{self, TokenKind};
use super::{Tokenizer, TokenizerError};
use crate::gguf::{Gguf, MetadataArray, MetadataValue};

/// How Llama 3's tokenizer splits a text before BPE (its `tokenizer.json`'s pattern):
/// contractions, letters with one leading non-letter, digits in threes, punctuation runs,
/// line breaks, spaces.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split: Llama 3's with each digit alone.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

pub(super) fn strings<'a>(
    file: &'a Gguf,
    key: &'static str,
) -> Result<&'a [String], TokenizerError> {
    match file.get(key).and_then(MetadataValue::as_array) {
        Some(MetadataArray::Text(v)) => Ok(v),
        Some(_) => Err(TokenizerError::Metadata {
            key,
            reason: "is not an array of strings".into(),
        }),
        None => Err(TokenizerError::Metadata {
            key,
            reason: "is missing".into(),
        }),
    }
}

/// `tokenizer.ggml.token_type`, one kind per token (normal where the file has none).
fn token_kinds(file: &Gguf, tokens: usize) -> Result<Vec<TokenKind>, TokenizerError> {
    const KEY: &str = "tokenizer.ggml.token_type";
    match file.get(KEY).and_then(MetadataValue::as_array) {
        None => Ok(vec![TokenKind::Normal; tokens]),
        Some(MetadataArray::I32(v)) if v.len() == tokens => {
            Ok(v.iter().map(|t| TokenKind::from_gguf(*t)).collect())
        }
        Some(MetadataArray::I32(v)) => Err(TokenizerError::Metadata {
            key: KEY,
            reason: format!("has {} entries for {tokens} tokens", v.len()),
        }),
        Some(_) => Err(TokenizerError::Metadata {
            key: KEY,
            reason: "is not an array of i32".into(),
        }),
    }
}

impl Tokenizer {
    /// Builds the tokenizer the file describes.
    ///
    /// ```no_run
    /// let file = rlx::gguf::Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let tokenizer = rlx::tokenizer::Tokenizer::from_gguf(&file)?;
    /// let ids = tokenizer.encode("Hello")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_gguf(file: &Gguf) -> Result<Tokenizer, TokenizerError> {
        let model = file
            .get("tokenizer.ggml.model")
            .and_then(MetadataValue::as_str);
        let tokens = strings(file, "tokenizer.ggml.tokens")?;
        let kinds = token_kinds(file, tokens.len())?;
        // llama.cpp's defaults where a SentencePiece file leaves the ids out.
        let (mut inner, defaults) = match model {
            Some("gpt2") => (byte_level_bpe(file, tokens)?, (None, None)),
            Some("llama") => {
                let add_space_prefix = file
                    .get("tokenizer.ggml.add_space_prefix")
                    .and_then(MetadataValue::as_bool)
                    .unwrap_or(true);
                let scores = match file
                    .get("tokenizer.ggml.scores")
                    .and_then(MetadataValue::as_array)
                {
                    Some(MetadataArray::F32(v)) if v.len() == tokens.len() => v,
                    _ => {
                        return Err(TokenizerError::Metadata {
                            key: "tokenizer.ggml.scores",
                            reason: "is not one f32 per token".into(),
                        });
                    }
                };
                let inner = sentencepiece::build(tokens, scores, &kinds, add_space_prefix)?;
                (inner, (Some(1), Some(2)))
            }
            other => {
                return Err(TokenizerError::Metadata {
                    key: "tokenizer.ggml.model",
                    reason: format!("{other:?} is not supported (gpt2 and llama are)"),
                });
            }
        };
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&kinds)
            .filter(|(_, k)| **k == TokenKind::Control)
            .map(|(token, _)| AddedToken::from(token.clone(), true))
            .collect();
        inner.add_special_tokens(&special);
        // Pieces the vocabulary's author defined: found whole in a text, but text.
        let user: Vec<AddedToken> = tokens
            .iter()
            .zip(&kinds)
            .filter(|(_, k)| **k == TokenKind::UserDefined)
            .map(|(token, _)| AddedToken::from(token.clone(), false).normalized(false))
            .collect();
        inner.add_tokens(&user);
        let id = |key: &str, default: Option<u64>| {
            file.get(key)
                .and_then(MetadataValue::as_u64)
                .or(default)
                .and_then(|id| u32::try_from(id).ok())
                .filter(|id| (*id as usize) < tokens.len())
        };
        let add_bos = file
            .get("tokenizer.ggml.add_bos_token")
            .and_then(MetadataValue::as_bool)
            .unwrap_or(model == Some("llama"));
        let bos = id("tokenizer.ggml.bos_token_id", defaults.0);
        let mut stop: Vec<u32> = id("tokenizer.ggml.eos_token_id", defaults.1)
            .into_iter()
            .collect();
        if let Some(eot) = id("tokenizer.ggml.eot_token_id", None)
            && !stop.contains(&eot)
        {
            stop.push(eot);
        }
        Ok(Tokenizer {
            inner,
            post_process: false,
            add_bos: if add_bos { bos } else { None },
            bos,
            stop,
        })
    }
}

/// GPT-2-style byte-level BPE: `tokenizer.ggml.merges` in rank order.
fn byte_level_bpe(file: &Gguf, tokens: &[String]) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let pre = file
        .get("tokenizer.ggml.pre")
        .and_then(MetadataValue::as_str)
        .unwrap_or("default");
    let split = ByteLevel::new(false, true, true);
    // After a regex split of their own, the byte alphabet alone (GPT-2's split is off).
    let bytes = ByteLevel::new(false, true, false);
    let regex = |pattern: &str| -> Result<PreTokenizerWrapper, TokenizerError> {
        let split = Split::new(
            SplitPattern::Regex(pattern.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        Ok(Sequence::new(vec![split.into(), bytes.into()]).into())
    };
    let (pre_tokenizer, ignore_merges, nfc): (PreTokenizerWrapper, bool, bool) = match pre {
        "smollm" => (
            Sequence::new(vec![Digits::new(true).into(), split.into()]).into(),
            false,
            false,
        ),
        "default" | "gpt2" => (split.into(), false, false),
        // Llama 3 emits a word the vocabulary holds whole without merging it.
        "llama-bpe" | "llama3" | "smaug-bpe" => (regex(LLAMA3_SPLIT)?, true, false),
        "qwen2" | "deepseek-r1-qwen" => (regex(QWEN2_SPLIT)?, false, true),
        other => {
            return Err(TokenizerError::Metadata {
                key: "tokenizer.ggml.pre",
                reason: format!("pre-tokenizer {other:?} is not supported yet"),
            });
        }
    };
    let merges = strings(file, "tokenizer.ggml.merges")?;
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let mut pairs = Vec::with_capacity(merges.len());
    for m in merges {
        let Some((a, b)) = m.split_once(' ') else {
            return Err(TokenizerError::Metadata {
                key: "tokenizer.ggml.merges",
                reason: format!("merge {m:?} is not two tokens"),
            });
        };
        pairs.push((a.to_string(), b.to_string()));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    if nfc {
        inner.with_normalizer(Some(NFC));
    }
    inner.with_pre_tokenizer(Some(pre_tokenizer));
    inner.with_decoder(Some(ByteLevel::default()));
    Ok(inner)
}

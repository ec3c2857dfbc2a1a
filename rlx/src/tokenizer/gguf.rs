//! The tokenizer a GGUF file carries (`tokenizer.ggml.*`).
//!
//! Today: GPT-2-style byte-level BPE (`tokenizer.ggml.model = gpt2`) with the pre-tokenizers
//! llama.cpp names `smollm` (each digit alone, then GPT-2's split) and `default`/`gpt2`
//! (GPT-2's split). Control tokens (`token_type` 3) are special: found whole in a text and
//! never split. Other models and pre-tokenizers are a typed error naming the key.

use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper};

use super::{Tokenizer, TokenizerError};
use crate::gguf::{Gguf, MetadataArray, MetadataValue};

/// Token type of control tokens in `tokenizer.ggml.token_type`.
const CONTROL: i32 = 3;

fn strings<'a>(file: &'a Gguf, key: &'static str) -> Result<&'a [String], TokenizerError> {
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

impl Tokenizer {
    /// Builds the tokenizer the file describes.
    pub fn from_gguf(file: &Gguf) -> Result<Tokenizer, TokenizerError> {
        let model = file
            .get("tokenizer.ggml.model")
            .and_then(MetadataValue::as_str);
        if model != Some("gpt2") {
            return Err(TokenizerError::Metadata {
                key: "tokenizer.ggml.model",
                reason: format!("{model:?} is not supported yet (gpt2 is)"),
            });
        }
        let pre = file
            .get("tokenizer.ggml.pre")
            .and_then(MetadataValue::as_str)
            .unwrap_or("default");
        let split = ByteLevel::new(false, true, true);
        let pre_tokenizer: PreTokenizerWrapper = match pre {
            "smollm" => Sequence::new(vec![Digits::new(true).into(), split.into()]).into(),
            "default" | "gpt2" => split.into(),
            other => {
                return Err(TokenizerError::Metadata {
                    key: "tokenizer.ggml.pre",
                    reason: format!("pre-tokenizer {other:?} is not supported yet"),
                });
            }
        };
        let tokens = strings(file, "tokenizer.ggml.tokens")?;
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
            .build()
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevel::default()));
        let types: &[i32] = match file
            .get("tokenizer.ggml.token_type")
            .and_then(MetadataValue::as_array)
        {
            Some(MetadataArray::I32(v)) => v,
            _ => &[],
        };
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(types)
            .filter(|(_, t)| **t == CONTROL)
            .map(|(token, _)| AddedToken::from(token.clone(), true))
            .collect();
        inner.add_special_tokens(&special);
        let add_bos = file
            .get("tokenizer.ggml.add_bos_token")
            .and_then(MetadataValue::as_bool)
            .unwrap_or(false);
        let id = |key: &str| {
            file.get(key)
                .and_then(MetadataValue::as_u64)
                .and_then(|id| u32::try_from(id).ok())
                .filter(|id| (*id as usize) < tokens.len())
        };
        let bos = id("tokenizer.ggml.bos_token_id");
        let mut stop: Vec<u32> = id("tokenizer.ggml.eos_token_id").into_iter().collect();
        if let Some(eot) = id("tokenizer.ggml.eot_token_id")
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

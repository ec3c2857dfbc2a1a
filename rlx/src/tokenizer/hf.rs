//! The tokenizer of a Hugging Face folder: `tokenizer.json` (any model the `tokenizers`
//! crate reads: byte-level BPE, SentencePiece-style BPE with byte fallback, Unigram,
//! WordPiece), with the special tokens `tokenizer_config.json` names and the end tokens
//! `generation_config.json` adds.

use std::path::Path;

use serde_json::Value;

use super::{Tokenizer, TokenizerError};

/// The JSON in `dir/name`, `None` when the file does not exist.
fn read_json(dir: &Path, name: &str) -> Result<Option<Value>, TokenizerError> {
    let path = dir.join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(TokenizerError::File {
                path,
                reason: e.to_string(),
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TokenizerError::File {
            path,
            reason: format!("not JSON: {e}"),
        })
}

/// A special token's string in `tokenizer_config.json`: a string, or an added-token object
/// with its `content`.
fn special_string(config: &Value, key: &str) -> Option<String> {
    match config.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

impl Tokenizer {
    /// The tokenizer of the Hugging Face folder `dir`: `tokenizer.json`, encoding with its
    /// post-processor (which puts the beginning-of-sequence token where the model wants
    /// it); `bos_token` and `eos_token` from `tokenizer_config.json`, and the end tokens
    /// of `generation_config.json`'s `eos_token_id` as stop tokens too.
    ///
    /// ```no_run
    /// let tokenizer = rlx::tokenizer::Tokenizer::from_hf_dir("models/Qwen3-0.6B".as_ref())?;
    /// let ids = tokenizer.encode("Hello")?;
    /// # Ok::<(), rlx::tokenizer::TokenizerError>(())
    /// ```
    pub fn from_hf_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        let path = dir.join("tokenizer.json");
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| TokenizerError::File {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let config = read_json(dir, "tokenizer_config.json")?.unwrap_or(Value::Null);
        let id = |key: &str| special_string(&config, key).and_then(|t| inner.token_to_id(&t));
        let bos = id("bos_token");
        let mut stop: Vec<u32> = id("eos_token").into_iter().collect();
        let vocab = inner.get_vocab_size(true);
        if let Some(generation) = read_json(dir, "generation_config.json")? {
            let ids = match generation.get("eos_token_id") {
                Some(Value::Array(ids)) => ids.iter().filter_map(Value::as_u64).collect(),
                Some(id) => id.as_u64().into_iter().collect(),
                None => Vec::new(),
            };
            for id in ids {
                if let Ok(id) = u32::try_from(id)
                    && (id as usize) < vocab
                    && !stop.contains(&id)
                {
                    stop.push(id);
                }
            }
        }
        Ok(Tokenizer {
            inner,
            post_process: true,
            add_bos: None,
            bos,
            stop,
        })
    }
}

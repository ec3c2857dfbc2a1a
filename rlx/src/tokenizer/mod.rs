//! Tokenizers: text to token ids and back, built on Hugging Face's `tokenizers` crate
//! (feature `text`) from what a model's files say — a GGUF file's `tokenizer.ggml.*`
//! metadata ([`Tokenizer::from_gguf`]: byte-level BPE or SentencePiece-style) or a Hugging
//! Face folder's `tokenizer.json` ([`Tokenizer::from_hf_dir`]).

mod gguf;
mod hf;
mod sentencepiece;

/// Why a tokenizer could not be built or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenizerError {
    /// A key the tokenizer needs is absent or of the wrong type.
    #[error("{key}: {reason}")]
    Metadata {
        /// The metadata key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A Hugging Face tokenizer file could not be read.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The `tokenizers` crate refused the vocabulary or a text.
    #[error("tokenizer: {0}")]
    Tokenizers(String),
}

/// A model's tokenizer: text to ids and back.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Whether `inner`'s post-processor adds the model's special tokens (a Hugging Face
    /// `tokenizer.json` says where they go); GGUF files instead name a token to put first.
    post_process: bool,
    add_bos: Option<u32>,
    bos: Option<u32>,
    /// End of sequence, then end of turn when the file names a different one.
    stop: Vec<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab", &self.inner.get_vocab_size(true))
            .field("add_bos", &self.add_bos)
            .finish()
    }
}

impl Tokenizer {
    /// The ids of `text`, with the beginning-of-sequence token first when the file asks
    /// for it; special-token strings in the text are those tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode(text, self.post_process)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        ids.extend(self.add_bos);
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// The ids of `text` alone, without the tokens the model adds around a text (for a
    /// text a chat template rendered, which places them itself; transformers'
    /// `add_special_tokens=False`).
    ///
    /// ```no_run
    /// # let tokenizer = rlx::tokenizer::Tokenizer::from_hf_dir("model".as_ref())?;
    /// let ids = tokenizer.encode_plain("<s><|user|>Hi</s>")?;
    /// # Ok::<(), rlx::tokenizer::TokenizerError>(())
    /// ```
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids` (special tokens included as their strings).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))
    }

    /// The text of `ids` as a reader sees it: special tokens left out.
    pub fn decode_text(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, true)
            .map_err(|e| TokenizerError::Tokenizers(e.to_string()))
    }

    /// The string of token `id` as the vocabulary spells it (byte-level symbols and all),
    /// if it is one.
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The beginning-of-sequence token, if the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The tokens that end a generation: end of sequence, and end of turn where the file
    /// names another.
    pub fn stop_tokens(&self) -> &[u32] {
        &self.stop
    }

    /// Tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

//! The tokenizer, set up like the reference pipeline: truncation at a maximum length, no
//! fixed padding, right padding with 0 to the longest sentence of a batch.

use std::path::Path;

use super::EmbedError;
use crate::tensor::HostTensor;

/// A `tokenizer.json` tokenizer (the `tokenizers` crate).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    max_length: usize,
}

/// A right-padded batch of token ids, ready to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// `i64 [batch, seq]`.
    pub input_ids: HostTensor,
    /// `i64 [batch, seq]`: 1 at real tokens, 0 at padding.
    pub attention_mask: HostTensor,
    /// `i64 [batch, seq]`.
    pub token_type_ids: HostTensor,
    /// Real tokens per sentence, `[CLS]` and `[SEP]` included.
    pub lengths: Vec<usize>,
}

impl Tokenizer {
    /// Loads `tokenizer.json`, truncating at `max_length` tokens. The file's own padding
    /// setting is replaced: batches are padded to their longest sentence.
    pub fn from_file(path: &Path, max_length: usize) -> Result<Tokenizer, EmbedError> {
        let mut inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| EmbedError::Tokenizer(format!("{}: {e}", path.display())))?;
        inner.with_padding(None);
        let mut tokenizer = Tokenizer {
            inner,
            max_length: 0,
        };
        tokenizer.set_max_length(max_length)?;
        Ok(tokenizer)
    }

    /// The truncation length.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Truncates at `max_length` tokens from now on (at most the model's position table).
    pub fn set_max_length(&mut self, max_length: usize) -> Result<(), EmbedError> {
        let truncation = tokenizers::TruncationParams {
            max_length,
            ..Default::default()
        };
        self.inner
            .with_truncation(Some(truncation))
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        self.max_length = max_length;
        Ok(())
    }

    fn encoding(&self, text: &str) -> Result<tokenizers::Encoding, EmbedError> {
        self.inner
            .encode(text, true)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))
    }

    /// Token ids of one text, special tokens included.
    pub fn ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        Ok(self.encoding(text)?.get_ids().to_vec())
    }

    /// Tokenizes `texts` into one batch right-padded with 0.
    pub fn encode(&self, texts: &[&str]) -> Result<Batch, EmbedError> {
        let rows = self.encodings(texts)?;
        let seq = rows.iter().map(|r| r.get_ids().len()).max().unwrap_or(0);
        Batch::of(&rows.iter().collect::<Vec<_>>(), seq)
    }

    /// The encoding of each text.
    pub(crate) fn encodings(
        &self,
        texts: &[&str],
    ) -> Result<Vec<tokenizers::Encoding>, EmbedError> {
        texts.iter().map(|text| self.encoding(text)).collect()
    }
}

impl Batch {
    /// `rows` right-padded with 0 to `seq` tokens (at least the longest row).
    pub(crate) fn of(rows: &[&tokenizers::Encoding], seq: usize) -> Result<Batch, EmbedError> {
        let n = rows.len();
        let (mut ids, mut mask, mut types) = (
            vec![0i64; n * seq],
            vec![0i64; n * seq],
            vec![0i64; n * seq],
        );
        for (row, e) in rows.iter().enumerate() {
            for (j, (&t, &ty)) in e.get_ids().iter().zip(e.get_type_ids()).enumerate() {
                ids[row * seq + j] = i64::from(t);
                mask[row * seq + j] = 1;
                types[row * seq + j] = i64::from(ty);
            }
        }
        Ok(Batch {
            input_ids: HostTensor::from_vec(ids, [n, seq])?,
            attention_mask: HostTensor::from_vec(mask, [n, seq])?,
            token_type_ids: HostTensor::from_vec(types, [n, seq])?,
            lengths: rows.iter().map(|r| r.get_ids().len()).collect(),
        })
    }
}

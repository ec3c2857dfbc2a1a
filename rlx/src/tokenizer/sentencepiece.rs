//! SentencePiece-style BPE from scored pieces, as GGUF files carry it
//! (`tokenizer.ggml.model = llama`): Llama 1–2, Mistral, Gemma.
//!
//! SentencePiece encodes by merging, again and again, the adjacent pair of symbols whose
//! concatenation is the highest-scoring piece. The `tokenizers` crate's BPE merges the pair
//! of lowest merge rank instead, so the pieces' scores become ranks: every way of splitting
//! a normal piece into two normal pieces is a merge, ranked by the whole piece's score
//! (transformers converts these vocabularies the same way). Spaces become `▁` (with one put
//! before the text when the file asks), characters outside the vocabulary fall back to
//! their UTF-8 bytes (`<0xNN>` pieces), and decoding undoes both.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::prepend::Prepend;
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::utils::Sequence as NormalizerSequence;
use tokenizers::{DecoderWrapper, NormalizerWrapper};

use super::TokenizerError;

/// What SentencePiece writes for a space.
const SPACE: &str = "\u{2581}";

/// A token's role, as `tokenizer.ggml.token_type` numbers it (llama.cpp's
/// `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokenKind {
    /// A piece text is made of.
    Normal,
    /// The unknown-token placeholder.
    Unknown,
    /// A control token (beginning/end of sequence, chat markers): special.
    Control,
    /// A piece the vocabulary's author defined, matched whole in text.
    UserDefined,
    /// A reserved slot.
    Unused,
    /// One byte, `<0xNN>`, for characters outside the vocabulary.
    Byte,
}

impl TokenKind {
    pub(super) fn from_gguf(kind: i32) -> TokenKind {
        match kind {
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Normal,
        }
    }
}

fn refused(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Tokenizers(e.to_string())
}

/// The merges that reproduce SentencePiece's choices: each split of a normal piece into two
/// normal pieces, the highest-scoring whole first (ties in id order, for a fixed result).
fn merges(tokens: &[String], scores: &[f32], kinds: &[TokenKind]) -> Vec<(String, String)> {
    let normal: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| kinds[*i] == TokenKind::Normal)
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut ranked: Vec<(f32, usize, usize, usize)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        if kinds[id] != TokenKind::Normal {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if let (Some(l), Some(r)) = (normal.get(left), normal.get(right)) {
                ranked.push((scores[id], id, *l, *r));
            }
        }
    }
    ranked.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then((a.1, a.2, a.3).cmp(&(b.1, b.2, b.3)))
    });
    ranked
        .into_iter()
        .map(|(_, _, l, r)| (tokens[l].clone(), tokens[r].clone()))
        .collect()
}

/// The tokenizer of `tokens` with their `scores` and `kinds` (special and user-defined
/// tokens are added by the caller).
pub(super) fn build(
    tokens: &[String],
    scores: &[f32],
    kinds: &[TokenKind],
    add_space_prefix: bool,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let mut vocab = Vocab::default();
    for (id, token) in tokens.iter().enumerate() {
        // A repeated piece keeps its first id, as SentencePiece's own lookup does.
        vocab.entry(token.clone()).or_insert(id as u32);
    }
    let mut bpe = BPE::builder()
        .vocab_and_merges(vocab, merges(tokens, scores, kinds))
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = kinds.iter().position(|k| *k == TokenKind::Unknown) {
        bpe = bpe.unk_token(tokens[unk].clone());
    }
    let mut inner = tokenizers::Tokenizer::new(bpe.build().map_err(refused)?);
    let spaces: NormalizerWrapper = Replace::new(" ", SPACE).map_err(refused)?.into();
    let normalizer: NormalizerWrapper = if add_space_prefix {
        NormalizerSequence::new(vec![Prepend::new(SPACE.to_string()).into(), spaces]).into()
    } else {
        spaces
    };
    inner.with_normalizer(Some(normalizer));
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new(SPACE, " ").map_err(refused)?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    inner.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(inner)
}

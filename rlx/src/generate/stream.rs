//! A generation's tokens as pieces of text: never half a character, and never past a stop
//! string.

use super::{FinishReason, GenerateError, Generation, GenerationStats};
use crate::tokenizer::Tokenizer;

/// Tokens held back at most while their text does not yet end a character. A character is
/// at most 4 bytes and a token holds at least one, so 4 complete any one character; only a
/// run of tokens each completing one character and starting the next waits longer, and
/// past this its text goes out with replacement characters rather than waiting forever.
const MOST_PENDING: usize = 8;

/// Tokens already returned that new ones are decoded after. A decoder may treat the start
/// of a text apart (SentencePiece's drops the space a text begins with), so a token's
/// text is what it adds to those before it, not its text alone.
const CONTEXT: usize = 4;

/// Tokens turned into text as they come: each piece is whole UTF-8 characters (bytes of a
/// character split across tokens wait for its last byte), special tokens are left out, and
/// the text ends before the first stop string (which is not returned). Text that might
/// begin a stop string is held back until it cannot. [`TextStream`] pulls a
/// [`Generation`]'s tokens through one; a caller that steps many sequences itself (a
/// [`BatchSession`](super::BatchSession)'s rows) pushes each row's tokens into its own.
///
/// ```no_run
/// use rlx::generate::TextPieces;
/// use rlx::gguf::Gguf;
/// use rlx::tokenizer::Tokenizer;
///
/// let tokenizer = Tokenizer::from_gguf(&Gguf::open("SmolLM2-135M-Instruct.Q4_1.gguf")?)?;
/// let mut text = TextPieces::new(&tokenizer, &["\n\n".to_string()]);
/// let mut out = String::new();
/// for token in tokenizer.encode_plain("Hello world\n\nmore")? {
///     let piece = text.push(token.into())?;
///     out.push_str(&piece.text);
///     if piece.stopped {
///         break;
///     }
/// }
/// out.push_str(&text.finish()?);
/// assert_eq!(out, "Hello world");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TextPieces<'a> {
    tokenizer: &'a Tokenizer,
    stop: Vec<String>,
    /// Tokens whose text does not yet end a character.
    pending: Vec<u32>,
    /// The last tokens returned, at most [`CONTEXT`].
    context: Vec<u32>,
    /// Decoded text not returned yet (it may begin a stop string).
    held: String,
    stopped: bool,
}

impl std::fmt::Debug for TextPieces<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextPieces")
            .field("stop", &self.stop)
            .field("held", &self.held)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

/// What one token added to a [`TextPieces`]' text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    /// Text now certain (may be empty).
    pub text: String,
    /// A stop string came: the text ends here, and later tokens add nothing.
    pub stopped: bool,
}

impl<'a> TextPieces<'a> {
    /// Text by `tokenizer`, ending before any of `stop` (empty strings are ignored).
    pub fn new(tokenizer: &'a Tokenizer, stop: &[String]) -> TextPieces<'a> {
        TextPieces {
            tokenizer,
            stop: stop.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: Vec::new(),
            context: Vec::new(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string has come.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds `token` and returns the text that became certain.
    pub fn push(&mut self, token: i64) -> Result<Piece, GenerateError> {
        if self.stopped {
            return Ok(Piece {
                text: String::new(),
                stopped: true,
            });
        }
        let token =
            u32::try_from(token).map_err(|_| GenerateError::Internal(format!("token {token}")))?;
        self.pending.push(token);
        let text = self.pending_text()?;
        if text.ends_with(char::REPLACEMENT_CHARACTER) && self.pending.len() < MOST_PENDING {
            return Ok(Piece::default());
        }
        self.context.append(&mut self.pending);
        let stale = self.context.len().saturating_sub(CONTEXT);
        self.context.drain(..stale);
        self.held.push_str(&text);
        if let Some(at) = self.first_stop() {
            self.held.truncate(at);
            self.stopped = true;
            return Ok(Piece {
                text: std::mem::take(&mut self.held),
                stopped: true,
            });
        }
        let ready = self.held.len() - self.stop_prefix_len();
        let rest = self.held.split_off(ready);
        Ok(Piece {
            text: std::mem::replace(&mut self.held, rest),
            stopped: false,
        })
    }

    /// The end of the tokens: whatever is held (and any bytes left undecoded, as
    /// replacement characters) is the last piece.
    pub fn finish(&mut self) -> Result<String, GenerateError> {
        if !self.stopped && !self.pending.is_empty() {
            let tail = self.pending_text()?;
            self.pending.clear();
            self.held.push_str(&tail);
        }
        Ok(std::mem::take(&mut self.held))
    }

    /// The text the pending tokens add after the context's.
    fn pending_text(&self) -> Result<String, GenerateError> {
        if self.context.is_empty() {
            return Ok(self.tokenizer.decode_text(&self.pending)?);
        }
        let before = self.tokenizer.decode_text(&self.context)?;
        let all: Vec<u32> = self.context.iter().chain(&self.pending).copied().collect();
        let after = self.tokenizer.decode_text(&all)?;
        match after.strip_prefix(&before) {
            Some(added) => Ok(added.to_string()),
            // A decoder that rewrites what came before: the tokens' own text.
            None => Ok(self.tokenizer.decode_text(&self.pending)?),
        }
    }

    /// Where the first stop string begins in the held text.
    fn first_stop(&self) -> Option<usize> {
        self.stop.iter().filter_map(|s| self.held.find(s)).min()
    }

    /// The longest end of the held text that begins some stop string (on a character
    /// boundary).
    fn stop_prefix_len(&self) -> usize {
        let text = &self.held;
        let mut longest = 0;
        for stop in &self.stop {
            for (at, _) in text.char_indices() {
                let tail = &text[at..];
                if tail.len() < stop.len() && stop.starts_with(tail) {
                    longest = longest.max(tail.len());
                    break;
                }
            }
        }
        longest
    }
}

/// The text of a [`Generation`], piece by piece, as [`TextPieces`] makes it; the
/// generation ends at the first stop string.
pub struct TextStream<'a> {
    generation: Generation<'a>,
    text: TextPieces<'a>,
    done: bool,
}

impl std::fmt::Debug for TextStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextStream")
            .field("generation", &self.generation)
            .field("text", &self.text)
            .finish_non_exhaustive()
    }
}

impl<'a> TextStream<'a> {
    /// The text of `generation` by `tokenizer`, ending before any of `stop` (empty strings
    /// are ignored).
    pub fn new(
        generation: Generation<'a>,
        tokenizer: &'a Tokenizer,
        stop: &[String],
    ) -> TextStream<'a> {
        TextStream {
            generation,
            text: TextPieces::new(tokenizer, stop),
            done: false,
        }
    }

    /// Why it ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.generation.finish_reason()
    }

    /// The generation's counts and times.
    pub fn stats(&self) -> GenerationStats {
        self.generation.stats()
    }

    /// The next piece: `Ok(None)` at the end.
    fn advance(&mut self) -> Result<Option<String>, GenerateError> {
        loop {
            let Some(token) = self.generation.next().transpose()? else {
                self.done = true;
                let rest = self.text.finish()?;
                return Ok((!rest.is_empty()).then_some(rest));
            };
            let piece = self.text.push(token)?;
            if piece.stopped {
                self.generation.finish(FinishReason::Stop);
                self.done = true;
            }
            if !piece.text.is_empty() || piece.stopped {
                return Ok((!piece.text.is_empty()).then_some(piece.text));
            }
        }
    }
}

impl Iterator for TextStream<'_> {
    type Item = Result<String, GenerateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(piece) => piece.map(Ok),
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

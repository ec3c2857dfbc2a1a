//! Finds MLX, compiles the C++ shim against it and links both.
//!
//! MLX is looked for in this order:
//! 1. `MLX_DIR`: a prefix holding `include/mlx/mlx.h` and `lib/libmlx.{so,dylib}`;
//! 2. the pinned wheel under `vendor/mlx/payload`, fetched with `vendor/mlx/fetch.py` when
//!    missing (set `RLX_MLX_NO_FETCH=1` to forbid the download);
//! 3. an installed Python `mlx` package (`pip install mlx`), found through `$RLX_PYTHON`
//!    or `python3`.
//!
//! The library directory is published as `DEP_MLX_LIBDIR` so packages that link binaries
//! can give them an rpath (a `rustc-link-arg` here reaches only this package's binaries).
//!
//! On Linux the wheel's bundled BLAS is the slow netlib reference; when Debian's OpenBLAS
//! (`libopenblas0-pthread`) is installed, it is linked ahead of it. `RLX_MLX_OPENBLAS=0`
//! turns that off; `RLX_MLX_OPENBLAS=/path/libopenblas.so.0` picks another build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in [
        "MLX_DIR",
        "RLX_MLX_NO_FETCH",
        "RLX_PYTHON",
        "RLX_MLX_OPENBLAS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=cpp/shim.cpp");
    println!("cargo:rerun-if-changed=cpp/rlx_mlx.h");

    // A build script reports a fatal error by panicking; cargo shows the message.
    let prefix = find_mlx().unwrap_or_else(|message| panic!("{message}"));
    let include = prefix.join("include");
    let lib = prefix.join("lib");
    println!(
        "cargo:rerun-if-changed={}",
        include.join("mlx/version.h").display()
    );

    let openblas = openblas();
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++20")
        // MLX's headers are not ours: keep their warnings out of the build log.
        .flag(format!("-isystem{}", include.display()))
        .include("cpp")
        .file("cpp/shim.cpp")
        .warnings(true);
    if openblas.is_some() {
        build.define("RLX_MLX_OPENBLAS", None);
    }
    build.compile("rlx_mlx_shim");

    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    if let Some(path) = &openblas
        && let (Some(dir), Some(name)) = (path.parent(), path.file_name())
    {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!(
            "cargo:rustc-link-lib=dylib:+verbatim={}",
            name.to_string_lossy()
        );
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:LIBDIR={}", lib.display());
    println!("cargo:INCLUDE={}", include.display());
}

fn has_mlx(prefix: &Path) -> bool {
    let lib = prefix.join("lib");
    prefix.join("include/mlx/mlx.h").is_file()
        && (lib.join("libmlx.so").is_file() || lib.join("libmlx.dylib").is_file())
}

fn find_mlx() -> Result<PathBuf, String> {
    if let Ok(dir) = env::var("MLX_DIR") {
        let prefix = PathBuf::from(&dir);
        return if has_mlx(&prefix) {
            Ok(prefix)
        } else {
            Err(format!(
                "rlx-mlx-sys: MLX_DIR={dir} does not hold include/mlx/mlx.h and lib/libmlx.so \
                 (or lib/libmlx.dylib)"
            ))
        };
    }
    let python = env::var("RLX_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let vendored = vendored(&python);
    if let Ok(prefix) = &vendored {
        return Ok(prefix.clone());
    }
    let installed = installed_python_mlx(&python);
    if let Ok(prefix) = &installed {
        return Ok(prefix.clone());
    }
    Err(format!(
        "rlx-mlx-sys: cannot find MLX. Tried:\n\
         1. MLX_DIR: not set. Point it at a prefix with include/mlx/mlx.h and lib/libmlx.so.\n\
         2. the pinned wheel in vendor/mlx: {}.\n   \
            Run `python3 vendor/mlx/fetch.py` (needs pip and access to PyPI).\n\
         3. an installed Python mlx: {}.\n   \
            Run `pip install mlx==<pinned version> mlx-cpu==<pinned version>` (Linux) or \
            `pip install mlx` (macOS), or set RLX_PYTHON to that interpreter.\n\
         Or build without the `mlx` feature.",
        vendored.unwrap_err(),
        installed.unwrap_err(),
    ))
}

fn vendored(python: &str) -> Result<PathBuf, String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let vendor = manifest.join("../vendor/mlx");
    let script = vendor.join("fetch.py");
    if !script.is_file() {
        return Err(format!("{} is missing", script.display()));
    }
    println!(
        "cargo:rerun-if-changed={}",
        vendor.join("pin.json").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        vendor.join("payload/stamp.json").display()
    );
    let payload = vendor.join("payload/mlx");
    let stamp_ok = vendor.join("payload/stamp.json").is_file() && has_mlx(&payload);
    if !stamp_ok && env::var("RLX_MLX_NO_FETCH").is_ok_and(|v| !v.is_empty() && v != "0") {
        return Err("not fetched, and RLX_MLX_NO_FETCH forbids fetching it".to_string());
    }
    let output = Command::new(python)
        .arg(&script)
        .output()
        .map_err(|e| format!("cannot run `{python} {}`: {e}", script.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("fetch.py failed: {}", stderr.trim()));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let prefix = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    if has_mlx(&prefix) {
        Ok(prefix)
    } else {
        Err(format!(
            "fetch.py printed {}, which holds no MLX",
            prefix.display()
        ))
    }
}

fn installed_python_mlx(python: &str) -> Result<PathBuf, String> {
    let output = Command::new(python)
        .args(["-c", "import mlx; print(list(mlx.__path__)[0])"])
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !output.status.success() {
        return Err(format!("`import mlx` fails in {python}"));
    }
    let prefix = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if has_mlx(&prefix) {
        Ok(prefix)
    } else {
        Err(format!(
            "{} has no headers and libmlx (on Linux install mlx-cpu too)",
            prefix.display()
        ))
    }
}

/// The OpenBLAS to put in front of MLX's bundled reference BLAS, if any.
fn openblas() -> Option<PathBuf> {
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    match env::var("RLX_MLX_OPENBLAS").as_deref() {
        Ok("0") | Ok("off") | Ok("no") => None,
        Ok(path) if !path.is_empty() && path != "auto" => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                panic!(
                    "rlx-mlx-sys: RLX_MLX_OPENBLAS={} is not a file",
                    path.display()
                );
            }
            Some(path)
        }
        _ if target_os == "linux" => {
            let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
            let candidate = PathBuf::from(format!(
                "/usr/lib/{arch}-linux-gnu/openblas-pthread/libopenblas.so.0"
            ));
            if candidate.is_file() {
                Some(candidate)
            } else {
                println!(
                    "cargo:warning=MLX will use its bundled reference BLAS (slow matmul); \
                     install libopenblas0-pthread for a fast one"
                );
                None
            }
        }
        _ => None,
    }
}

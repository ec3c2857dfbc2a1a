//! RLX's CUDA kernels run on the CPU, a thread per CUDA thread and barriers for their
//! synchronization, against float64 references: CI has no GPU, and a kernel's logic (masks,
//! chunks and their merge, NaN rows, rows that see no key) need not wait for one. The
//! emulator is C++ (`tests/cuda_emulation/`) that includes the kernel's own source; the
//! compiler is the one that builds the shim.

use std::path::Path;
use std::process::Command;

/// Builds `tests/cuda_emulation/{name}.cpp` with the compiler that builds the shim, runs
/// it, and returns its report once it exits cleanly.
fn emulate(name: &str) -> String {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/cuda_emulation/{name}.cpp"));
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}_emulated"));
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let built = Command::new(&compiler)
        .args(["-std=c++20", "-O1", "-pthread", "-w"])
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .status()
        .unwrap_or_else(|e| panic!("{compiler} (which builds the shim) did not start: {e}"));
    assert!(built.success(), "{} did not compile", source.display());
    let run = Command::new(&binary).output().expect("the emulator runs");
    let report = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{report}");
    report
}

fn passed(report: &str) -> usize {
    report.lines().filter(|l| l.starts_with("ok ")).count()
}

#[test]
fn the_decoding_attention_kernel_matches_float64_when_emulated() {
    let report = emulate("decode_attention");
    assert_eq!(passed(&report), 10, "{report}");
}

#[test]
fn the_residual_norm_kernel_matches_float64_when_emulated() {
    let report = emulate("residual_norm");
    assert_eq!(passed(&report), 9, "{report}");
}

#[test]
fn the_head_rotation_kernel_matches_float64_when_emulated() {
    let report = emulate("rope_heads");
    assert_eq!(passed(&report), 7, "{report}");
}

#[test]
fn the_quantized_rows_kernel_matches_float64_when_emulated() {
    let report = emulate("quantized_rows");
    assert_eq!(passed(&report), 12, "{report}");
}

#[test]
fn the_gated_rows_kernel_matches_float64_when_emulated() {
    let report = emulate("gated_rows");
    assert_eq!(passed(&report), 9, "{report}");
}

#[test]
fn the_rotated_rows_kernel_matches_float64_when_emulated() {
    let report = emulate("rotated_rows");
    assert_eq!(passed(&report), 7, "{report}");
}

//! Differential testing on random graphs (issue 17): a bounded run of `fuzz_graphs` on every
//! configuration, and each mismatch it ever found, minimised, kept as a regression.

mod regressions;

use rlx_workspace::fuzz::{Config, run_cases};

/// Seed and size of the bounded run (the long runs are `examples/fuzz_graphs`).
const SEED: u64 = 0x5eed_2026;
const CASES: usize = 400;

#[test]
fn random_graphs_agree_with_float64_on_every_configuration() {
    #[cfg(feature = "mlx")]
    rlx::mlx::set_kernel_fusion(false).unwrap();
    let report = run_cases(SEED, CASES, 10, &Config::all(), |_| {});
    for m in &report.mismatches {
        eprintln!("MISMATCH seed={} config={}: {}", m.seed, m.config, m.detail);
    }
    for f in &report.failures {
        eprintln!("FAILURE {f}");
    }
    println!(
        "fuzz_graphs cases={} mismatches={} failures={} seed={SEED} (checked {}, gradients of {} cases, unjudged {}, refused {})",
        report.cases,
        report.mismatches.len(),
        report.failures.len(),
        report.checked,
        report.gradients,
        report.unjudged,
        report.refused
    );
    assert!(
        report.checked > CASES,
        "the run checked too little: {report:?}"
    );
    assert!(report.mismatches.is_empty() && report.failures.is_empty());
}

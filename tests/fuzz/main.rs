//! Differential testing on random graphs (issue 17): a bounded run of `fuzz_graphs` on every
//! configuration, and each mismatch it ever found, minimised, kept as a regression.

mod gpu_found;
mod regressions;

use std::collections::BTreeSet;

use rlx::ir::OpKind;
use rlx_testkit::fuzz::{Config, generate, run_cases};
use rlx_testkit::rng::Rng;

/// Seed and size of the bounded run (the long runs are `examples/tools/fuzz_graphs.rs`).
const SEED: u64 = 0x5eed_2026;
const CASES: usize = 400;

#[test]
fn random_graphs_agree_with_float64_on_every_configuration() {
    #[cfg(feature = "mlx")]
    rlx::mlx::set_kernel_fusion(false).unwrap();
    let report = run_cases(SEED, 0..CASES, 10, &Config::all(), |_| {});
    for m in &report.mismatches {
        eprintln!("MISMATCH seed={} config={}: {}", m.seed, m.config, m.detail);
    }
    for f in &report.failures {
        eprintln!("FAILURE {f}");
    }
    println!(
        "fuzz_graphs cases={} mismatches={} failures={} seed={SEED} (checked {}, gradients of {} cases, fused sinks {}, unjudged {}, refused {})",
        report.cases,
        report.mismatches.len(),
        report.failures.len(),
        report.checked,
        report.gradients,
        report.fused,
        report.unjudged,
        report.refused
    );
    assert!(
        report.checked > CASES,
        "the run checked too little: {report:?}"
    );
    // The CPU's fusions are exercised: sinks of a run that fuses, against one that cannot.
    assert!(
        report.fused > CASES / 10,
        "too few fused runs compared: {report:?}"
    );
    assert!(report.mismatches.is_empty() && report.failures.is_empty());
}

/// The ops the generator does not make, each with why. Every other op of the vocabulary
/// must come out of it, so a new op fails here until it has a generator.
const NOT_GENERATED: [(OpKind, &str); 1] = [(
    OpKind::Custom,
    "kernels are the user's; tests/mlx.rs and tests/ops run custom ops",
)];

#[test]
fn the_generator_makes_every_op_of_the_vocabulary() {
    let mut seen = BTreeSet::new();
    let mut seeds = Rng(SEED);
    for _ in 0..2_000 {
        let case = generate(seeds.next_u64(), 10);
        seen.extend(case.graph.nodes().iter().map(|n| n.op.kind()));
    }
    let excluded = |k: &OpKind| NOT_GENERATED.iter().any(|(n, _)| n == k);
    let missing: Vec<&OpKind> = OpKind::ALL
        .iter()
        .filter(|k| !seen.contains(k) && !excluded(k))
        .collect();
    assert!(
        missing.is_empty(),
        "no random graph has {missing:?}: give each a generator in testkit/fuzz/generate.rs"
    );
    let stale: Vec<&OpKind> = OpKind::ALL
        .iter()
        .filter(|k| seen.contains(k) && excluded(k))
        .collect();
    assert!(
        stale.is_empty(),
        "{stale:?} are generated after all: drop them from NOT_GENERATED"
    );
}

/// A case named by its seed runs again exactly as it ran among the others (same values
/// checked, same gradient graph), and a run split in two checks what the whole run does.
#[test]
fn a_reported_case_runs_again_from_its_seed() {
    let configs = vec![Config::Cpu { threads: 1 }];
    let seed = 7;
    let among = run_cases(seed, 0..3, 10, &configs, |_| {});
    let mut again = rlx_testkit::fuzz::Report::default();
    let mut seeds = Rng(seed);
    for index in 0..3 {
        let case_seed = seeds.next_u64();
        assert_eq!(rlx_testkit::fuzz::case_seed(seed, index), case_seed);
        rlx_testkit::fuzz::check_seed(case_seed, 10, &configs, &mut again);
    }
    assert_eq!(again.cases, 3);
    assert!(among.checked > 0);
    assert_eq!(
        (again.checked, again.gradients, again.fused, again.unjudged),
        (among.checked, among.gradients, among.fused, among.unjudged)
    );
    // A run split in two (as over two time-limited calls) checks what the whole run does.
    let (head, tail) = (
        run_cases(seed, 0..1, 10, &configs, |_| {}),
        run_cases(seed, 1..3, 10, &configs, |_| {}),
    );
    assert_eq!((head.cases, tail.cases), (1, 2));
    assert_eq!(
        (
            head.checked + tail.checked,
            head.gradients + tail.gradients,
            head.fused + tail.fused,
            head.unjudged + tail.unjudged
        ),
        (among.checked, among.gradients, among.fused, among.unjudged)
    );
}

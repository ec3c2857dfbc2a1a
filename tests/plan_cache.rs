//! The per-binding plan cache is bounded on every backend: a stream of varying lengths (as
//! text generation makes) keeps at most the configured number of plans, and a binding whose
//! plan was dropped is planned again and computes the same values.

use rlx::backend::{Backend, DEFAULT_PLAN_CACHE, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

/// `softmax(x) · w` over `[seq, 8]`, a plan per `seq`.
fn graph() -> Graph {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [Dim::sym("seq"), Dim::from(8)])
        .unwrap();
    let w = b.param("w", DType::F32, [8, 4]).unwrap();
    let p = b.softmax(x, 1).unwrap();
    let y = b.matmul(p, w).unwrap();
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

fn input(seq: usize) -> HostTensor {
    let values = (0..seq * 8)
        .map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5)
        .collect();
    HostTensor::from_vec(values, [seq, 8]).unwrap()
}

/// Lengths 1..=24 visited three times in a shuffled order: every binding returns after its
/// plan has been dropped.
fn stream() -> Vec<usize> {
    (0..72).map(|i| 1 + (i * 17) % 24).collect()
}

/// Runs the stream on `bounded` (a cache of `limit` plans) and `reference` (a fresh
/// executable per run), checking values and the number of plans after every run.
fn check(bounded: &dyn Executable, limit: usize, reference: &dyn Fn(usize) -> Vec<HostTensor>) {
    let mut seen = std::collections::BTreeSet::new();
    for seq in stream() {
        let x = input(seq);
        let got = bounded.run(&[("x", x.view())], &[]).unwrap();
        assert_eq!(got, reference(seq), "seq {seq}");
        seen.insert(seq);
        assert_eq!(
            bounded.cached_plans(),
            seen.len().min(limit),
            "after seq {seq}"
        );
    }
}

fn weight() -> HostTensor {
    HostTensor::from_vec((0..32).map(|i| i as f32 / 16.0 - 1.0).collect(), [8, 4]).unwrap()
}

#[test]
fn the_cpu_backend_keeps_at_most_its_limit_of_plans() {
    assert_eq!(CpuOptions::default().plan_cache, DEFAULT_PLAN_CACHE);
    let g = graph();
    let limit = 5;
    let bounded = CpuBackend::new(CpuOptions {
        plan_cache: limit,
        ..CpuOptions::default()
    })
    .compile(&g)
    .unwrap();
    bounded.set_weight("w", weight().view()).unwrap();
    let reference = |seq: usize| {
        let exe = CpuBackend::default().compile(&g).unwrap();
        exe.set_weight("w", weight().view()).unwrap();
        exe.run(&[("x", input(seq).view())], &[]).unwrap()
    };
    check(&bounded, limit, &reference);
}

#[cfg(feature = "mlx")]
#[test]
fn the_mlx_backend_keeps_at_most_its_limit_of_plans_in_every_mode() {
    use rlx::mlx::{MlxBackend, MlxMode};
    let g = graph();
    let limit = 4;
    for mode in [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled] {
        assert_eq!(MlxBackend::new(mode).plan_cache(), DEFAULT_PLAN_CACHE);
        let bounded = MlxBackend::new(mode)
            .with_plan_cache(limit)
            .compile(&g)
            .unwrap();
        bounded.set_weight("w", weight().view()).unwrap();
        let reference = |seq: usize| {
            let exe = MlxBackend::new(mode).compile(&g).unwrap();
            exe.set_weight("w", weight().view()).unwrap();
            exe.run(&[("x", input(seq).view())], &[]).unwrap()
        };
        check(&bounded, limit, &reference);
    }
}

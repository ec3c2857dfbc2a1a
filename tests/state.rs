//! State across runs (issue 32): graphs declare states that a context holds between runs.
//! Every read in a run sees the state from before it, writes land when it completes, the
//! CPU writes a cache in place, and a decode-shaped loop over a cache equals recomputing
//! the whole sequence each step. On the CPU (several configurations) and MLX (every mode).

use rlx::backend::{Backend, Context, ContextError, Executable, RunError};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{Attention, AttentionMask, DType, Dim, Graph, Op};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

/// Runs `body` with every backend configuration: label, executable of `graph`.
fn on_every_backend(graph: &Graph, body: &mut dyn FnMut(&str, &dyn Executable)) {
    let cpus = [
        ("cpu", CpuOptions::default()),
        (
            "cpu-1-thread-unoptimized",
            CpuOptions {
                threads: 1,
                optimize: false,
                poison: true,
                ..CpuOptions::default()
            },
        ),
    ];
    for (label, options) in cpus {
        let exe = CpuBackend::new(options).compile(graph).unwrap();
        body(label, &exe);
    }
    #[cfg(feature = "mlx")]
    {
        use rlx::mlx::{MlxBackend, MlxMode};
        for (label, mode) in [
            ("mlx-eager", MlxMode::Eager),
            ("mlx-lazy", MlxMode::Lazy),
            ("mlx-compiled", MlxMode::Compiled),
        ] {
            let exe = MlxBackend::new(mode).compile(graph).unwrap();
            body(label, &exe);
        }
    }
}

fn f32s(values: &[f32], dims: &[usize]) -> HostTensor {
    HostTensor::from_vec(values.to_vec(), dims.to_vec()).unwrap()
}

/// `total += x` with the old total returned: a running sum.
fn running_sum() -> Graph {
    let mut b = GraphBuilder::new();
    let total = b.state("total", DType::F32, [2]).unwrap();
    let x = b.input("x", DType::F32, [2]).unwrap();
    let sum = b.add(total, x).unwrap();
    b.write("total", sum).unwrap();
    b.output("before", total).unwrap();
    b.output("after", sum).unwrap();
    b.finish().unwrap()
}

#[test]
fn a_state_accumulates_across_runs_and_reads_see_the_value_before_the_run() {
    on_every_backend(&running_sum(), &mut |label, exe| {
        let mut ctx = exe.new_context().unwrap();
        let x = f32s(&[1.0, -2.0], &[2]);
        for step in 0..4 {
            let out = exe.run_in(&mut ctx, &[("x", x.view())], &[]).unwrap();
            let before = step as f32;
            assert_eq!(
                out[0].as_slice::<f32>().unwrap(),
                &[before, -2.0 * before],
                "{label}"
            );
            assert_eq!(
                out[1].as_slice::<f32>().unwrap(),
                &[before + 1.0, -2.0 * (before + 1.0)],
                "{label}"
            );
        }
        assert_eq!(
            ctx.get("total").unwrap().as_slice::<f32>().unwrap(),
            &[4.0, -8.0]
        );
        // Contexts are independent.
        let mut other = exe.new_context().unwrap();
        exe.run_in(&mut other, &[("x", x.view())], &[]).unwrap();
        assert_eq!(
            other.get("total").unwrap().as_slice::<f32>().unwrap(),
            &[1.0, -2.0]
        );
        assert_eq!(
            ctx.get("total").unwrap().as_slice::<f32>().unwrap(),
            &[4.0, -8.0]
        );
        // Set, reset.
        ctx.set("total", f32s(&[10.0, 20.0], &[2]).view()).unwrap();
        let out = exe.run_in(&mut ctx, &[("x", x.view())], &[]).unwrap();
        assert_eq!(out[1].as_slice::<f32>().unwrap(), &[11.0, 18.0], "{label}");
        ctx.reset().unwrap();
        assert_eq!(
            ctx.get("total").unwrap().as_slice::<f32>().unwrap(),
            &[0.0, 0.0]
        );
    });
}

#[test]
fn writes_land_together_when_the_run_ends() {
    // a, b = b, a + b: each write reads the other state as it was before the run.
    let mut b = GraphBuilder::new();
    let a = b.state("a", DType::I64, [1]).unwrap();
    let s = b.state("b", DType::I64, [1]).unwrap();
    let sum = b.add(a, s).unwrap();
    b.write("a", s).unwrap();
    b.write("b", sum).unwrap();
    b.output("a", a).unwrap();
    let g = b.finish().unwrap();
    on_every_backend(&g, &mut |label, exe| {
        let mut ctx = exe.new_context().unwrap();
        ctx.set("b", HostTensor::from_vec(vec![1i64], [1]).unwrap().view())
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..10 {
            let out = exe.run_in(&mut ctx, &[], &[]).unwrap();
            seen.push(out[0].as_slice::<i64>().unwrap()[0]);
        }
        assert_eq!(seen, [0, 1, 1, 2, 3, 5, 8, 13, 21, 34], "{label}");
    });
}

#[test]
fn states_save_and_load_by_name() {
    let dir = std::env::temp_dir().join(format!("rlx-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    on_every_backend(&running_sum(), &mut |label, exe| {
        let x = f32s(&[0.5, 1.5], &[2]);
        let mut ctx = exe.new_context().unwrap();
        exe.run_in(&mut ctx, &[("x", x.view())], &[]).unwrap();
        let path = dir.join(format!("{label}.safetensors"));
        ctx.save(&path).unwrap();
        // Continuing from the file equals continuing.
        let mut loaded = exe.new_context().unwrap();
        loaded.load(&path).unwrap();
        let a = exe.run_in(&mut ctx, &[("x", x.view())], &[]).unwrap();
        let b = exe.run_in(&mut loaded, &[("x", x.view())], &[]).unwrap();
        assert_eq!(a, b, "{label}");
        // A file that lacks a state is refused, and changes nothing.
        let empty = dir.join(format!("{label}-empty.safetensors"));
        rlx::weights::save_tensors(&empty, &[]).unwrap();
        let err = loaded.load(&empty).unwrap_err();
        assert!(
            matches!(err, ContextError::Missing { ref name } if name == "total"),
            "{err}"
        );
        assert_eq!(loaded.get("total").unwrap(), ctx.get("total").unwrap());
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn misuse_of_states_is_a_typed_error() {
    let g = running_sum();
    on_every_backend(&g, &mut |label, exe| {
        let x = f32s(&[1.0, 1.0], &[2]);
        let err = exe.run(&[("x", x.view())], &[]).unwrap_err();
        assert!(
            matches!(&err, RunError::NeedsContext { states } if states == &["total"]),
            "{label}: {err}"
        );
        let mut ctx = exe.new_context().unwrap();
        let err = ctx.get("count").unwrap_err();
        assert!(
            matches!(err, RunError::UnknownState { .. }),
            "{label}: {err}"
        );
        let err = ctx.set("total", f32s(&[1.0; 3], &[3]).view()).unwrap_err();
        assert!(matches!(err, RunError::Shape { .. }), "{label}: {err}");
        let wrong = HostTensor::from_vec(vec![1i32, 2], [2]).unwrap();
        let err = ctx.set("total", wrong.view()).unwrap_err();
        assert!(matches!(err, RunError::DType { .. }), "{label}: {err}");
    });
    // A context fits every executable whose graph declares the same states, and no other.
    let cpu = CpuBackend::default();
    let (one, two) = (cpu.compile(&g).unwrap(), cpu.compile(&g).unwrap());
    let mut ctx: Context = one.new_context().unwrap();
    let x = f32s(&[1.0, 1.0], &[2]);
    one.run_in(&mut ctx, &[("x", x.view())], &[]).unwrap();
    two.run_in(&mut ctx, &[("x", x.view())], &[]).unwrap();
    assert_eq!(
        ctx.get("total").unwrap().as_slice::<f32>().unwrap(),
        &[2.0, 2.0]
    );
    let mut b = GraphBuilder::new();
    let total = b.state("total", DType::F32, [3]).unwrap();
    b.output("total", total).unwrap();
    let other = cpu.compile(&b.finish().unwrap()).unwrap();
    let err = other.run_in(&mut ctx, &[], &[]).unwrap_err();
    assert!(matches!(err, RunError::ForeignContext), "{err}");
    #[cfg(feature = "mlx")]
    {
        let mlx = rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Lazy)
            .compile(&g)
            .unwrap();
        let err = mlx.run_in(&mut ctx, &[("x", x.view())], &[]).unwrap_err();
        assert!(matches!(err, RunError::ForeignContext), "{err}");
    }
    // A state's shape must be static, and a write must fit its state.
    let mut b = GraphBuilder::new();
    b.state("cache", DType::F32, [Dim::sym("n")]).unwrap();
    let y = b.input("y", DType::F32, [1]).unwrap();
    b.output("y", y).unwrap();
    let err = cpu.compile(&b.finish().unwrap()).unwrap_err();
    assert!(
        err.to_string().contains("states need static shapes"),
        "{err}"
    );
    let mut b = GraphBuilder::new();
    b.state("cache", DType::F32, [4]).unwrap();
    let y = b.input("y", DType::F32, [3]).unwrap();
    let err = b.write("cache", y).unwrap_err();
    assert!(
        err.to_string()
            .contains("state \"cache\" is f32[4] but is written a f32[3]"),
        "{err}"
    );
}

/// One decode step of attention over a cache of `cap` rows of `D` per head: the new
/// key/value row goes in at `pos` (in place), and the query attends the first `pos + 1`
/// rows of the cache, read where they are.
const D: usize = 4;
const HEADS: usize = 2;

fn decode_step(cap: usize) -> Graph {
    rlx_testkit::testing::decode_step(cap, HEADS, D)
}

/// The same attention computed from scratch over `n` rows of `k` and `v`.
fn recompute() -> Graph {
    let mut b = GraphBuilder::new();
    let n = Dim::sym("n");
    let q = b.input("q", DType::F32, [1, HEADS, 1, D]).unwrap();
    let shape = [Dim::from(1), Dim::from(HEADS), n, Dim::from(D)];
    let k = b.input("k", DType::F32, shape.clone()).unwrap();
    let v = b.input("v", DType::F32, shape).unwrap();
    let attend = Op::Attention(Attention {
        scale: 1.0 / (D as f64).sqrt(),
        mask: AttentionMask::None,
        key_length: false,
    });
    let y = b.op(attend, &[q, k, v]).unwrap();
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

/// Row `t` of a deterministic sequence of `[1, HEADS, 1, D]` values.
fn row(t: usize, salt: usize) -> HostTensor {
    let values: Vec<f32> = (0..HEADS * D)
        .map(|i| (((t * 31 + i * 7 + salt * 13) % 23) as f32 - 11.0) / 8.0)
        .collect();
    HostTensor::from_vec(values, [1, HEADS, 1, D]).unwrap()
}

/// Rows `0..n` stacked along the sequence axis: `[1, HEADS, n, D]`.
fn rows(n: usize, salt: usize) -> HostTensor {
    let mut values = vec![0f32; HEADS * n * D];
    for t in 0..n {
        let r = row(t, salt);
        for h in 0..HEADS {
            for d in 0..D {
                values[(h * n + t) * D + d] = r.as_slice::<f32>().unwrap()[h * D + d];
            }
        }
    }
    HostTensor::from_vec(values, [1, HEADS, n, D]).unwrap()
}

/// Steps of the loop, and the cache's capacity.
const STEPS: usize = 1000;

#[test]
fn a_decode_loop_over_a_cache_equals_recomputing_every_step() {
    let step = decode_step(STEPS);
    // The reference: the whole sequence so far, on one CPU thread, every step.
    let whole = CpuBackend::new(CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    })
    .compile(&recompute())
    .unwrap();
    let expected: Vec<HostTensor> = (0..STEPS)
        .map(|t| {
            let (ks, vs) = (rows(t + 1, 0), rows(t + 1, 1));
            let q = row(t, 2);
            let inputs = [("q", q.view()), ("k", ks.view()), ("v", vs.view())];
            whole.run(&inputs, &[]).unwrap().remove(0)
        })
        .collect();
    on_every_backend(&step, &mut |label, exe| {
        let mut ctx = exe.new_context().unwrap();
        for (t, want) in expected.iter().enumerate() {
            let pos = HostTensor::from_vec(vec![t as i32], []).unwrap();
            let (q, k, v) = (row(t, 2), row(t, 0), row(t, 1));
            let inputs = [
                ("q", q.view()),
                ("k_row", k.view()),
                ("v_row", v.view()),
                ("pos", pos.view()),
            ];
            let got = exe.run_in(&mut ctx, &inputs, &[]).unwrap().remove(0);
            if label.starts_with("cpu") {
                // The same blocked kernel over the same keys: to the bit.
                assert_eq!(&got, want, "{label} step {t}");
            } else {
                for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
                    assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{label} step {t}");
                }
            }
        }
        // Every row is in the cache, and one plan served every step.
        assert_eq!(ctx.get("k").unwrap(), rows(STEPS, 0), "{label}");
        assert_eq!(ctx.get("v").unwrap(), rows(STEPS, 1), "{label}");
        assert_eq!(exe.cached_plans(), 1, "{label}");
        // Writing past the capacity fails, naming the offset.
        let pos = HostTensor::from_vec(vec![STEPS as i32], []).unwrap();
        let q = row(0, 0);
        let inputs = [
            ("q", q.view()),
            ("k_row", q.view()),
            ("v_row", q.view()),
            ("pos", pos.view()),
        ];
        let err = exe.run_in(&mut ctx, &inputs, &[]).unwrap_err();
        assert!(
            matches!(err, RunError::WindowOutOfRange { offset, size: STEPS, .. } if offset == STEPS as i64),
            "{label}: {err}"
        );
    });
}

#[test]
fn attention_over_a_run_time_length_refuses_one_past_its_keys() {
    let mut b = GraphBuilder::new();
    let q = b.input("q", DType::F32, [1, 4]).unwrap();
    let k = b.input("k", DType::F32, [6, 4]).unwrap();
    let n = b.input("n", DType::I64, [0usize; 0]).unwrap();
    let attend = Op::Attention(Attention {
        scale: 0.5,
        mask: AttentionMask::Causal,
        key_length: true,
    });
    let y = b.op(attend, &[q, k, k, n]).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    on_every_backend(&g, &mut |label, exe| {
        let (q, k) = (f32s(&[0.5; 4], &[1, 4]), f32s(&[1.0; 24], &[6, 4]));
        for fine in [0i64, 6] {
            let n = HostTensor::from_vec(vec![fine], []).unwrap();
            let inputs = [("q", q.view()), ("k", k.view()), ("n", n.view())];
            exe.run(&inputs, &[])
                .unwrap_or_else(|e| panic!("{label}: n = {fine}: {e}"));
        }
        for bad in [7i64, -1] {
            let n = HostTensor::from_vec(vec![bad], []).unwrap();
            let inputs = [("q", q.view()), ("k", k.view()), ("n", n.view())];
            let err = exe.run(&inputs, &[]).unwrap_err();
            assert!(
                matches!(err, RunError::WindowOutOfRange { size: 6, .. }),
                "{label}: n = {bad}: {err}"
            );
        }
    });
}

#[test]
fn the_cpu_writes_a_cache_in_place() {
    // The arena holds no copy of the caches: its plan is smaller than one of them.
    let cap = 4096;
    let exe = CpuBackend::default().compile(&decode_step(cap)).unwrap();
    let cache_bytes = HEADS * cap * D * 4;
    let report = exe.plan_report(&[]).unwrap();
    assert!(
        report.peak_bytes < cache_bytes,
        "{} arena bytes for caches of {cache_bytes}",
        report.peak_bytes
    );
}

/// `avg = 0.75·avg + 0.25·x` over a large state, `x` a scalar: an elementwise chain that
/// reads the state it writes (an optimizer's moment has this form).
fn moving_average(len: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let avg = b.state("avg", DType::F32, [len]).unwrap();
    let x = b.input("x", DType::F32, Shape::scalar()).unwrap();
    let keep = b.scalar(0.75, DType::F32);
    let take = b.scalar(0.25, DType::F32);
    let old = b.mul(avg, keep).unwrap();
    let new = b.mul(x, take).unwrap();
    let next = b.add(old, new).unwrap();
    b.write("avg", next).unwrap();
    b.output("avg", next).unwrap();
    b.finish().unwrap()
}

#[test]
fn a_state_updated_elementwise_is_computed_in_its_own_memory() {
    let len = 1 << 16;
    let graph = moving_average(len);
    // On the CPU the chain writes the state's slot: the arena holds no copy of it.
    let exe = CpuBackend::default().compile(&graph).unwrap();
    let report = exe.plan_report(&[]).unwrap();
    assert!(
        report.peak_bytes < len * 4,
        "{} arena bytes for a state of {}",
        report.peak_bytes,
        len * 4
    );
    on_every_backend(&graph, &mut |label, exe| {
        let mut ctx = exe.new_context().unwrap();
        let mut expected: Vec<f32> = (0..len).map(|i| (i % 13) as f32).collect();
        ctx.set("avg", f32s(&expected, &[len]).view()).unwrap();
        for step in 0..4 {
            let x = step as f32 * 2.0 - 3.0;
            let out = exe
                .run_in(&mut ctx, &[("x", HostTensor::scalar(x).view())], &[])
                .unwrap();
            for e in expected.iter_mut() {
                *e = *e * 0.75 + x * 0.25;
            }
            assert_eq!(
                out[0].as_slice::<f32>().unwrap(),
                expected,
                "{label} step {step}"
            );
            assert_eq!(
                ctx.get("avg").unwrap().as_slice::<f32>().unwrap(),
                expected,
                "{label} step {step}"
            );
        }
    });
}

/// MLX updates the cache in place: over many steps its active memory stays flat, and no
/// step holds a second copy of a cache (the peak stays within a fraction of one).
#[cfg(feature = "mlx")]
#[test]
fn mlx_updates_a_cache_in_place_with_flat_memory() {
    use rlx::mlx::{MlxBackend, MlxMode, active_memory, peak_memory, reset_peak_memory};
    let (cap, heads, dim) = (1024, 8, 128);
    let one_cache = heads * cap * dim * 4;
    let graph = rlx_testkit::testing::decode_step(cap, heads, dim);
    for mode in [MlxMode::Lazy, MlxMode::Compiled] {
        let exe = MlxBackend::new(mode).compile(&graph).unwrap();
        let mut ctx = exe.new_context().unwrap();
        let row = HostTensor::from_vec(vec![0.5f32; heads * dim], [1, heads, 1, dim]).unwrap();
        let mut outputs = Vec::new();
        let mut step = |t: usize, ctx: &mut Context| {
            let pos = HostTensor::from_vec(vec![t as i32], []).unwrap();
            let inputs = [
                ("q", row.view()),
                ("k_row", row.view()),
                ("v_row", row.view()),
                ("pos", pos.view()),
            ];
            exe.run_in_into(ctx, &inputs, &[], &mut outputs).unwrap();
        };
        for t in 0..8 {
            step(t, &mut ctx);
        }
        let before = active_memory().unwrap();
        reset_peak_memory().unwrap();
        for t in 8..cap {
            step(t, &mut ctx);
        }
        let (after, peak) = (active_memory().unwrap(), peak_memory().unwrap());
        let slack = one_cache / 4;
        assert!(
            after <= before + slack,
            "{mode:?}: active memory grew from {before} to {after} bytes over {cap} steps"
        );
        assert!(
            peak < before + slack,
            "{mode:?}: a step held {} bytes more than the caches (one cache is {one_cache})",
            peak - before
        );
        assert_eq!(exe.cached_plans(), 1);
    }
}

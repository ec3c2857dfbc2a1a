//! Hostile run-time inputs: thousands of fixed-seed runs of a small compiled model with
//! random names, dtypes, ranks and dims (zero-size axes, runtime dims whose products
//! overflow), NaN and infinities, on the CPU executor and, with the `mlx` feature, MLX. The
//! only acceptable outcomes are a correct result or a typed error: no panic. Rank mistakes
//! must come back as `RunError::Rank`.

use crate::Rng;
use rlx::ir::Broadcast;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rlx::backend::{Backend, Executable, RunError};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{DType, Dim, Graph, Op, ReduceOp, Shape, UnaryOp};
use rlx::prelude::GraphBuilder;
use rlx::tensor::HostTensor;

const CASES: usize = 1500;
const SEED: u64 = 0x4b07_11e5_2026_1122;

/// `y = softmax(x·w) * scale` with `x: f32[n, 4]`, `scale: f32[n, 1]`, and `z = sum(ones
/// broadcast to [n, m])`, where `m` is a runtime dim only `dims` can give.
fn graph() -> Graph {
    let mut b = GraphBuilder::new();
    let n = Dim::sym("n");
    let x = b.input("x", DType::F32, [n.clone(), Dim::from(4)]).unwrap();
    let scale = b
        .input("scale", DType::F32, [n.clone(), Dim::from(1)])
        .unwrap();
    let w = b.param("w", DType::F32, [4, 3]).unwrap();
    let h = b.matmul(x, w).unwrap();
    let p = b.softmax(h, 1).unwrap();
    let y = b.mul(p, scale).unwrap();
    b.output("y", y).unwrap();
    let e = b.unary(UnaryOp::Exp, scale).unwrap();
    let wide = b
        .op(
            Op::Broadcast(Broadcast {
                shape: Shape::new([n, Dim::sym("m")]),
            }),
            &[e],
        )
        .unwrap();
    let z = b.reduce(ReduceOp::Sum, wide, &[0, 1], false).unwrap();
    b.output("z", z).unwrap();
    b.finish().unwrap()
}

/// A tensor of `dtype` and `dims`, with specials (NaN, ±inf, -0) sprinkled into floats.
fn tensor(dtype: DType, dims: &[usize], rng: &mut Rng) -> Option<HostTensor> {
    let n = dims.iter().try_fold(1usize, |a, d| a.checked_mul(*d))?;
    if n > 1 << 16 {
        return None;
    }
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        1e38,
        -1e-45,
    ];
    let values: Vec<f32> = (0..n)
        .map(|_| match rng.below(6) {
            0 => specials[rng.below(specials.len())],
            _ => (rng.below(2000) as f32 - 1000.0) / 250.0,
        })
        .collect();
    let dims = dims.to_vec();
    match dtype {
        DType::F64 => HostTensor::from_vec(values.iter().map(|v| *v as f64).collect(), dims),
        DType::I64 => HostTensor::from_vec(values.iter().map(|v| *v as i64).collect(), dims),
        DType::Bool => HostTensor::from_vec(values.iter().map(|v| *v > 0.0).collect(), dims),
        _ => HostTensor::from_vec(values, dims),
    }
    .ok()
}

#[derive(Default, Debug)]
struct Outcomes {
    ok: usize,
    errors: BTreeMap<&'static str, usize>,
    panics: Vec<String>,
}

fn kind(e: &RunError) -> &'static str {
    match e {
        RunError::MissingInput { .. } => "missing input",
        RunError::UnknownInput { .. } => "unknown input",
        RunError::DType { .. } => "dtype",
        RunError::Rank { .. } => "rank",
        RunError::Shape { .. } => "shape",
        RunError::UnboundSymbol { .. } => "unbound dim",
        RunError::UnknownSymbol { .. } => "unknown dim",
        RunError::InconsistentSymbol { .. } => "inconsistent dim",
        RunError::Binding { .. } => "binding",
        RunError::OutOfMemory { .. } => "out of memory",
        _ => "other",
    }
}

fn hammer(label: &str, exe: &dyn Executable, m_values: &[usize]) -> Outcomes {
    let dtypes = [DType::F32, DType::F64, DType::I64, DType::Bool];
    let mut rng = Rng(SEED);
    let mut out = Outcomes::default();
    for case in 0..CASES {
        // Mostly plausible shapes, so runs also get past the checks.
        let n = [0, 1, 2, 3, 7][rng.below(5)];
        let dims_of = |good: Vec<usize>, rng: &mut Rng| -> Vec<usize> {
            match rng.below(8) {
                0 => (0..rng.below(5)).map(|_| rng.below(6)).collect(),
                1 => {
                    let mut d = good.clone();
                    d.push(1);
                    d
                }
                2 => good[..good.len() - 1].to_vec(),
                3 => good.iter().map(|d| d + rng.below(2)).collect(),
                _ => good,
            }
        };
        let x_dims = dims_of(vec![n, 4], &mut rng);
        let s_dims = dims_of(vec![n, 1], &mut rng);
        let x_type = if rng.below(6) == 0 {
            dtypes[rng.below(dtypes.len())]
        } else {
            DType::F32
        };
        let (Some(x), Some(s)) = (
            tensor(x_type, &x_dims, &mut rng),
            tensor(DType::F32, &s_dims, &mut rng),
        ) else {
            continue;
        };
        let mut inputs = vec![("x", x.view()), ("scale", s.view())];
        match rng.below(12) {
            0 => {
                inputs.pop();
            }
            1 => inputs.push(("extra", s.view())),
            2 => inputs.swap(0, 1),
            _ => {}
        }
        let mut dims: Vec<(&str, usize)> = match rng.below(6) {
            0 => vec![],
            1 => vec![("m", m_values[rng.below(m_values.len())])],
            _ => vec![("m", rng.below(6))],
        };
        if rng.below(10) == 0 {
            dims.push(("q", 3));
        }
        if rng.below(10) == 0 {
            dims.push(("n", rng.below(4)));
        }
        let expected_rank_error = x_dims.len() != 2 || s_dims.len() != 2;
        let names_ok = inputs.len() == 2 && inputs.iter().any(|(n, _)| *n == "x");
        let result = catch_unwind(AssertUnwindSafe(|| exe.run(&inputs, &dims)));
        match result {
            Ok(Ok(outputs)) => {
                out.ok += 1;
                assert_eq!(outputs[0].shape(), [x_dims[0], 3], "{label} case {case}");
                assert_eq!(outputs[1].dtype(), DType::F32, "{label} case {case}");
            }
            Ok(Err(e)) => {
                if expected_rank_error && names_ok && x_type == DType::F32 {
                    assert!(
                        matches!(e, RunError::Rank { .. }),
                        "{label} case {case}: {e}"
                    );
                }
                *out.errors.entry(kind(&e)).or_default() += 1;
            }
            Err(_) => out.panics.push(format!(
                "{label} case {case}: x {x_type} {x_dims:?}, scale {s_dims:?}, dims {dims:?}"
            )),
        }
    }
    out
}

/// Runtime values of `m`: products with `n` that overflow `usize`, and small ones.
const M_VALUES: [usize; 6] = [0, 1, 5, usize::MAX, usize::MAX / 2, 1 << 62];

fn check(label: &str, backend: &impl Backend, m_values: &[usize]) {
    let exe = backend.compile(&graph()).unwrap();
    let w = HostTensor::from_vec((0..12).map(|i| i as f32 / 10.0).collect(), [4, 3]).unwrap();
    exe.set_weight("w", w.view()).unwrap();
    let out = hammer(label, &exe, m_values);
    println!(
        "hostile inputs, {label}: {CASES} cases (seed {SEED:#x}): {} ran, errors {:?}, {} panics",
        out.ok,
        out.errors,
        out.panics.len()
    );
    assert!(out.panics.is_empty(), "{:#?}", out.panics);
    assert!(out.ok > CASES / 10 && out.errors.len() > 5, "{out:?}");
    // The executable still works after all that.
    let x = HostTensor::from_vec(vec![0.5f32; 8], [2, 4]).unwrap();
    let s = HostTensor::from_vec(vec![1.0f32; 2], [2, 1]).unwrap();
    let y = exe
        .run(&[("x", x.view()), ("scale", s.view())], &[("m", 3)])
        .unwrap();
    let z = y[1].as_slice::<f32>().unwrap()[0];
    assert!((z - 6.0 * std::f32::consts::E).abs() < 1e-4, "{z}");
}

#[test]
fn hostile_run_inputs_on_the_cpu() {
    // With a memory limit, dims that fit in `usize` but need 16 GiB and more are refused
    // when planned (`RunError::OutOfMemory`), deterministically on any machine.
    let backend = CpuBackend::new(CpuOptions {
        memory_limit: Some(1 << 30),
        ..CpuOptions::default()
    });
    let mut m_values = M_VALUES.to_vec();
    m_values.extend([(1 << 32) + 1, 1 << 40]);
    check("cpu", &backend, &m_values);
    // The limit is reported with the bytes asked for.
    let exe = backend.compile(&graph()).unwrap();
    let w = HostTensor::zeros(DType::F32, [4, 3]);
    exe.set_weight("w", w.view()).unwrap();
    let x = HostTensor::zeros(DType::F32, [2, 4]);
    let s = HostTensor::zeros(DType::F32, [2, 1]);
    let err = exe
        .run(&[("x", x.view()), ("scale", s.view())], &[("m", 1 << 28)])
        .unwrap_err();
    assert!(
        matches!(err, RunError::OutOfMemory { bytes, limit: Some(limit) } if bytes > limit),
        "{err}"
    );
    assert!(
        err.to_string().contains("over the limit of 1073741824"),
        "{err}"
    );
}

#[cfg(feature = "mlx")]
#[test]
fn hostile_run_inputs_on_mlx() {
    use rlx::mlx::{Device, MlxBackend, MlxMode};
    // The CPU device also where a GPU is present: f64 inputs are among the cases.
    // MLX has no memory limit of RLX's: only the overflowing dims, which it refuses.
    check(
        "mlx",
        &MlxBackend::new(MlxMode::Lazy).with_device(Device::Cpu),
        &M_VALUES,
    );
}

//! Runs a graph on every backend configuration and compares with expected tensors.

use approx::relative_eq;
use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{DType, Graph};
use rlx::tensor::HostTensor;

/// Absolute and relative tolerance for results of `dtype`, scaled by `scale` for ops that
/// accumulate many terms.
pub fn tolerance(dtype: DType, scale: f64) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-12 * scale, 1e-12),
        DType::F32 => (2e-6 * scale, 2e-6),
        DType::F16 => (2e-3 * scale, 2e-3),
        DType::BF16 => (1.6e-2 * scale, 1.6e-2),
        _ => (0.0, 0.0),
    }
}

/// Asserts `got` equals `expected` within the dtype's tolerance.
#[track_caller]
pub fn assert_close(what: &str, got: &HostTensor, expected: &HostTensor, scale: f64) {
    assert_eq!(got.dtype(), expected.dtype(), "{what}: dtype");
    assert_eq!(got.shape(), expected.shape(), "{what}: shape");
    let (atol, rtol) = if what.starts_with("mlx") && got.dtype() == DType::F64 {
        // MLX's CPU kernels evaluate transcendental functions, normalizations, attention,
        // convolutions and rope in f32 precision even for f64 data (and Metal has no f64).
        tolerance(DType::F32, scale)
    } else {
        tolerance(got.dtype(), scale)
    };
    for (i, (g, e)) in got
        .to_f64_vec()
        .iter()
        .zip(expected.to_f64_vec())
        .enumerate()
    {
        let ok = (g.is_nan() && e.is_nan())
            || (g - e).abs() <= atol
            || relative_eq!(*g, e, epsilon = atol, max_relative = rtol);
        assert!(
            ok,
            "{what}: element {i}: got {g}, expected {e} ({:?})",
            got.dtype()
        );
    }
}

/// The CPU configurations every case runs under: optimized; unoptimized with NaN-poisoned
/// memory; and without buffer reuse.
pub fn cpu_backends() -> Vec<(&'static str, CpuBackend)> {
    vec![
        ("cpu", CpuBackend::default()),
        (
            "cpu-poison",
            CpuBackend::new(CpuOptions {
                optimize: false,
                poison: true,
                ..CpuOptions::default()
            }),
        ),
        (
            "cpu-no-reuse",
            CpuBackend::new(CpuOptions {
                reuse_memory: false,
                threads: 1,
                ..CpuOptions::default()
            }),
        ),
    ]
}

/// Runs `graph` on `backend` with `inputs` (and explicit `dims`), twice to exercise the
/// cached plan, and compares every output.
#[track_caller]
pub fn check_on<B: Backend>(
    label: &str,
    backend: &B,
    graph: &Graph,
    inputs: &[(&str, &HostTensor)],
    dims: &[(&str, usize)],
    expected: &[HostTensor],
    scale: f64,
) {
    let exe = match backend.compile(graph) {
        Ok(exe) => exe,
        // MLX has no float64 on GPUs; the typed error is the documented outcome there, and
        // the `mlx-cpu` configuration checks the numbers.
        Err(rlx::backend::CompileError::DeviceDType { dtype, .. })
            if label.starts_with("mlx-gpu") && dtype == DType::F64 =>
        {
            return;
        }
        Err(e) => panic!("{label}: compile failed: {e}\n{graph}"),
    };
    let views: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
        inputs.iter().map(|(n, t)| (*n, t.view())).collect();
    for round in 0..2 {
        let out = exe
            .run(&views, dims)
            .unwrap_or_else(|e| panic!("{label}: run failed: {e}\n{graph}"));
        assert_eq!(out.len(), expected.len());
        for (i, (g, e)) in out.iter().zip(expected).enumerate() {
            assert_close(
                &format!("{label} round {round} output {i}\n{graph}"),
                g,
                e,
                scale,
            );
        }
    }
}

/// Runs `$body` once per backend configuration, with `$backend` bound to it and `$label`
/// to its name.
#[macro_export]
macro_rules! on_every_backend {
    ($label:ident, $backend:ident => $body:block) => {
        for ($label, $backend) in $crate::harness::cpu_backends() $body
        #[cfg(feature = "mlx")]
        for ($label, $backend) in $crate::harness::mlx_backends() $body
    };
}

/// The MLX configurations: each evaluation mode on the default device and, when that is a
/// GPU, lazy mode on the CPU device too (which runs the float64 cases a GPU rejects).
#[cfg(feature = "mlx")]
pub fn mlx_backends() -> Vec<(&'static str, rlx::mlx::MlxBackend)> {
    use rlx::mlx::{Device, MlxBackend, MlxMode};
    // Kernel fusion compiles each fused kernel at run time (g++ on Linux CPU, NVRTC on
    // CUDA: hundreds of kernels here, minutes on a cold cache); tests/mlx.rs covers it on a
    // model. Tracing is tested either way.
    rlx::mlx::set_kernel_fusion(false).expect("setting the compile mode");
    if Device::preferred() == Device::Gpu {
        return vec![
            ("mlx-gpu-eager", MlxBackend::new(MlxMode::Eager)),
            ("mlx-gpu-lazy", MlxBackend::new(MlxMode::Lazy)),
            ("mlx-gpu-compiled", MlxBackend::new(MlxMode::Compiled)),
            (
                "mlx-cpu-lazy",
                MlxBackend::new(MlxMode::Lazy).with_device(Device::Cpu),
            ),
        ];
    }
    vec![
        ("mlx-eager", MlxBackend::new(MlxMode::Eager)),
        ("mlx-lazy", MlxBackend::new(MlxMode::Lazy)),
        ("mlx-compiled", MlxBackend::new(MlxMode::Compiled)),
    ]
}

/// [`check_on`] over every CPU configuration and, with the `mlx` feature, every MLX mode.
#[track_caller]
pub fn check(
    graph: &Graph,
    inputs: &[(&str, &HostTensor)],
    dims: &[(&str, usize)],
    expected: &[HostTensor],
    scale: f64,
) {
    check_reference(graph, inputs, dims, expected, scale);
    // With its composites decomposed: the lowering a composite without a backend kernel
    // gets.
    let decomposed = rlx::passes::decompose(graph, &|_| false).unwrap();
    let graphs = if decomposed.len() == graph.len() {
        vec![graph]
    } else {
        vec![graph, &decomposed]
    };
    for graph in graphs {
        for (label, backend) in cpu_backends() {
            check_on(label, &backend, graph, inputs, dims, expected, scale);
        }
        #[cfg(feature = "mlx")]
        for (label, backend) in mlx_backends() {
            check_on(label, &backend, graph, inputs, dims, expected, scale);
        }
    }
}

/// The ops' own float64 reference ([`rlx::ir::evaluate_reference`]) agrees with the
/// expected values the test computed its own way (custom ops have none: skipped).
#[track_caller]
pub fn check_reference(
    graph: &Graph,
    inputs: &[(&str, &HostTensor)],
    dims: &[(&str, usize)],
    expected: &[HostTensor],
    scale: f64,
) {
    let values = match rlx::ir::evaluate_reference(graph, inputs, &[], dims) {
        Err(rlx::ir::ReferenceError::NoReference { .. }) => return,
        result => result.unwrap_or_else(|e| panic!("reference failed: {e}\n{graph}")),
    };
    assert_eq!(values.len(), expected.len());
    for (i, (got, want)) in values.iter().zip(expected).enumerate() {
        let rounded = crate::reference::to_tensor(&crate::reference::Nd::of(got), want.dtype());
        assert_close(
            &format!("reference output {i}\n{graph}"),
            &rounded,
            want,
            scale,
        );
    }
}

use rlx::builder::GraphBuilder;
use rlx::ir::{Dim, NodeId, Shape};

/// Declares `concrete` with the axes in `symbols` replaced by named runtime dims.
pub fn declared(concrete: &[usize], symbols: &[(usize, &str)]) -> Shape {
    Shape::new(concrete.iter().enumerate().map(|(i, d)| {
        symbols
            .iter()
            .find(|(a, _)| *a == i)
            .map_or(Dim::Static(*d), |(_, s)| Dim::sym(s))
    }))
}

/// A graph with these inputs and one output `y = f(builder, inputs)`.
pub fn graph_of(
    inputs: &[(&str, DType, Shape)],
    f: impl FnOnce(&mut GraphBuilder, &[NodeId]) -> NodeId,
) -> Graph {
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = inputs
        .iter()
        .map(|(n, d, s)| b.input(n, *d, s.clone()).unwrap())
        .collect();
    let y = f(&mut b, &ids);
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

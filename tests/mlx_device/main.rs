//! The MLX backend's devices, precisions and device-resident runs: which device compiles
//! what (float64 is refused on a GPU, by node), what each precision computes and how close
//! it stays to float32, and `run_values` against `run`. Runs on any machine; the GPU cases
//! run where MLX has a GPU and say so where it has none.
#![cfg(feature = "mlx")]

use rlx::backend::{Backend, CompileError, Executable, RunError, Value};
use rlx::builder::GraphBuilder;
use rlx::ir::{Attention, Gather, Slice};
use rlx::ir::{DType, Dim, Graph, UnaryOp};
use rlx::mlx::{Array, Device, MlxBackend, MlxMode, Precision};
use rlx::tensor::HostTensor;

mod gated;
mod rotated;
mod weights;

use weights::{WEIGHT_LAYOUTS, Weights, product, weight};

const MODES: [MlxMode; 3] = [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled];

/// `y = gelu(x·w1 + b1)·w2`, in `dtype`, with a runtime batch dim.
fn mlp(dtype: DType) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", dtype, [Dim::sym("batch"), Dim::from(16)])
        .unwrap();
    let w1 = b.param("w1", dtype, [16, 32]).unwrap();
    let b1 = b.param("b1", dtype, [32]).unwrap();
    let w2 = b.param("w2", dtype, [32, 8]).unwrap();
    let h = b.matmul(x, w1).unwrap();
    let h = b.add(h, b1).unwrap();
    let h = b.unary(UnaryOp::Gelu, h).unwrap();
    let y = b.matmul(h, w2).unwrap();
    let y = b.softmax(y, 1).unwrap();
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 7919 + seed * 104_729) % 997) as f32 / 997.0 - 0.5) * 0.8)
        .collect()
}

fn bind(exe: &impl Executable) {
    exe.set_weight(
        "w1",
        HostTensor::from_vec(values(16 * 32, 1), [16, 32])
            .unwrap()
            .view(),
    )
    .unwrap();
    exe.set_weight(
        "b1",
        HostTensor::from_vec(values(32, 2), [32]).unwrap().view(),
    )
    .unwrap();
    exe.set_weight(
        "w2",
        HostTensor::from_vec(values(32 * 8, 3), [32, 8])
            .unwrap()
            .view(),
    )
    .unwrap();
}

fn input(batch: usize) -> HostTensor {
    HostTensor::from_vec(values(batch * 16, 4), [batch, 16]).unwrap()
}

fn max_abs_diff(a: &HostTensor, b: &HostTensor) -> f64 {
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// The largest difference of `got` from `want` (float32), and the largest magnitude in
/// `want` (at least 1): a bound relative to the values' scale.
fn diff_and_scale(got: &HostTensor, want: &HostTensor) -> (f64, f32) {
    let scale = want
        .as_slice::<f32>()
        .unwrap()
        .iter()
        .fold(1f32, |m, v| m.max(v.abs()));
    (max_abs_diff(got, want), scale)
}

#[test]
fn the_backend_reports_its_devices_and_defaults_to_the_gpu_when_there_is_one() {
    assert!(Device::Cpu.is_available());
    assert!(Device::Cpu.count() >= 1);
    let preferred = Device::preferred();
    assert_eq!(preferred == Device::Gpu, Device::Gpu.is_available());
    let backend = MlxBackend::new(MlxMode::Lazy);
    assert_eq!(backend.device(), preferred);
    assert_eq!(backend.precision(), Precision::F32);
    assert_eq!(rlx::mlx::device_name().unwrap(), preferred.name());
    // RLX's default is full float32 on NVIDIA GPUs (unless the process opted into TF32).
    assert_eq!(
        rlx::mlx::tf32_enabled(),
        std::env::var("MLX_ENABLE_TF32").is_ok_and(|v| v.parse::<i32>().is_ok_and(|n| n != 0))
    );
    println!(
        "MLX devices: {} cpu, {} gpu; preferred {preferred}",
        Device::Cpu.count(),
        Device::Gpu.count()
    );
}

#[test]
fn the_cpu_device_computes_what_the_default_device_computes() {
    let graph = mlp(DType::F32);
    let reference = MlxBackend::new(MlxMode::Lazy).compile(&graph).unwrap();
    bind(&reference);
    let want = reference.run(&[("x", input(5).view())], &[]).unwrap();
    for mode in MODES {
        let backend = MlxBackend::new(mode).with_device(Device::Cpu);
        let exe = backend.compile(&graph).unwrap();
        bind(&exe);
        let got = exe.run(&[("x", input(5).view())], &[]).unwrap();
        // On a GPU the two devices round differently (cuBLAS vs BLAS); on the CPU they are
        // the same kernels.
        let d = max_abs_diff(&got[0], &want[0]);
        assert!(d < 1e-6, "{mode:?}: {d}");
    }
}

#[test]
fn a_missing_gpu_or_float64_on_a_gpu_is_a_typed_compile_error() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [3]).unwrap();
    let wide = b.cast(x, DType::F64).unwrap();
    let y = b.unary(UnaryOp::Exp, wide).unwrap();
    b.output("y", y).unwrap();
    let graph = b.finish().unwrap();
    let gpu = MlxBackend::new(MlxMode::Lazy).with_device(Device::Gpu);
    match gpu.compile(&graph) {
        Err(CompileError::DeviceUnavailable { device, .. }) => {
            assert!(!Device::Gpu.is_available());
            assert_eq!(device, "gpu");
            println!("no GPU here: the GPU half of this test ran as the unavailable-device check");
        }
        Err(CompileError::DeviceDType {
            node,
            dtype,
            device,
            ..
        }) => {
            assert!(Device::Gpu.is_available());
            assert_eq!((dtype, device), (DType::F64, "gpu"));
            // The first float64 node: the cast, with the line that built it.
            assert_eq!(node.op, "cast");
            assert!(node.origin.is_some_and(|o| o.file() == file!()));
            let text = CompileError::DeviceDType {
                node,
                dtype,
                device,
                backend: "mlx",
            }
            .to_string();
            assert!(text.contains("float64") || text.contains("f64"), "{text}");
        }
        other => panic!("expected a device error, got {other:?}"),
    }
    // The CPU device runs it.
    let cpu = MlxBackend::new(MlxMode::Lazy)
        .with_device(Device::Cpu)
        .compile(&graph)
        .unwrap();
    let x = HostTensor::from_vec(vec![0.0f32, 1.0, -1.0], [3]).unwrap();
    let y = cpu.run(&[("x", x.view())], &[]).unwrap();
    let y = y[0].as_slice::<f64>().unwrap();
    assert!((y[1] - std::f64::consts::E).abs() < 1e-6, "{y:?}");
}

#[test]
fn tf32_is_refused_where_the_process_computes_full_float32_on_a_gpu() {
    let graph = mlp(DType::F32);
    let tf32 = MlxBackend::new(MlxMode::Lazy).with_precision(Precision::Tf32);
    // On the CPU device TF32 does not exist: it is plain float32.
    let cpu = tf32
        .clone()
        .with_device(Device::Cpu)
        .compile(&graph)
        .unwrap();
    bind(&cpu);
    cpu.run(&[("x", input(2).view())], &[]).unwrap();
    if !Device::Gpu.is_available() {
        println!("no GPU here: skipped the GPU precision check");
        return;
    }
    let exact = MlxBackend::new(MlxMode::Lazy).with_precision(Precision::F32);
    let (refused, accepted) = if rlx::mlx::tf32_enabled() {
        (exact, tf32)
    } else {
        (tf32, exact)
    };
    match refused.compile(&graph) {
        Err(CompileError::Precision { reason, .. }) => {
            assert!(reason.contains("MLX_ENABLE_TF32"), "{reason}")
        }
        other => panic!("expected a precision error, got {other:?}"),
    }
    accepted.compile(&graph).unwrap();
}

#[test]
fn half_precisions_compute_a_float32_model_within_their_tolerance() {
    let graph = mlp(DType::F32);
    let exact = MlxBackend::new(MlxMode::Lazy).compile(&graph).unwrap();
    bind(&exact);
    let want = exact.run(&[("x", input(6).view())], &[]).unwrap();
    // Probabilities of 8 classes: absolute error bounds by the format's precision.
    for (precision, dtype, bound) in [
        (Precision::F16, DType::F16, 2e-3),
        (Precision::BF16, DType::BF16, 1.5e-2),
    ] {
        for mode in MODES {
            let backend = MlxBackend::new(mode).with_precision(precision);
            let exe = backend.compile(&graph).unwrap();
            assert_eq!(
                exe.graph().nodes()[exe.graph().param("w1").unwrap().index()]
                    .ty
                    .dtype,
                dtype
            );
            bind(&exe);
            // Weights are offered and read back as float32 (rounded once, when bound).
            let w1 = exe.weight("w1").unwrap();
            assert_eq!(w1.dtype(), DType::F32);
            let rounding = max_abs_diff(
                &w1,
                &HostTensor::from_vec(values(16 * 32, 1), [16, 32]).unwrap(),
            );
            assert!(
                rounding > 0.0 && rounding < bound,
                "{precision:?}: weight rounding {rounding}"
            );
            // A float16 weight offered where the model declares float32 is still refused.
            let wrong = HostTensor::zeros(DType::F16, [16, 32]);
            assert!(matches!(
                exe.set_weight("w1", wrong.view()),
                Err(RunError::DType {
                    expected: DType::F32,
                    ..
                })
            ));
            let got = exe.run(&[("x", input(6).view())], &[]).unwrap();
            assert_eq!(got[0].dtype(), DType::F32);
            let d = max_abs_diff(&got[0], &want[0]);
            assert!(d > 0.0 && d < bound, "{precision:?} {mode:?}: {d}");
        }
    }
}

#[test]
fn device_arrays_in_and_out_match_host_runs_and_are_checked_the_same_way() {
    let graph = mlp(DType::F32);
    for mode in MODES {
        let exe = MlxBackend::new(mode).compile(&graph).unwrap();
        bind(&exe);
        for batch in [1, 4] {
            let host = exe.run(&[("x", input(batch).view())], &[]).unwrap();
            let x = Value::from(Array::from_tensor(input(batch).view()).unwrap());
            let out = exe.run_values(&[("x", &x)], &[]).unwrap();
            assert_eq!(out.len(), 1);
            assert!(
                out[0].mlx_array().is_some(),
                "the output stays an MLX array"
            );
            assert_eq!(out[0].to_host().unwrap(), host[0], "{mode:?} batch {batch}");
            // A host value gives the same.
            let from_host = exe
                .run_values(&[("x", &Value::from(input(batch)))], &[])
                .unwrap();
            assert_eq!(
                from_host[0].to_host().unwrap(),
                host[0],
                "{mode:?} batch {batch}"
            );
        }
        // Chained on the device: the softmax output (batch, 8) is not an input shape.
        let wrong = Array::from_tensor(HostTensor::zeros(DType::F32, [2, 8]).view()).unwrap();
        match exe.run_values(&[("x", &Value::from(wrong))], &[]) {
            Err(RunError::Shape { name, got, .. }) => {
                assert_eq!((name.as_str(), got), ("x", vec![2, 8]))
            }
            other => panic!("{mode:?}: expected a shape error, got {other:?}"),
        }
        let ints = Array::from_tensor(HostTensor::zeros(DType::I32, [2, 16]).view()).unwrap();
        assert!(matches!(
            exe.run_values(&[("x", &Value::from(ints))], &[]),
            Err(RunError::DType {
                got: DType::I32,
                ..
            })
        ));
        assert!(matches!(
            exe.run_values(&[], &[]),
            Err(RunError::MissingInput { .. })
        ));
    }
}

#[test]
fn run_outputs_reads_the_outputs_asked_for_on_every_backend() {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [Dim::sym("n")]).unwrap();
    let y = b.unary(UnaryOp::Exp, x).unwrap();
    let z = b.unary(UnaryOp::Neg, x).unwrap();
    b.output("y", y).unwrap();
    b.output("z", z).unwrap();
    let graph = b.finish().unwrap();
    let x = HostTensor::from_vec(vec![0.0f32, 1.0, -2.0], [3]).unwrap();
    let cpu = rlx::cpu::CpuBackend::default().compile(&graph).unwrap();
    let all = cpu.run(&[("x", x.view())], &[]).unwrap();
    let mut executables: Vec<(String, Box<dyn Executable>)> =
        vec![("cpu".to_string(), Box::new(cpu))];
    for mode in MODES {
        let exe = MlxBackend::new(mode).compile(&graph).unwrap();
        executables.push((format!("mlx {mode:?}"), Box::new(exe)));
    }
    for (name, exe) in &mut executables {
        let picked = exe
            .run_outputs(&[("x", x.view())], &[], &[1, 0, 1])
            .unwrap();
        assert_eq!(picked.len(), 3, "{name}");
        assert_eq!(picked[0], all[1], "{name}");
        assert_eq!(picked[1], all[0], "{name}");
        assert_eq!(picked[2], all[1], "{name}");
        assert!(
            exe.run_outputs(&[("x", x.view())], &[], &[])
                .unwrap()
                .is_empty()
        );
        match exe.run_outputs(&[("x", x.view())], &[], &[0, 2]) {
            Err(RunError::UnknownOutput { index: 2, count: 2 }) => {}
            other => panic!("{name}: expected an unknown output, got {other:?}"),
        }
    }
}

#[test]
fn weights_bound_from_device_arrays_match_host_binding_and_are_checked_alike() {
    let graph = mlp(DType::F32);
    let array = |t: HostTensor| Array::from_tensor(t.view()).unwrap();
    for mode in MODES {
        let host = MlxBackend::new(mode).compile(&graph).unwrap();
        bind(&host);
        let device = MlxBackend::new(mode).compile(&graph).unwrap();
        let w1 = array(HostTensor::from_vec(values(16 * 32, 1), [16, 32]).unwrap());
        let b1 = array(HostTensor::from_vec(values(32, 2), [32]).unwrap());
        let w2 = array(HostTensor::from_vec(values(32 * 8, 3), [32, 8]).unwrap());
        device
            .set_weight_arrays(&[("w1", &w1), ("b1", &b1), ("w2", &w2)])
            .unwrap();
        let x = input(3);
        let x = [("x", x.view())];
        assert_eq!(
            device.run(&x, &[]).unwrap(),
            host.run(&x, &[]).unwrap(),
            "{mode:?}"
        );
        assert_eq!(device.weight("b1").unwrap(), host.weight("b1").unwrap());
        // All or none: one bad value binds nothing.
        let ints = array(HostTensor::zeros(DType::I32, [32]));
        let zeros = array(HostTensor::zeros(DType::F32, [16, 32]));
        assert!(matches!(
            device.set_weight_arrays(&[("w1", &zeros), ("b1", &ints)]),
            Err(RunError::DType {
                got: DType::I32,
                ..
            })
        ));
        assert_eq!(device.run(&x, &[]).unwrap(), host.run(&x, &[]).unwrap());
        assert!(matches!(
            device.set_weight_arrays(&[("w2", &zeros)]),
            Err(RunError::Shape { .. })
        ));
        assert!(matches!(
            device.set_weight_arrays(&[("w9", &zeros)]),
            Err(RunError::UnknownWeight { .. })
        ));
    }
}

/// Multi-head attention as transformers build it: `[B, S, H·D]` inputs split into heads by
/// a reshape and a permute (strided views), the result's heads merged back.
struct AttentionCase {
    name: &'static str,
    batch: usize,
    sq: usize,
    sk: usize,
    heads: usize,
    kv_heads: usize,
    dk: usize,
    dv: usize,
    mask: rlx::ir::AttentionMask,
    /// For `AttentionMask::Tensor`: a bool key-padding mask `[B, 1, 1, Sk]`, else an additive
    /// float mask `[B, H, Sq, Sk]`.
    bool_mask: bool,
}

fn attention_graph(c: &AttentionCase) -> Graph {
    use rlx::ir::{AttentionMask, Op};
    let mut b = GraphBuilder::new();
    let split = |b: &mut GraphBuilder, name: &str, s: usize, h: usize, d: usize| {
        let x = b.input(name, DType::F32, [c.batch, s, h * d]).unwrap();
        let x = b.reshape(x, [c.batch, s, h, d]).unwrap();
        b.permute(x, &[0, 2, 1, 3]).unwrap()
    };
    let q = split(&mut b, "q", c.sq, c.heads, c.dk);
    let k = split(&mut b, "k", c.sk, c.kv_heads, c.dk);
    let v = split(&mut b, "v", c.sk, c.kv_heads, c.dv);
    let mut operands = vec![q, k, v];
    if c.mask == AttentionMask::Tensor {
        let m = if c.bool_mask {
            b.input("mask", DType::Bool, [c.batch, 1, 1, c.sk])
        } else {
            b.input("mask", DType::F32, [c.batch, c.heads, c.sq, c.sk])
        };
        operands.push(m.unwrap());
    }
    let scale = 1.0 / (c.dk as f64).sqrt();
    let o = b
        .op(
            Op::Attention(Attention {
                scale,
                mask: c.mask,
                key_length: false,
            }),
            &operands,
        )
        .unwrap();
    let o = b.permute(o, &[0, 2, 1, 3]).unwrap();
    let o = b.reshape(o, [c.batch, c.sq, c.heads * c.dv]).unwrap();
    b.output("o", o).unwrap();
    b.finish().unwrap()
}

fn attention_inputs(c: &AttentionCase) -> Vec<(&'static str, HostTensor)> {
    let t = |n: usize, seed: usize, shape: [usize; 3]| {
        let v: Vec<f32> = values(n, seed).iter().map(|x| x * 4.0).collect();
        HostTensor::from_vec(v, shape).unwrap()
    };
    let mut inputs = vec![
        (
            "q",
            t(
                c.batch * c.sq * c.heads * c.dk,
                11,
                [c.batch, c.sq, c.heads * c.dk],
            ),
        ),
        (
            "k",
            t(
                c.batch * c.sk * c.kv_heads * c.dk,
                12,
                [c.batch, c.sk, c.kv_heads * c.dk],
            ),
        ),
        (
            "v",
            t(
                c.batch * c.sk * c.kv_heads * c.dv,
                13,
                [c.batch, c.sk, c.kv_heads * c.dv],
            ),
        ),
    ];
    if c.mask == rlx::ir::AttentionMask::Tensor {
        let mask = if c.bool_mask {
            // Batch element b sees its first sk - 5b keys; the last one sees none.
            let keep: Vec<bool> = (0..c.batch * c.sk)
                .map(|i| {
                    let (b, j) = (i / c.sk, i % c.sk);
                    b + 1 < c.batch && j + 5 * b < c.sk
                })
                .collect();
            HostTensor::from_vec(keep, [c.batch, 1, 1, c.sk]).unwrap()
        } else {
            let n = c.batch * c.heads * c.sq * c.sk;
            let add: Vec<f32> = (0..n)
                .map(|i| match i % 7 {
                    0 => f32::NEG_INFINITY,
                    k => k as f32 * -0.3,
                })
                .collect();
            HostTensor::from_vec(add, [c.batch, c.heads, c.sq, c.sk]).unwrap()
        };
        inputs.push(("mask", mask));
    }
    inputs
}

/// On a GPU, float32 attention of at most 64 features runs as one fused kernel that reads
/// the head views through their strides (`rlx-mlx-sys/cpp/attention.cu`); elsewhere MLX's
/// own. Either way it must agree with the CPU backend, over every mask kind, grouped heads,
/// a value width other than the key width, queries other than keys in number, rows with no
/// visible key, and keys over many of the kernel's tiles.
#[test]
fn attention_on_the_default_device_matches_the_cpu_backend() {
    use rlx::ir::AttentionMask;
    let case = |name, batch, sq, sk, heads, kv_heads, dk, dv, mask, bool_mask| AttentionCase {
        name,
        batch,
        sq,
        sk,
        heads,
        kv_heads,
        dk,
        dv,
        mask,
        bool_mask,
    };
    let cases = [
        case(
            "plain",
            2,
            128,
            128,
            12,
            12,
            32,
            32,
            AttentionMask::None,
            false,
        ),
        case(
            "key padding",
            3,
            40,
            40,
            4,
            4,
            32,
            32,
            AttentionMask::Tensor,
            true,
        ),
        case(
            "additive",
            2,
            17,
            23,
            3,
            3,
            8,
            8,
            AttentionMask::Tensor,
            false,
        ),
        case(
            "causal, grouped",
            2,
            70,
            150,
            6,
            2,
            64,
            24,
            AttentionMask::Causal,
            false,
        ),
        case(
            "window",
            1,
            130,
            130,
            2,
            1,
            16,
            16,
            AttentionMask::SlidingWindow(9),
            false,
        ),
        case(
            "long keys",
            1,
            3,
            700,
            2,
            2,
            5,
            7,
            AttentionMask::None,
            false,
        ),
        case(
            "wide heads",
            1,
            9,
            9,
            2,
            2,
            80,
            80,
            AttentionMask::Causal,
            false,
        ),
    ];
    let device = Device::preferred();
    // A process that opted into TF32 (MLX_ENABLE_TF32=1) runs attention's two products in
    // TF32 on a GPU (10-bit mantissas), and must ask for Precision::Tf32.
    let (precision, bound) = if rlx::mlx::tf32_enabled() && device == Device::Gpu {
        (Precision::Tf32, 5e-3)
    } else {
        (Precision::F32, 2e-5)
    };
    println!("attention on MLX's {device:?} in {precision:?} against the CPU backend");
    for c in &cases {
        let graph = attention_graph(c);
        let inputs = attention_inputs(c);
        let named: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
            inputs.iter().map(|(n, t)| (*n, t.view())).collect();
        let cpu = rlx::cpu::CpuBackend::default().compile(&graph).unwrap();
        let want = cpu.run(&named, &[]).unwrap().remove(0);
        for mode in MODES {
            let exe = MlxBackend::new(mode)
                .with_precision(precision)
                .compile(&graph)
                .unwrap();
            let got = exe.run(&named, &[]).unwrap().remove(0);
            let diff = max_abs_diff(&got, &want);
            println!("  {:<16} {mode:?}: max |mlx - cpu| = {diff:.2e}", c.name);
            assert!(diff <= bound, "{} in {mode:?}: {diff:e}", c.name);
        }
    }
}

/// Rows of `table` (a flat param of `table_len` floats, seen as rows of `width` from
/// element `offset` on) at `ids` of `id_dtype`.
fn row_gather_graph(table_len: usize, offset: i64, width: usize, id_dtype: DType) -> Graph {
    use rlx::ir::Op;
    let mut b = GraphBuilder::new();
    let flat = b.param("table", DType::F32, [table_len]).unwrap();
    let rows = (table_len - offset as usize) / width;
    let stop = offset + (rows * width) as i64;
    let view = b
        .op(
            Op::Slice(Slice {
                axis: 0,
                start: offset,
                stop: Some(stop),
                step: 1,
            }),
            &[flat],
        )
        .unwrap();
    let table = b.reshape(view, [rows, width]).unwrap();
    let ids = b
        .input("ids", id_dtype, [Dim::sym("batch"), Dim::from(5)])
        .unwrap();
    let got = b.op(Op::Gather(Gather { axis: 0 }), &[table, ids]).unwrap();
    b.output("rows", got).unwrap();
    b.finish().unwrap()
}

#[test]
fn row_gathers_on_the_default_device_match_the_cpu_backend() {
    // Widths of four floats (a GPU copies them 16 bytes at a time) and not; a table that
    // starts one float into its buffer (copied float by float there); both index types.
    let cases = [
        ("width 8", 8 * 40, 0, 8, DType::I64),
        ("width 8, i32 ids", 8 * 40, 0, 8, DType::I32),
        ("width 6", 6 * 40, 0, 6, DType::I64),
        ("width 4 from element 1", 4 * 40 + 1, 1, 4, DType::I64),
    ];
    for (name, len, offset, width, id_dtype) in cases {
        let graph = row_gather_graph(len, offset, width, id_dtype);
        let rows = (len - offset as usize) / width;
        let table = HostTensor::from_vec(values(len, 9), [len]).unwrap();
        let ids: Vec<i64> = (0..3 * 5).map(|i| ((i * 7 + 3) % rows) as i64).collect();
        let ids = match id_dtype {
            DType::I32 => HostTensor::from_vec(ids.iter().map(|&i| i as i32).collect(), [3, 5]),
            _ => HostTensor::from_vec(ids, [3, 5]),
        }
        .unwrap();
        let cpu = rlx::cpu::CpuBackend::default().compile(&graph).unwrap();
        cpu.set_weight("table", table.view()).unwrap();
        let want = cpu.run(&[("ids", ids.view())], &[]).unwrap();
        for mode in MODES {
            let exe = MlxBackend::new(mode).compile(&graph).unwrap();
            exe.set_weight("table", table.view()).unwrap();
            let got = exe.run(&[("ids", ids.view())], &[]).unwrap();
            assert_eq!(got[0].shape(), [3, 5, width], "{name} {mode:?}");
            assert_eq!(max_abs_diff(&got[0], &want[0]), 0.0, "{name} {mode:?}");
        }
    }
}

/// A weight read by GPU kernels and by `solve` (which MLX runs on its CPU stream), run many
/// times with fresh inputs in every mode: each run equals the CPU backend's. MLX moves a
/// buffer a CPU-stream op reads to unified memory and frees the device copy unordered with
/// the GPU kernels still reading it; the shim gives such ops a copy of their own
/// (`for_cpu_stream`). Before it, the random graphs saw a permute of a solve's weight read
/// other values on an H100, now and then.
#[test]
fn a_weight_read_on_the_gpu_and_by_a_cpu_stream_op_keeps_its_values() {
    use rlx::ir::{Op, Permute};
    const N: usize = 64;
    let mut b = GraphBuilder::new();
    let a = b.param("a", DType::F32, [N, N]).unwrap();
    let x = b.input("x", DType::F32, [N, 8]).unwrap();
    let at = b
        .op(Op::Permute(Permute { perm: vec![1, 0] }), &[a])
        .unwrap();
    let ax = b.matmul(a, x).unwrap();
    let rhs = b.add(ax, x).unwrap();
    let solved = b.op(Op::Solve, &[a, rhs]).unwrap();
    let back = b.matmul(at, solved).unwrap();
    b.output("at", at).unwrap();
    b.output("solved", solved).unwrap();
    b.output("back", back).unwrap();
    let graph = b.finish().unwrap();
    // Diagonally dominant, so well conditioned.
    let weight: Vec<f32> = values(N * N, 11)
        .iter()
        .enumerate()
        .map(|(i, v)| if i % (N + 1) == 0 { 8.0 + v } else { *v * 0.1 })
        .collect();
    let weight = HostTensor::from_vec(weight, [N, N]).unwrap();
    let cpu = rlx::cpu::CpuBackend::default().compile(&graph).unwrap();
    cpu.set_weight("a", weight.view()).unwrap();
    for mode in MODES {
        let exe = MlxBackend::new(mode).compile(&graph).unwrap();
        exe.set_weight("a", weight.view()).unwrap();
        for run in 0..60 {
            let x = HostTensor::from_vec(values(N * 8, 100 + run), [N, 8]).unwrap();
            let want = cpu.run(&[("x", x.view())], &[]).unwrap();
            let got = exe.run(&[("x", x.view())], &[]).unwrap();
            assert_eq!(max_abs_diff(&got[0], &want[0]), 0.0, "{mode:?} run {run}");
            for (g, w) in got[1..].iter().zip(&want[1..]) {
                let diff = max_abs_diff(g, w);
                assert!(diff < 1e-3, "{mode:?} run {run}: {diff}");
            }
        }
    }
}

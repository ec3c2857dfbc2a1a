//! The MLX backend's own contract: MLX failures and lowering panics come back as typed
//! errors, custom ops run through the MLX registry in every mode, compiled mode with
//! kernel fusion matches the CPU executor on a transformer model, and run-time input
//! checks are the same as on the CPU.
#![cfg(feature = "mlx")]

use std::collections::BTreeMap;
use std::sync::Arc;

use rlx::backend::{Backend, CompileError, Executable, RunError};
use rlx::builder::GraphBuilder;
use rlx::cpu::CpuBackend;
use rlx::ir::{AttrValue, BinaryOp, DType, Dim, Graph, Op, TensorType, UnaryOp};
use rlx::mlx::{Array, MlxBackend, MlxCustomOp, MlxMode};
use rlx::models::bert::Bert;
use rlx::tensor::HostTensor;
use rlx_testkit::testing::tiny_bert;

const MODES: [MlxMode; 3] = [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled];

#[test]
fn an_mlx_exception_becomes_a_typed_error_with_its_message() {
    let a = Array::from_tensor(HostTensor::zeros(DType::F32, [2, 3]).view()).unwrap();
    let b = Array::from_tensor(HostTensor::zeros(DType::F32, [2, 2]).view()).unwrap();
    let err = a.matmul(&b, false, false).unwrap_err();
    assert!(
        err.message.contains("[matmul]") && err.message.contains("(2,3)"),
        "{err}"
    );
    assert!(err.to_string().starts_with("MLX: "), "{err}");
    // The failed call made no array, and the next good call works.
    let c = a.matmul(&b, true, false).unwrap();
    assert_eq!(c.shape().unwrap(), vec![3, 2]);
}

#[test]
fn backend_reports_the_mlx_version_and_device() {
    assert!(rlx::mlx::version().starts_with("0."));
    let device = rlx::mlx::device_name().unwrap();
    assert!(device == "cpu" || device == "gpu", "{device}");
    assert!(!rlx::mlx::blas().is_empty());
}

/// `y = x + shift` on MLX; a negative shift is refused, and `panic = true` panics.
struct Shift;

impl MlxCustomOp for Shift {
    fn lower(
        &self,
        attrs: &BTreeMap<String, AttrValue>,
        inputs: &[Array],
        dtype: DType,
        _dims: &[usize],
    ) -> Result<Array, String> {
        if let Some(AttrValue::Bool(true)) = attrs.get("panic") {
            panic!("the shift kernel was told to panic");
        }
        let Some(AttrValue::Float(shift)) = attrs.get("shift") else {
            return Err("missing attribute `shift`".into());
        };
        if *shift < 0.0 {
            return Err(format!("shift {shift} is negative"));
        }
        let s = HostTensor::from_vec(vec![*shift as f32], [1]).map_err(|e| e.to_string())?;
        let s = Array::from_tensor(s.view()).map_err(|e| e.to_string())?;
        let s = s.cast(dtype).map_err(|e| e.to_string())?;
        inputs[0]
            .binary(BinaryOp::Add, &s)
            .map_err(|e| e.to_string())
    }
}

fn shift_graph(attrs: BTreeMap<String, AttrValue>) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [Dim::sym("n"), Dim::from(2)])
        .unwrap();
    let op = Op::Custom(rlx::ir::Custom {
        name: "shift".into(),
        attrs,
        output: TensorType::new(DType::F32, [Dim::sym("n"), Dim::from(2)]),
    });
    let y = b.op(op, &[x]).unwrap();
    let y = b.unary(UnaryOp::Neg, y).unwrap();
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

#[test]
fn custom_ops_run_on_mlx_and_their_failures_are_typed_in_every_mode() {
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
    for mode in MODES {
        let backend = MlxBackend::new(mode).with_custom_op("shift", Arc::new(Shift));
        let ok = shift_graph(BTreeMap::from([("shift".into(), AttrValue::Float(1.5))]));
        let exe = backend.compile(&ok).unwrap();
        let y = exe.run(&[("x", x.view())], &[]).unwrap();
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &[-2.5, -3.5, -4.5, -5.5],
            "{mode:?}"
        );

        let refused = shift_graph(BTreeMap::from([("shift".into(), AttrValue::Float(-1.0))]));
        let err = backend
            .compile(&refused)
            .unwrap()
            .run(&[("x", x.view())], &[])
            .unwrap_err();
        assert_eq!(
            err,
            RunError::Custom {
                name: "shift".into(),
                message: "shift -1 is negative".into()
            },
            "{mode:?}"
        );
    }

    // In compiled mode the kernel runs inside MLX's tracer, called from C++: its panic is
    // caught at the boundary and reported, and the executable stays usable.
    let backend = MlxBackend::new(MlxMode::Compiled).with_custom_op("shift", Arc::new(Shift));
    let panics = shift_graph(BTreeMap::from([("panic".into(), AttrValue::Bool(true))]));
    let exe = backend.compile(&panics).unwrap();
    let err = exe.run(&[("x", x.view())], &[]).unwrap_err();
    match &err {
        RunError::Backend { backend, message } => {
            assert_eq!(*backend, "mlx");
            assert!(
                message.contains("panicked: the shift kernel was told to panic"),
                "{message}"
            );
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    // A second run traces again and fails the same way, without crashing.
    assert_eq!(exe.run(&[("x", x.view())], &[]).unwrap_err(), err);

    // An op with no MLX kernel fails at compile, naming it.
    let err = MlxBackend::default()
        .compile(&shift_graph(BTreeMap::new()))
        .unwrap_err();
    assert_eq!(
        err,
        CompileError::Unsupported {
            backend: "mlx",
            ops: vec!["custom[\"shift\", -> f32[n,2]]".into()]
        }
    );
}

#[test]
fn run_time_input_errors_match_the_cpu_backend() {
    let mut b = GraphBuilder::new();
    let x = b
        .input("x", DType::F32, [Dim::sym("n"), Dim::from(3)])
        .unwrap();
    let w = b.param("w", DType::F32, [3, 2]).unwrap();
    let y = b.matmul(x, w).unwrap();
    b.output("y", y).unwrap();
    let g = b.finish().unwrap();
    let good = HostTensor::zeros(DType::F32, [4, 3]);
    let wrong_dims = HostTensor::zeros(DType::F32, [4, 2]);
    let wrong_dtype = HostTensor::zeros(DType::F64, [4, 3]);
    let weight = HostTensor::zeros(DType::F32, [3, 2]);
    let run = |exe: &dyn Executable| -> Vec<RunError> {
        let before = exe.run(&[("x", good.view())], &[]).unwrap_err();
        exe.set_weight("w", weight.view()).unwrap();
        vec![
            before,
            exe.run(&[], &[]).unwrap_err(),
            exe.run(&[("x", wrong_dims.view())], &[]).unwrap_err(),
            exe.run(&[("x", wrong_dtype.view())], &[]).unwrap_err(),
            exe.run(&[("x", good.view()), ("z", good.view())], &[])
                .unwrap_err(),
            exe.run(&[("x", good.view())], &[("n", 5)]).unwrap_err(),
            exe.set_weight("w", good.view()).unwrap_err(),
            exe.set_weight("v", weight.view()).unwrap_err(),
        ]
    };
    let mut cpu = CpuBackend::default().compile(&g).unwrap();
    let expected = run(&mut cpu);
    assert!(matches!(expected[0], RunError::MissingWeight { .. }));
    for mode in MODES {
        let mut mlx = MlxBackend::new(mode).compile(&g).unwrap();
        assert_eq!(run(&mut mlx), expected, "{mode:?}");
        // A bound weight reads back unchanged.
        assert_eq!(mlx.weight("w").unwrap(), weight);
    }
}

#[test]
fn a_singular_system_is_reported() {
    let mut b = GraphBuilder::new();
    let a = b.input("a", DType::F32, [2, 2]).unwrap();
    let r = b.input("b", DType::F32, [2, 1]).unwrap();
    let x = b.op(Op::Solve, &[a, r]).unwrap();
    b.output("x", x).unwrap();
    let g = b.finish().unwrap();
    let a = HostTensor::from_vec(vec![1.0f32, 2.0, 2.0, 4.0], [2, 2]).unwrap();
    let r = HostTensor::from_vec(vec![1.0f32, 1.0], [2, 1]).unwrap();
    for mode in MODES {
        let exe = MlxBackend::new(mode).compile(&g).unwrap();
        let err = exe
            .run(&[("a", a.view()), ("b", r.view())], &[])
            .unwrap_err();
        assert!(
            matches!(err, RunError::Singular { at } if at.op == "solve"),
            "{mode:?}: {err:?}"
        );
    }
}

/// A two-layer BERT with random weights: the same outputs on the CPU executor and on MLX
/// in every mode, with compiled mode fusing kernels (on Linux MLX runs g++ for them).
#[test]
fn bert_matches_the_cpu_backend_in_every_mode() {
    let config = tiny_bert();
    let cpu = Bert::compile(&CpuBackend::default(), &config).unwrap();
    cpu.init_weights(|spec| {
        let shape = spec.static_shape().unwrap();
        let n: usize = shape.iter().product();
        let values = (0..n)
            .map(|i| ((i * 7919 + spec.name.len() * 31) % 1000) as f32 / 2500.0 - 0.2)
            .collect();
        HostTensor::from_vec(values, shape).unwrap()
    })
    .unwrap();
    let ids = HostTensor::from_vec((0..10).map(|i| (i * 7 % 50) as i64).collect(), [2, 5]).unwrap();
    let mask = HostTensor::from_vec(vec![1i64, 1, 1, 1, 1, 1, 1, 1, 0, 0], [2, 5]).unwrap();
    let types = HostTensor::zeros(DType::I64, [2, 5]);
    let (hidden, pooled) = cpu.run(&ids, &mask, &types).unwrap();
    rlx::mlx::set_kernel_fusion(true).unwrap();
    for mode in MODES {
        let mlx = Bert::compile(&MlxBackend::new(mode), &config).unwrap();
        for spec in &cpu.manifest().params {
            let name = spec.name.as_str();
            mlx.set_weight(name, cpu.weight(name).unwrap().view())
                .unwrap();
        }
        for round in 0..2 {
            let (h, p) = mlx.run(&ids, &mask, &types).unwrap();
            for (what, got, want) in [("hidden", &h, &hidden), ("pooled", &p, &pooled)] {
                let diff = got
                    .to_f64_vec()
                    .iter()
                    .zip(want.to_f64_vec())
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                assert!(diff < 1e-5, "{mode:?} round {round} {what}: max |Δ| {diff}");
            }
        }
    }
}

/// A GGUF block weight bound as a param is turned into MLX's form once, when it is bound
/// (decoding steps converted every projection's blocks on every run before): its products
/// equal those with the blocks given as an input, converted in the run, bit for bit, for
/// every format and mode, a vector and a batch of rows, and again after the weight is bound
/// anew; the bytes themselves still serve other ops (`block_dequantize`).
#[test]
fn block_weights_take_their_mlx_form_when_bound() {
    use rlx::gguf::GgmlType;
    use rlx::gguf::random_blocks;
    use rlx::ir::BLOCK_FORMATS;
    use rlx::ir::{BlockDequantize, BlockMatMul};
    use rlx_testkit::rng::Rng;

    fn graph(format: GgmlType, rows: usize, n: usize, row_bytes: usize, as_param: bool) -> Graph {
        let mut b = GraphBuilder::new();
        let k = row_bytes / format.block_bytes() * format.block_values();
        let x = b.input("x", DType::F32, [rows, k]).unwrap();
        let w = if as_param {
            b.param("w", DType::U8, [n, row_bytes]).unwrap()
        } else {
            b.input("w", DType::U8, [n, row_bytes]).unwrap()
        };
        let y = b
            .op(Op::BlockMatMul(BlockMatMul::exact(format)), &[x, w])
            .unwrap();
        let values = b
            .op(Op::BlockDequantize(BlockDequantize { format }), &[w])
            .unwrap();
        b.output("y", y).unwrap();
        b.output("values", values).unwrap();
        b.finish().unwrap()
    }

    let mut rng = Rng(61);
    for format in BLOCK_FORMATS {
        let (n, blocks_per_row) = (40, 2);
        let row_bytes = blocks_per_row * format.block_bytes();
        let k = blocks_per_row * format.block_values();
        let weights: Vec<HostTensor> = (0..2)
            .map(|_| {
                let bytes = random_blocks(format, n * blocks_per_row, || rng.uniform(0.0, 1.0));
                HostTensor::from_vec(bytes, [n, row_bytes]).unwrap()
            })
            .collect();
        for rows in [1usize, 5] {
            let x: Vec<f32> = (0..rows * k)
                .map(|i| ((i * 7) % 13) as f32 / 6.0 - 1.0)
                .collect();
            let x = HostTensor::from_vec(x, [rows, k]).unwrap();
            for mode in MODES {
                let backend = MlxBackend::new(mode);
                let bound = backend
                    .compile(&graph(format, rows, n, row_bytes, true))
                    .unwrap();
                let given = backend
                    .compile(&graph(format, rows, n, row_bytes, false))
                    .unwrap();
                for w in &weights {
                    bound.set_weights(&[("w", w.view())]).unwrap();
                    let ours = bound.run(&[("x", x.view())], &[]).unwrap();
                    let theirs = given.run(&[("x", x.view()), ("w", w.view())], &[]).unwrap();
                    for (a, b) in ours.iter().zip(&theirs) {
                        assert_eq!(
                            a.as_slice::<f32>().unwrap(),
                            b.as_slice::<f32>().unwrap(),
                            "{format:?}, {rows} rows, {mode:?}"
                        );
                    }
                }
            }
        }
    }
}

/// Products of one operand by several weights, each read by its product alone (a decoder's
/// query, key and value projections), run as one product by their joined weight: float
/// weights either way round and GGUF blocks, equal to the products with the weights given
/// as inputs (no joining), in every mode, again after one member of each group is bound
/// anew, with every weight read back as bound.
#[test]
fn products_of_one_operand_share_one_joined_weight() {
    use rlx::gguf::{GgmlType, random_blocks};
    use rlx::ir::{BlockMatMul, MatMul};
    use rlx_testkit::rng::Rng;

    const K: usize = 64;
    // (name, dims, dtype): three [K, N], two [N, K] read transposed, two of Q4_0 blocks.
    let row_bytes = K / 32 * GgmlType::Q4_0.block_bytes();
    let weights: [(&str, [usize; 2], DType); 7] = [
        ("a", [K, 8], DType::F32),
        ("b", [K, 4], DType::F32),
        ("c", [K, 4], DType::F32),
        ("d", [6, K], DType::F32),
        ("e", [10, K], DType::F32),
        ("f", [8, row_bytes], DType::U8),
        ("g", [4, row_bytes], DType::U8),
    ];
    let graph = |rows: usize, as_params: bool| {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [rows, K]).unwrap();
        for (i, (name, dims, dtype)) in weights.iter().enumerate() {
            let w = if as_params {
                b.param(name, *dtype, *dims).unwrap()
            } else {
                b.input(name, *dtype, *dims).unwrap()
            };
            let op = match i {
                0..=2 => Op::MatMul(MatMul {
                    transpose_a: false,
                    transpose_b: false,
                }),
                3 | 4 => Op::MatMul(MatMul {
                    transpose_a: false,
                    transpose_b: true,
                }),
                _ => Op::BlockMatMul(BlockMatMul::exact(GgmlType::Q4_0)),
            };
            let y = b.op(op, &[x, w]).unwrap();
            b.output(&format!("y{name}"), y).unwrap();
        }
        b.finish().unwrap()
    };
    let mut rng = Rng(67);
    let mut value = |dims: [usize; 2], dtype: DType| match dtype {
        DType::U8 => {
            let bytes = random_blocks(GgmlType::Q4_0, dims[0] * K / 32, || rng.uniform(0.0, 1.0));
            HostTensor::from_vec(bytes, dims).unwrap()
        }
        _ => {
            let v: Vec<f32> = (0..dims[0] * dims[1])
                .map(|_| rng.uniform(-1.0, 1.0) as f32)
                .collect();
            HostTensor::from_vec(v, dims).unwrap()
        }
    };
    let first: Vec<HostTensor> = weights.iter().map(|(_, d, t)| value(*d, *t)).collect();
    let fresh: Vec<HostTensor> = weights.iter().map(|(_, d, t)| value(*d, *t)).collect();
    for rows in [1usize, 3] {
        let x: Vec<f32> = (0..rows * K)
            .map(|i| ((i * 5) % 11) as f32 / 5.0 - 1.0)
            .collect();
        let x = HostTensor::from_vec(x, [rows, K]).unwrap();
        for mode in MODES {
            let mut values = first.clone();
            let backend = MlxBackend::new(mode);
            let joined = backend.compile(&graph(rows, true)).unwrap();
            let given = backend.compile(&graph(rows, false)).unwrap();
            let bind: Vec<(&str, _)> = weights
                .iter()
                .zip(&values)
                .map(|((name, _, _), v)| (*name, v.view()))
                .collect();
            joined.set_weights(&bind).unwrap();
            // Then one member of each group anew: b, e and g.
            for round in 0..2 {
                if round == 1 {
                    for at in [1, 4, 6] {
                        values[at] = fresh[at].clone();
                        let name = weights[at].0;
                        joined.set_weights(&[(name, values[at].view())]).unwrap();
                    }
                }
                let ours = joined.run(&[("x", x.view())], &[]).unwrap();
                let mut inputs = vec![("x", x.view())];
                inputs.extend(
                    weights
                        .iter()
                        .zip(&values)
                        .map(|((n, _, _), v)| (*n, v.view())),
                );
                let theirs = given.run(&inputs, &[]).unwrap();
                for ((a, b), (name, _, _)) in ours.iter().zip(&theirs).zip(&weights) {
                    let (a, b) = (a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
                    assert_eq!(a.len(), b.len());
                    for (p, q) in a.iter().zip(b) {
                        assert!(
                            (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                            "{name}: {p} against {q}, {rows} rows, {mode:?}, round {round}"
                        );
                    }
                }
                for ((name, _, _), v) in weights.iter().zip(&values) {
                    let read = joined.weight(name).unwrap();
                    assert_eq!(read.dtype(), v.dtype(), "{name} read back, {mode:?}");
                    assert_eq!(
                        read.to_f64_vec(),
                        v.to_f64_vec(),
                        "{name} read back, {mode:?}"
                    );
                }
            }
        }
    }
}

/// A decoder's residual adds and the norms that read them: MLX lowers each add with its
/// norm (one kernel on an NVIDIA GPU), and every value — the norms, the sums that other
/// ops read too, a norm whose weight is computed after its add (not lowered together) —
/// equals the CPU executor's within the norm's float32 rounding, in every mode and for
/// one row, several and none.
#[test]
fn residual_adds_and_their_norms_match_the_cpu() {
    use rlx::ir::RmsNorm;
    const W: usize = 48;
    let norm = Op::RmsNorm(RmsNorm {
        eps: 1e-5,
        has_weight: true,
    });
    let graph = |rows: usize| {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [rows, W]).unwrap();
        let d1 = b.input("d1", DType::F32, [rows, W]).unwrap();
        let d2 = b.input("d2", DType::F32, [rows, W]).unwrap();
        let w1 = b.param("w1", DType::F32, [W]).unwrap();
        let w2 = b.param("w2", DType::F32, [W]).unwrap();
        // Block one: the sum feeds the norm and the next residual add.
        let s1 = b.op(Op::Binary(BinaryOp::Add), &[x, d1]).unwrap();
        let h1 = b.op(norm.clone(), &[s1, w1]).unwrap();
        let s2 = b.op(Op::Binary(BinaryOp::Add), &[s1, d2]).unwrap();
        // Block two: its weight is made after the add, so the two stay apart.
        let w2x2 = b.op(Op::Binary(BinaryOp::Add), &[w2, w2]).unwrap();
        let h2 = b.op(norm.clone(), &[s2, w2x2]).unwrap();
        let e = b.op(Op::Unary(UnaryOp::Exp), &[h1]).unwrap();
        for (name, node) in [("h1", h1), ("s2", s2), ("h2", h2), ("e", e)] {
            b.output(name, node).unwrap();
        }
        b.finish().unwrap()
    };
    let data = |rows: usize, seed: usize| {
        let v: Vec<f32> = (0..rows * W)
            .map(|i| ((i * 7 + seed * 13) % 23) as f32 / 7.0 - 1.5)
            .collect();
        HostTensor::from_vec(v, [rows, W]).unwrap()
    };
    let weight = |seed: usize| {
        let v: Vec<f32> = (0..W)
            .map(|i| 0.5 + ((i + seed) % 5) as f32 / 4.0)
            .collect();
        HostTensor::from_vec(v, [W]).unwrap()
    };
    let (w1, w2) = (weight(1), weight(2));
    for rows in [1usize, 5, 0] {
        let g = graph(rows);
        let (x, d1, d2) = (data(rows, 0), data(rows, 1), data(rows, 2));
        let inputs = [("x", x.view()), ("d1", d1.view()), ("d2", d2.view())];
        let cpu = CpuBackend::default().compile(&g).unwrap();
        cpu.set_weights(&[("w1", w1.view()), ("w2", w2.view())])
            .unwrap();
        let want = cpu.run(&inputs, &[]).unwrap();
        for mode in MODES {
            let mlx = MlxBackend::new(mode).compile(&g).unwrap();
            mlx.set_weights(&[("w1", w1.view()), ("w2", w2.view())])
                .unwrap();
            let got = mlx.run(&inputs, &[]).unwrap();
            assert_close(&got, &want, 1e-5, &format!("{mode:?} rows {rows}"));
        }
    }
}

/// The views of a decoding step's single row (heads split off its features, a size-1 axis
/// swapped, each a reshape MLX may fold into the one before it) and products of such a
/// row by a matrix (which MLX takes without flattening the row) equal the CPU executor's,
/// in every mode, beside real transposes and a product of two rows.
#[test]
fn views_and_products_of_a_single_row_match_the_cpu() {
    use rlx::ir::MatMul;
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [1, 1, 12]).unwrap();
    let rows = b.input("rows", DType::F32, [2, 1, 12]).unwrap();
    let w = b.input("w", DType::F32, [12, 5]).unwrap();
    let wt = b.input("wt", DType::F32, [5, 12]).unwrap();
    let heads = b.reshape(x, [1, 1, 3, 4]).unwrap();
    let swapped = b.permute(heads, &[0, 2, 1, 3]).unwrap();
    let back = b.permute(swapped, &[0, 2, 1, 3]).unwrap();
    let flat = b.reshape(back, [3, 4]).unwrap();
    let transposed = b.permute(flat, &[1, 0]).unwrap();
    let reversed = b.permute(swapped, &[3, 1, 2, 0]).unwrap();
    let product = b.matmul(x, w).unwrap();
    let by_rows = Op::MatMul(MatMul {
        transpose_a: false,
        transpose_b: true,
    });
    let product_t = b.op(by_rows, &[x, wt]).unwrap();
    let deeper = b.reshape(x, [1, 1, 1, 12]).unwrap();
    let product_4 = b.matmul(deeper, w).unwrap();
    let two_rows = b.matmul(rows, w).unwrap();
    for (name, y) in [
        ("swapped", swapped),
        ("back", back),
        ("transposed", transposed),
        ("reversed", reversed),
        ("product", product),
        ("product_t", product_t),
        ("product_4", product_4),
        ("two_rows", two_rows),
    ] {
        b.output(name, y).unwrap();
    }
    let g = b.finish().unwrap();
    let values = |n: usize, shape: &[usize], scale: f32| {
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7) % 13) as f32 * scale - 0.5)
            .collect();
        HostTensor::from_vec(v, shape).unwrap()
    };
    let tensors = [
        ("x", values(12, &[1, 1, 12], 0.1)),
        ("rows", values(24, &[2, 1, 12], 0.07)),
        ("w", values(60, &[12, 5], 0.05)),
        ("wt", values(60, &[5, 12], 0.03)),
    ];
    let inputs: Vec<_> = tensors.iter().map(|(n, t)| (*n, t.view())).collect();
    let want = CpuBackend::default()
        .compile(&g)
        .unwrap()
        .run(&inputs, &[])
        .unwrap();
    for mode in MODES {
        let got = MlxBackend::new(mode)
            .compile(&g)
            .unwrap()
            .run(&inputs, &[])
            .unwrap();
        // The views are exact; the products within float32 rounding.
        for (k, (got, want)) in got.iter().zip(&want).take(4).enumerate() {
            assert_eq!(got.shape(), want.shape(), "{mode:?} view {k}");
            assert_eq!(got.to_f64_vec(), want.to_f64_vec(), "{mode:?} view {k}");
        }
        assert_close(&got, &want, 1e-6, &format!("{mode:?}"));
    }
}

/// Each of `got` has the shape of `want`'s and every value within `tol` of it, relative
/// to 1 + its magnitude.
fn assert_close(got: &[HostTensor], want: &[HostTensor], tol: f64, case: &str) {
    assert_eq!(got.len(), want.len(), "{case}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.shape(), w.shape(), "{case} output {k}");
        for (i, (a, b)) in g.to_f64_vec().iter().zip(w.to_f64_vec()).enumerate() {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "{case} output {k} element {i}: {a} against {b}"
            );
        }
    }
}

/// A block's queries and keys, split into heads from its joined q/k/v product and rotated
/// from a run-time position, are lowered as one `rope_heads` (one kernel on an NVIDIA GPU):
/// the rotations, the values beside them and a split that another op also reads equal the
/// CPU executor's, in every mode, for one position and several, one offset per sequence,
/// adjacent pairs, a partial rotation and frequencies of their own.
#[test]
fn query_and_key_rotations_from_a_joined_product_match_the_cpu() {
    use rlx::ir::Rope;
    const K: usize = 12;
    const D: usize = 8;
    let rope = |dims: usize, traditional: bool, freqs: Option<Arc<[f64]>>| Rope {
        dims,
        base: 10_000.0,
        scale: 0.5,
        traditional,
        freqs,
    };
    let graph = |batch: usize, seq: usize, per_row: bool, rope: &Rope| {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [batch, seq, K]).unwrap();
        let pos_dims: Vec<usize> = if per_row { vec![batch] } else { vec![] };
        let pos = b.input("pos", DType::I64, pos_dims.as_slice()).unwrap();
        let mut heads = Vec::new();
        for (name, count) in [("wq", 3), ("wk", 1), ("wv", 1)] {
            let w = b.param(name, DType::F32, [K, count * D]).unwrap();
            let columns = b.matmul(x, w).unwrap();
            let split = b.reshape(columns, [batch, seq, count, D]).unwrap();
            heads.push(b.permute(split, &[0, 2, 1, 3]).unwrap());
        }
        let q = b.op(Op::Rope(rope.clone()), &[heads[0], pos]).unwrap();
        let k = b.op(Op::Rope(rope.clone()), &[heads[1], pos]).unwrap();
        let plain = b.unary(UnaryOp::Exp, heads[0]).unwrap();
        for (name, node) in [("q", q), ("k", k), ("v", heads[2]), ("plain", plain)] {
            b.output(name, node).unwrap();
        }
        b.finish().unwrap()
    };
    let values = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 + seed * 13) % 29) as f32 / 9.0 - 1.5)
            .collect()
    };
    let weights: Vec<(&str, HostTensor)> = [("wq", 3), ("wk", 1), ("wv", 1)]
        .into_iter()
        .enumerate()
        .map(|(i, (name, count))| {
            let w = HostTensor::from_vec(values(K * count * D, i + 3), [K, count * D]).unwrap();
            (name, w)
        })
        .collect();
    let freqs: Arc<[f64]> = Arc::from(vec![0.9, 0.3, 0.07, 0.002]);
    let cases = [
        (1, 1, false, rope(D, false, None)),
        (1, 5, false, rope(D, true, None)),
        (2, 2, true, rope(D, false, None)),
        (1, 3, false, rope(4, false, None)),
        (2, 1, false, rope(D, false, Some(freqs))),
    ];
    for (batch, seq, per_row, rope) in cases {
        let g = graph(batch, seq, per_row, &rope);
        let x = HostTensor::from_vec(values(batch * seq * K, 1), [batch, seq, K]).unwrap();
        let positions: Vec<i64> = (0..if per_row { batch } else { 1 })
            .map(|i| 37 + 900 * i as i64)
            .collect();
        let pos = match per_row {
            true => HostTensor::from_vec(positions, [batch]).unwrap(),
            false => HostTensor::from_vec(positions, Vec::<usize>::new()).unwrap(),
        };
        let bound: Vec<_> = weights.iter().map(|(n, w)| (*n, w.view())).collect();
        let inputs = [("x", x.view()), ("pos", pos.view())];
        let cpu = CpuBackend::default().compile(&g).unwrap();
        cpu.set_weights(&bound).unwrap();
        let want = cpu.run(&inputs, &[]).unwrap();
        for mode in MODES {
            let mlx = MlxBackend::new(mode).compile(&g).unwrap();
            mlx.set_weights(&bound).unwrap();
            let got = mlx.run(&inputs, &[]).unwrap();
            let case = format!("{mode:?} batch {batch} seq {seq} {rope:?}");
            assert_close(&got, &want, 2e-5, &case);
        }
    }
}

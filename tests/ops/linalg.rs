//! Matrix products (and the fused epilogues), solve and the quantized matmul: values and
//! gradients.

use rlx::backend::{Backend, Executable, RunError};
use rlx::cpu::CpuBackend;
use rlx::gguf::GgmlType;
use rlx::ir::{
    ActivationPrecision, BlockDequantize, BlockMatMul, DType, Dequantize, Judgement, MatMul, Op,
    QuantizedMatMul,
};
use rlx::tensor::HostTensor;

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, indices, random, to_tensor};
use rlx::gguf::random_blocks;
use rlx::ir::BLOCK_FORMATS;

/// Naive batched matmul with numpy batch broadcasting and transpose flags.
fn matmul_ref(a: &Nd, b: &Nd, ta: bool, tb: bool) -> Nd {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (m, k) = if ta {
        (a.shape[ra - 1], a.shape[ra - 2])
    } else {
        (a.shape[ra - 2], a.shape[ra - 1])
    };
    let n = if tb { b.shape[rb - 2] } else { b.shape[rb - 1] };
    let batch = crate::reference::broadcast_shape(&[&a.shape[..ra - 2], &b.shape[..rb - 2]]);
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let pick = |t: &Nd, bidx: &[usize], r: usize, c: usize| {
        let rank = t.shape.len();
        let own = &t.shape[..rank - 2];
        let off = bidx.len() - own.len();
        let mut idx: Vec<usize> = own
            .iter()
            .enumerate()
            .map(|(i, d)| if *d == 1 { 0 } else { bidx[off + i] })
            .collect();
        idx.extend([r, c]);
        t.at(&idx)
    };
    let data = indices(&out_shape)
        .iter()
        .map(|idx| {
            let (bidx, i, j) = (
                &idx[..idx.len() - 2],
                idx[idx.len() - 2],
                idx[idx.len() - 1],
            );
            (0..k)
                .map(|p| {
                    let av = if ta {
                        pick(a, bidx, p, i)
                    } else {
                        pick(a, bidx, i, p)
                    };
                    let bv = if tb {
                        pick(b, bidx, j, p)
                    } else {
                        pick(b, bidx, p, j)
                    };
                    av * bv
                })
                .sum()
        })
        .collect();
    Nd::new(&out_shape, data)
}

#[test]
fn matmul_shapes_transposes_and_batches() {
    let mut rng = Rng(11);
    // (a shape, a runtime dims, b shape, transpose_a, transpose_b)
    type Case = (
        Vec<usize>,
        Vec<(usize, &'static str)>,
        Vec<usize>,
        bool,
        bool,
    );
    let cases: Vec<Case> = vec![
        (vec![5, 7], vec![], vec![7, 3], false, false),
        (vec![7, 5], vec![], vec![7, 3], true, false),
        (vec![5, 7], vec![], vec![3, 7], false, true),
        (vec![7, 5], vec![], vec![3, 7], true, true),
        (vec![4, 16], vec![(0, "batch")], vec![16, 9], false, false),
        (vec![2, 3, 4, 5], vec![], vec![2, 3, 5, 6], false, false),
        (vec![2, 1, 4, 5], vec![], vec![3, 5, 6], false, false),
        (
            vec![3, 6, 10],
            vec![(0, "b"), (1, "s")],
            vec![10, 4],
            false,
            false,
        ),
        (vec![3, 6, 10], vec![], vec![4, 10], false, true),
        (vec![70, 300], vec![], vec![300, 40], false, false),
        (vec![300, 70], vec![], vec![40, 300], true, true),
        (vec![1, 513], vec![], vec![513, 130], false, false),
        (vec![130, 20], vec![], vec![20, 3100], false, false),
        // Many small products: batch entries are shared between workers.
        (
            vec![8, 16, 32, 24],
            vec![],
            vec![8, 16, 32, 24],
            false,
            true,
        ),
    ];
    for dtype in FLOATS {
        for (sa, ya, sb, ta, tb) in &cases {
            let a = random(&mut rng, dtype, sa, -1.0, 1.0);
            let b = random(&mut rng, dtype, sb, -1.0, 1.0);
            let op = Op::MatMul(MatMul {
                transpose_a: *ta,
                transpose_b: *tb,
            });
            let g = graph_of(
                &[
                    ("a", dtype, declared(sa, ya)),
                    ("b", dtype, declared(sb, &[])),
                ],
                |bld, i| bld.op(op.clone(), &[i[0], i[1]]).unwrap(),
            );
            let k = if *ta {
                sa[sa.len() - 2]
            } else {
                sa[sa.len() - 1]
            };
            let expected = to_tensor(&matmul_ref(&Nd::of(&a), &Nd::of(&b), *ta, *tb), dtype);
            check(
                &g,
                &[("a", &a), ("b", &b)],
                &[],
                &[expected],
                (k as f64).sqrt() * 4.0,
            );
        }
    }
}

#[test]
fn matmul_with_an_empty_inner_dim_is_zero() {
    let a = random(&mut Rng(12), DType::F32, &[3, 0], 0.0, 1.0);
    let b = random(&mut Rng(13), DType::F32, &[0, 2], 0.0, 1.0);
    let g = graph_of(
        &[
            ("a", DType::F32, declared(&[3, 0], &[])),
            ("b", DType::F32, declared(&[0, 2], &[])),
        ],
        |bld, i| bld.matmul(i[0], i[1]).unwrap(),
    );
    let expected = to_tensor(&Nd::new(&[3, 2], vec![0.0; 6]), DType::F32);
    check(&g, &[("a", &a), ("b", &b)], &[], &[expected], 1.0);
}

/// A matmul's bias add, activation and residual add, on every backend against their f64
/// values; the CPU runs each chain as one GEMM with that epilogue.
#[test]
fn fused_matmul_epilogues() {
    use rlx::backend::Backend;
    use rlx::cpu::CpuBackend;
    use rlx::ir::{BinaryOp, UnaryOp};
    let mut rng = Rng(14);
    /// `activation(a·b + bias) + residual`, each part optional.
    #[derive(Clone, Copy)]
    struct Epilogue {
        bias: bool,
        activation: Option<UnaryOp>,
        residual: bool,
    }
    // (a shape, a runtime dims, b shape, transpose_b, epilogue)
    type Case = (
        Vec<usize>,
        Vec<(usize, &'static str)>,
        Vec<usize>,
        bool,
        Epilogue,
    );
    let epilogue = |bias, activation, residual| Epilogue {
        bias,
        activation,
        residual,
    };
    let cases: Vec<Case> = vec![
        (
            vec![5, 7],
            vec![],
            vec![7, 3],
            false,
            epilogue(true, None, false),
        ),
        (
            vec![5, 7],
            vec![(0, "rows")],
            vec![3, 7],
            true,
            epilogue(true, Some(UnaryOp::Gelu), false),
        ),
        (
            vec![2, 6, 10],
            vec![(0, "b")],
            vec![10, 4],
            false,
            epilogue(true, None, true),
        ),
        (
            vec![70, 300],
            vec![],
            vec![300, 40],
            false,
            epilogue(true, Some(UnaryOp::Tanh), true),
        ),
        (
            vec![3, 9, 20],
            vec![],
            vec![3, 20, 35],
            false,
            epilogue(false, Some(UnaryOp::Relu), true),
        ),
        (
            vec![130, 20],
            vec![],
            vec![20, 200],
            false,
            epilogue(false, Some(UnaryOp::Silu), false),
        ),
    ];
    for dtype in FLOATS {
        for (sa, ya, sb, tb, ep) in &cases {
            let a = random(&mut rng, dtype, sa, -1.0, 1.0);
            let b = random(&mut rng, dtype, sb, -1.0, 1.0);
            let mut product = matmul_ref(&Nd::of(&a), &Nd::of(&b), false, *tb);
            let out_shape = product.shape.clone();
            let n = out_shape[out_shape.len() - 1];
            let mut inputs = vec![
                ("a", dtype, declared(sa, ya)),
                ("b", dtype, declared(sb, &[])),
            ];
            let mut values = vec![a, b];
            if ep.bias {
                let bias = random(&mut rng, dtype, &[n], -1.0, 1.0);
                let bn = Nd::of(&bias);
                for (i, v) in product.data.iter_mut().enumerate() {
                    *v += bn.data[i % n];
                }
                inputs.push(("bias", dtype, declared(&[n], &[])));
                values.push(bias);
            }
            if let Some(kind) = ep.activation {
                product = product.map(|v| crate::elementwise::unary_ref(kind, v));
            }
            if ep.residual {
                let residual = random(&mut rng, dtype, &out_shape, -1.0, 1.0);
                for (v, r) in product.data.iter_mut().zip(&Nd::of(&residual).data) {
                    *v += r;
                }
                inputs.push(("residual", dtype, declared(&out_shape, ya)));
                values.push(residual);
            }
            let product_op = Op::MatMul(MatMul {
                transpose_a: false,
                transpose_b: *tb,
            });
            let g = graph_of(&inputs, |bld, i| {
                let mut y = bld.op(product_op.clone(), &i[..2]).unwrap();
                let mut extra = i[2..].iter();
                if ep.bias {
                    y = bld
                        .binary(BinaryOp::Add, y, *extra.next().unwrap())
                        .unwrap();
                }
                if let Some(kind) = ep.activation {
                    y = bld.unary(kind, y).unwrap();
                }
                if ep.residual {
                    y = bld
                        .binary(BinaryOp::Add, y, *extra.next().unwrap())
                        .unwrap();
                }
                y
            });
            let mut attrs: Vec<&str> = Vec::new();
            attrs.extend(tb.then_some("transpose_b"));
            attrs.extend(ep.bias.then_some("+bias"));
            attrs.extend(ep.activation.map(|kind| kind.name()));
            attrs.extend(ep.residual.then_some("+residual"));
            let fused = format!("fused_matmul[{}]", attrs.join(", "));
            let lowered = CpuBackend::default()
                .compile(&g)
                .unwrap()
                .lowered()
                .to_string();
            assert!(lowered.contains(&fused), "{fused} in {lowered}");
            let k = sa[sa.len() - 1];
            let named: Vec<(&str, &rlx::tensor::HostTensor)> =
                inputs.iter().map(|(name, ..)| *name).zip(&values).collect();
            check(
                &g,
                &named,
                &[],
                &[to_tensor(&product, dtype)],
                (k as f64).sqrt() * 4.0,
            );
        }
    }
}

/// The CPU backend fuses a linear layer's bias, activation and residual into its matmul,
/// with the results of the unfused graph; a value the graph exposes stays unfused.
#[test]
fn fusion_pass_keeps_results_and_exposed_values() {
    use rlx::backend::{Backend, Executable};
    use rlx::builder::GraphBuilder;
    use rlx::cpu::{CpuBackend, CpuOptions};
    use rlx::ir::{BinaryOp, UnaryOp};
    let mut rng = Rng(15);
    let build = |expose_sum: bool| {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [12, 8]).unwrap();
        let w = b.param("w", DType::F32, [8, 16]).unwrap();
        let bias = b.param("bias", DType::F32, [16]).unwrap();
        let r = b.input("r", DType::F32, [12, 16]).unwrap();
        let y = b.matmul(x, w).unwrap();
        let y = b.binary(BinaryOp::Add, y, bias).unwrap();
        if expose_sum {
            b.output("sum", y).unwrap();
        }
        let y = b.unary(UnaryOp::Gelu, y).unwrap();
        let y = b.binary(BinaryOp::Add, r, y).unwrap();
        b.output("y", y).unwrap();
        b.finish().unwrap()
    };
    let x = random(&mut rng, DType::F32, &[12, 8], -1.0, 1.0);
    let r = random(&mut rng, DType::F32, &[12, 16], -1.0, 1.0);
    let w = random(&mut rng, DType::F32, &[8, 16], -1.0, 1.0);
    let bias = random(&mut rng, DType::F32, &[16], -1.0, 1.0);
    for expose_sum in [false, true] {
        let graph = build(expose_sum);
        let run = |options: CpuOptions| {
            let exe = CpuBackend::new(options).compile(&graph).unwrap();
            exe.set_weight("w", w.view()).unwrap();
            exe.set_weight("bias", bias.view()).unwrap();
            let out = exe.run(&[("x", x.view()), ("r", r.view())], &[]).unwrap();
            (exe.lowered().to_string(), out)
        };
        let (fused_text, fused) = run(CpuOptions::default());
        let (plain_text, plain) = run(CpuOptions {
            optimize: false,
            ..CpuOptions::default()
        });
        // An exposed sum ends the chain there: the gelu and the residual add stay outside
        // the matmul (as one elementwise chain).
        let expected = if expose_sum {
            "fused_matmul[+bias] "
        } else {
            "fused_matmul[+bias, gelu, +residual] "
        };
        assert!(fused_text.contains(expected), "{fused_text}");
        assert_eq!(
            fused_text.contains("fused_elementwise[gelu, add]"),
            expose_sum,
            "{fused_text}"
        );
        assert!(!plain_text.contains("fused_matmul"));
        for (f, p) in fused.iter().zip(&plain) {
            let (f, p) = (f.as_slice::<f32>().unwrap(), p.as_slice::<f32>().unwrap());
            for (a, b) in f.iter().zip(p) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
            }
        }
    }
}

#[test]
fn solve_batched_systems() {
    let mut rng = Rng(47);
    for dtype in [DType::F32, DType::F64] {
        let (batch, n, k) = (3, 4, 2);
        // Diagonally dominant, so well conditioned.
        let mut a = Nd::of(&random(&mut rng, DType::F64, &[batch, n, n], -1.0, 1.0));
        for b in 0..batch {
            for i in 0..n {
                a.data[(b * n + i) * n + i] += 5.0;
            }
        }
        let x_true = Nd::of(&random(&mut rng, DType::F64, &[batch, n, k], -1.0, 1.0));
        let mut rhs = Nd::new(&[batch, n, k], vec![0.0; batch * n * k]);
        for b in 0..batch {
            for i in 0..n {
                for j in 0..k {
                    rhs.data[(b * n + i) * k + j] = (0..n)
                        .map(|c| a.at(&[b, i, c]) * x_true.at(&[b, c, j]))
                        .sum();
                }
            }
        }
        let (at, bt) = (to_tensor(&a, dtype), to_tensor(&rhs, dtype));
        let g = graph_of(
            &[
                ("a", dtype, declared(&[batch, n, n], &[])),
                ("b", dtype, declared(&[batch, n, k], &[])),
            ],
            |bl, i| bl.op(Op::Solve, &[i[0], i[1]]).unwrap(),
        );
        check(
            &g,
            &[("a", &at), ("b", &bt)],
            &[],
            &[to_tensor(&x_true, dtype)],
            20.0,
        );
    }
    // A singular matrix is an error, not garbage.
    let g = graph_of(
        &[
            ("a", DType::F64, declared(&[2, 2], &[])),
            ("b", DType::F64, declared(&[2, 1], &[])),
        ],
        |bl, i| bl.op(Op::Solve, &[i[0], i[1]]).unwrap(),
    );
    let exe = CpuBackend::default().compile(&g).unwrap();
    let a = HostTensor::from_vec(vec![1.0f64, 2.0, 2.0, 4.0], [2, 2]).unwrap();
    let b = HostTensor::from_vec(vec![1.0f64, 1.0], [2, 1]).unwrap();
    let err = exe
        .run(&[("a", a.view()), ("b", b.view())], &[])
        .unwrap_err();
    assert!(
        matches!(err, RunError::Singular { at } if at.op == "solve"),
        "{err:?}"
    );
}

#[test]
fn quantized_matmul_4_and_8_bits() {
    let mut rng = Rng(48);
    for dtype in FLOATS {
        for (bits, group) in [(4u8, 32usize), (8, 64)] {
            let (rows, n, k) = (3, 5, 128);
            let (w, q) = random_packed(&mut rng, bits, n, k);
            let scales = random(&mut rng, dtype, &[n, k / group], 0.01, 0.1);
            let biases = random(&mut rng, dtype, &[n, k / group], -0.5, 0.5);
            let x = random(&mut rng, dtype, &[rows, k], -1.0, 1.0);
            let g = graph_of(
                &[
                    ("x", dtype, declared(&[rows, k], &[(0, "r")])),
                    ("w", DType::U8, declared(&[n, k * bits as usize / 8], &[])),
                    ("s", dtype, declared(&[n, k / group], &[])),
                    ("z", dtype, declared(&[n, k / group], &[])),
                ],
                |b, i| {
                    b.op(
                        Op::QuantizedMatMul(QuantizedMatMul {
                            bits,
                            group_size: group,
                        }),
                        i,
                    )
                    .unwrap()
                },
            );
            let (nx, ns, nz) = (Nd::of(&x), Nd::of(&scales), Nd::of(&biases));
            let data = indices(&[rows, n])
                .iter()
                .map(|o| {
                    (0..k)
                        .map(|j| {
                            let gi = j / group;
                            let deq = ns.at(&[o[1], gi]) * f64::from(q[o[1] * k + j])
                                + nz.at(&[o[1], gi]);
                            nx.at(&[o[0], j]) * deq
                        })
                        .sum()
                })
                .collect();
            check(
                &g,
                &[("x", &x), ("w", &w), ("s", &scales), ("z", &biases)],
                &[],
                &[to_tensor(&Nd::new(&[rows, n], data), dtype)],
                16.0,
            );
        }
    }
}

/// Group-affine rows dequantized on every backend and dtype as `scale · q + bias` in f64,
/// within one rounding; a scale of the wrong shape or a ragged row is a build error.
#[test]
fn dequantize_4_and_8_bits() {
    let mut rng = Rng(53);
    for dtype in FLOATS {
        for (bits, group) in [(4u8, 32usize), (8, 64), (4, 128)] {
            let (n, k) = (5, 128);
            let (w, q) = random_packed(&mut rng, bits, n, k);
            let scales = random(&mut rng, dtype, &[n, k / group], 0.01, 0.1);
            let biases = random(&mut rng, dtype, &[n, k / group], -0.5, 0.5);
            let g = graph_of(
                &[
                    ("w", DType::U8, declared(&[n, k * bits as usize / 8], &[])),
                    ("s", dtype, declared(&[n, k / group], &[])),
                    ("z", dtype, declared(&[n, k / group], &[])),
                ],
                |b, i| {
                    let op = Op::Dequantize(Dequantize {
                        bits,
                        group_size: group,
                    });
                    b.op(op, i).unwrap()
                },
            );
            let (ns, nz) = (Nd::of(&scales), Nd::of(&biases));
            let data = indices(&[n, k])
                .iter()
                .map(|o| {
                    let gi = o[1] / group;
                    ns.at(&[o[0], gi]) * f64::from(q[o[0] * k + o[1]]) + nz.at(&[o[0], gi])
                })
                .collect();
            check(
                &g,
                &[("w", &w), ("s", &scales), ("z", &biases)],
                &[],
                &[to_tensor(&Nd::new(&[n, k], data), dtype)],
                4.0,
            );
        }
    }
    let build = |row_bytes: usize, groups: usize| {
        let mut b = rlx::GraphBuilder::new();
        let w = b.input("w", DType::U8, [3, row_bytes]).unwrap();
        let s = b.input("s", DType::F32, [3, groups]).unwrap();
        let z = b.input("z", DType::F32, [3, groups]).unwrap();
        let op = Op::Dequantize(Dequantize {
            bits: 4,
            group_size: 32,
        });
        b.op(op, &[w, s, z]).map(|_| ()).map_err(|e| e.to_string())
    };
    assert!(build(32, 2).is_ok());
    assert!(build(32, 3).unwrap_err().contains("scales must have shape"));
    assert!(
        build(20, 2)
            .unwrap_err()
            .contains("not a multiple of group_size")
    );
}

/// `n` rows of `k` random `bits`-wide integers, packed low bits first, and the integers.
fn random_packed(rng: &mut Rng, bits: u8, n: usize, k: usize) -> (HostTensor, Vec<u8>) {
    let q: Vec<u8> = (0..n * k)
        .map(|_| rng.int(0, (1 << bits) - 1) as u8)
        .collect();
    let packed: Vec<u8> = if bits == 8 {
        q.clone()
    } else {
        q.chunks(2).map(|p| p[0] | (p[1] << 4)).collect()
    };
    let w = HostTensor::from_vec(packed, [n, k * bits as usize / 8]).unwrap();
    (w, q)
}

/// The activations' gradient of a product with group-affine weights against central
/// differences (the gradient table's check, every backend), for a batch of matrices and a
/// vector; the weights, their scales and biases stay fixed.
#[test]
fn gradient_quantized_matmul_activations() {
    let mut rng = Rng(54);
    for (seed, (bits, group, x_dims)) in [(4u8, 32usize, vec![2, 3, 64]), (8, 64, vec![64])]
        .into_iter()
        .enumerate()
    {
        let (n, k) = (5, 64);
        let (w, _) = random_packed(&mut rng, bits, n, k);
        let bytes: Vec<u8> = w.to_f64_vec().iter().map(|b| *b as u8).collect();
        let groups = k / group;
        let scales: Vec<f64> = (0..n * groups).map(|_| rng.uniform(0.01, 0.1)).collect();
        let biases: Vec<f64> = (0..n * groups).map(|_| rng.uniform(-0.5, 0.5)).collect();
        let inputs = [
            Input::float("x", &x_dims),
            Input::bytes("w", &[n, k * bits as usize / 8], bytes),
            Input::fixed("s", &[n, groups], scales),
            Input::fixed("z", &[n, groups], biases),
        ];
        let label = format!("quantized_matmul bits={bits} group={group} x={x_dims:?}");
        grad_check(&label, 500 + seed as u64, &inputs, &|g, i| {
            let q = Op::QuantizedMatMul(QuantizedMatMul {
                bits,
                group_size: group,
            });
            op(g, q, i)
        });
    }
}

/// Weights in GGUF block formats, read in place: each format, batches of decoding size (1 to
/// 8 rows: on a CUDA GPU, RLX's kernel for few rows) and of prompt size (the CPU's two
/// paths; prompts of up to 256 rows and longer ones, whose tiles go through the GEMM
/// transposed and not), more output features than one tile
/// (200: three transposed tiles of 72, which two threads take as six of 36, the last one
/// partial; four plain tiles of 64), against the product with the weights dequantized in
/// f64 as llama.cpp defines them.
#[test]
fn block_matmul_every_format_and_batch_size() {
    let mut rng = Rng(49);
    for format in BLOCK_FORMATS {
        for rows in [1usize, 3, 8, 20, 300] {
            let (n, k) = (200, 2 * format.block_values().max(48));
            let bytes = random_blocks(format, n * k / format.block_values(), || {
                rng.uniform(0.0, 1.0)
            });
            let row_bytes = k / format.block_values() * format.block_bytes();
            let mut dense = vec![0f64; n * k];
            for (row, out) in bytes.chunks(row_bytes).zip(dense.chunks_mut(k)) {
                rlx::gguf::dequantize_f64(format, row, out).unwrap();
            }
            let w = HostTensor::from_vec(bytes, [n, row_bytes]).unwrap();
            let x = random(&mut rng, DType::F32, &[rows, k], -1.0, 1.0);
            let g = graph_of(
                &[
                    ("x", DType::F32, declared(&[rows, k], &[(0, "r")])),
                    ("w", DType::U8, declared(&[n, row_bytes], &[])),
                ],
                |b, i| {
                    b.op(Op::BlockMatMul(BlockMatMul::exact(format)), i)
                        .unwrap()
                },
            );
            let nx = Nd::of(&x);
            let data = indices(&[rows, n])
                .iter()
                .map(|o| {
                    (0..k)
                        .map(|j| nx.at(&[o[0], j]) * dense[o[1] * k + j])
                        .sum()
                })
                .collect();
            check(
                &g,
                &[("x", &x), ("w", &w)],
                &[],
                &[to_tensor(&Nd::new(&[rows, n], data), DType::F32)],
                16.0,
            );
        }
    }
}

/// Block products of one input are computed by one CPU kernel (`joined_block_matmul`, each
/// member into its own output) when nothing reads an earlier member before the last one
/// runs; the results are those of the products computed one by one, bit for bit, for every
/// format, both activation precisions, few rows (one kernel over every member's features,
/// split between threads inside a member) and many (member by member), also when the last
/// member has no features.
#[test]
fn block_products_of_one_input_join() {
    use rlx::builder::GraphBuilder;
    use rlx::cpu::CpuOptions;
    use rlx::ir::UnaryOp;
    let mut rng = Rng(51);
    let k = 512;
    // The second set ends in a product of no features: the joined kernel still runs.
    for (format, widths) in BLOCK_FORMATS
        .into_iter()
        .flat_map(|f| [(f, [40usize, 24, 56]), (f, [16, 32, 0])])
    {
        let row_bytes = k / format.block_values() * format.block_bytes();
        let weights: Vec<HostTensor> = widths
            .iter()
            .map(|&n| {
                let bytes = random_blocks(format, n * k / format.block_values(), || {
                    rng.uniform(0.0, 1.0)
                });
                HostTensor::from_vec(bytes, [n, row_bytes]).unwrap()
            })
            .collect();
        for activations in [ActivationPrecision::Exact, ActivationPrecision::Int8] {
            for rows in [1usize, 3, 17] {
                // `interleaved`: the first product is read (by a relu) before the second
                // is built, so only the second and third join.
                let build = |interleaved: bool| {
                    let mut b = GraphBuilder::new();
                    let x = b.input("x", DType::F32, [rows, k]).unwrap();
                    let op = Op::BlockMatMul(BlockMatMul {
                        format,
                        activations,
                    });
                    for (i, &n) in widths.iter().enumerate() {
                        let w = b
                            .param(&format!("w{i}"), DType::U8, [n, row_bytes])
                            .unwrap();
                        let y = b.op(op.clone(), &[x, w]).unwrap();
                        let y = if interleaved && i == 0 {
                            b.unary(UnaryOp::Relu, y).unwrap()
                        } else {
                            y
                        };
                        b.output(&format!("y{i}"), y).unwrap();
                    }
                    b.finish().unwrap()
                };
                let x = random(&mut rng, DType::F32, &[rows, k], -1.0, 1.0);
                for interleaved in [false, true] {
                    let graph = build(interleaved);
                    let run = |optimize: bool| {
                        let options = CpuOptions {
                            optimize,
                            threads: 3,
                            ..CpuOptions::default()
                        };
                        let exe = CpuBackend::new(options).compile(&graph).unwrap();
                        for (i, w) in weights.iter().enumerate() {
                            exe.set_weight(&format!("w{i}"), w.view()).unwrap();
                        }
                        let out = exe.run(&[("x", x.view())], &[]).unwrap();
                        (exe.lowered().to_string(), out)
                    };
                    let (joined_text, joined) = run(true);
                    let (_, plain) = run(false);
                    let label = format!(
                        "{} {activations:?} rows={rows} interleaved={interleaved}",
                        format.name()
                    );
                    let members = joined_text
                        .lines()
                        .find(|l| l.contains("joined_block_matmul"))
                        .map(|l| l.matches('%').count() - 2);
                    assert_eq!(
                        members,
                        Some(if interleaved { 2 } else { 3 }),
                        "{label}: {joined_text}"
                    );
                    for (j, p) in joined.iter().zip(&plain) {
                        let (j, p) = (j.as_slice::<f32>().unwrap(), p.as_slice::<f32>().unwrap());
                        for (a, b) in j.iter().zip(p) {
                            assert_eq!(a.to_bits(), b.to_bits(), "{label}: {a} vs {b}");
                        }
                    }
                }
            }
        }
    }
}

/// Int8 activations on every backend (the CPU's integer kernels for up to 27 rows, its
/// exact tiles for more, MLX's exact product), judged by the op's own bound against the f64
/// product; and the CPU's integer kernels against the product of the activations quantized
/// as `ActivationPrecision::Int8` defines it (per block of 32, scale `max|x| / 127` in f32,
/// ties to even), up to float rounding. 40 features: from 16 rows the kernels go over the
/// features in groups of 32, so the last group is a short one.
#[test]
fn block_matmul_int8_activations_within_their_bound() {
    let mut rng = Rng(50);
    for format in BLOCK_FORMATS {
        for rows in [1usize, 2, 5, 20, 27, 40] {
            let (n, k) = (40, 2 * format.block_values().max(64));
            let w = random_blocks(format, n * k / format.block_values(), || {
                rng.uniform(0.0, 1.0)
            });
            let row_bytes = k / format.block_values() * format.block_bytes();
            let w = HostTensor::from_vec(w, [n, row_bytes]).unwrap();
            let x = random(&mut rng, DType::F32, &[rows, k], -3.0, 3.0);
            let op = Op::BlockMatMul(
                BlockMatMul::exact(format).with_activations(ActivationPrecision::Int8),
            );
            let g = graph_of(
                &[
                    ("x", DType::F32, declared(&[rows, k], &[])),
                    ("w", DType::U8, declared(&[n, row_bytes], &[])),
                ],
                |b, i| b.op(op.clone(), i).unwrap(),
            );
            let widen =
                |t: &HostTensor| HostTensor::from_vec(t.to_f64_vec(), t.shape().to_vec()).unwrap();
            let operands = [widen(&x), widen(&w)];
            let want = rlx::ir::evaluate_reference(&g, &[("x", &x), ("w", &w)], &[], &[]).unwrap()
                [0]
            .to_f64_vec();
            let tolerance = op.tolerance(&operands, DType::F32);
            let mut dense = vec![0f64; n * k];
            for (row, out) in w
                .as_slice::<u8>()
                .unwrap()
                .chunks(row_bytes)
                .zip(dense.chunks_mut(k))
            {
                rlx::gguf::dequantize_f64(format, row, out).unwrap();
            }
            let quantized: Vec<f64> = x
                .as_slice::<f32>()
                .unwrap()
                .chunks(32)
                .flat_map(|block| {
                    let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let step = amax / 127.0;
                    let inverse = if step == 0.0 { 0.0 } else { 1.0 / step };
                    block
                        .iter()
                        .map(move |v| f64::from((v * inverse).round_ties_even()) * f64::from(step))
                })
                .collect();
            crate::on_every_backend!(label, backend => {
                let exe = backend.compile(&g).unwrap();
                let out = exe.run(&[("x", x.view()), ("w", w.view())], &[]).unwrap();
                let have = out[0].to_f64_vec();
                for (i, (have, want)) in have.iter().zip(&want).enumerate() {
                    assert_eq!(
                        tolerance.accepts(*want, *have),
                        Judgement::Agrees,
                        "{label} {} rows={rows} [{i}]: {have} against {want} ({tolerance})",
                        format.name()
                    );
                }
                if label.starts_with("cpu") && rows < 28 {
                    for (i, have) in have.iter().enumerate() {
                        let (r, f) = (i / n, i % n);
                        let terms = (0..k).map(|j| quantized[r * k + j] * dense[f * k + j]);
                        let size: f64 = terms.clone().map(f64::abs).sum();
                        let want: f64 = terms.sum();
                        assert!(
                            (have - want).abs() <= 1e-6 * size + 1e-9,
                            "{label} {} rows={rows} [{i}]: {have} against int8's {want}",
                            format.name()
                        );
                    }
                }
            });
        }
    }
}

/// The activations' gradient of a product with blocks is `g · dequant(w)` on every backend
/// (int8 activations too: their rounding is taken as the identity), for a matrix and a
/// vector of activations; the weight's bytes take none.
#[test]
fn block_matmul_activation_gradient_every_format() {
    let mut rng = Rng(52);
    for format in BLOCK_FORMATS {
        for (rows, activations) in [
            (Some(3usize), ActivationPrecision::Exact),
            (None, ActivationPrecision::Int8),
        ] {
            let (n, k) = (5, format.block_values());
            let bytes = random_blocks(format, n, || rng.uniform(0.0, 1.0));
            let row_bytes = format.block_bytes();
            let mut dense = vec![0f64; n * k];
            rlx::gguf::dequantize_f64(format, &bytes, &mut dense).unwrap();
            let lead: Vec<usize> = rows.into_iter().collect();
            let x_dims: Vec<usize> = lead.iter().copied().chain([k]).collect();
            let c_dims: Vec<usize> = lead.iter().copied().chain([n]).collect();
            let mut b = rlx::GraphBuilder::new();
            let x = b.input("x", DType::F32, &x_dims[..]).unwrap();
            let c = b.input("c", DType::F32, &c_dims[..]).unwrap();
            let w = b.param("w", DType::U8, [n, row_bytes]).unwrap();
            let op = BlockMatMul::exact(format).with_activations(activations);
            let y = b.op(Op::BlockMatMul(op), &[x, w]).unwrap();
            let weighted = b.mul(y, c).unwrap();
            let axes: Vec<usize> = (0..c_dims.len()).collect();
            let loss = b
                .reduce(rlx::ir::ReduceOp::Sum, weighted, &axes, false)
                .unwrap();
            b.output("loss", loss).unwrap();
            let forward = b.finish().unwrap();
            let wrt = rlx::autodiff::Wrt::Named(vec!["x".into()]);
            let g = rlx::autodiff::gradients(&forward, "loss", &wrt).unwrap();
            let x_t = random(&mut rng, DType::F32, &x_dims, -1.0, 1.0);
            let c_t = random(&mut rng, DType::F32, &c_dims, -1.0, 1.0);
            let w_t = HostTensor::from_vec(bytes, [n, row_bytes]).unwrap();
            let cs = c_t.to_f64_vec();
            let rows = rows.unwrap_or(1);
            let want: Vec<f64> = (0..rows * k)
                .map(|i| {
                    let (r, j) = (i / k, i % k);
                    (0..n).map(|f| cs[r * n + f] * dense[f * k + j]).sum()
                })
                .collect();
            crate::on_every_backend!(label, backend => {
                let exe = backend.compile(&g).unwrap();
                exe.set_weight("w", w_t.view()).unwrap();
                let out = exe.run(&[("x", x_t.view()), ("c", c_t.view())], &[]).unwrap();
                let dx = out[1].to_f64_vec();
                assert_eq!(out[1].shape(), &x_dims[..], "{label}");
                for (i, (have, want)) in dx.iter().zip(&want).enumerate() {
                    let size: f64 = (0..n).map(|f| (cs[(i / k) * n + f] * dense[f * k + i % k]).abs()).sum();
                    assert!(
                        (have - want).abs() <= 1e-5 * size + 1e-7,
                        "{label} {} [{i}]: {have} against {want}",
                        format.name()
                    );
                }
            });
        }
    }
}

/// Rows of blocks dequantized on every backend as the f64 definition does, exactly but
/// for the one rounding of `d * q + m`; other formats and ragged rows are build errors.
#[test]
fn block_dequantize_every_format() {
    let mut rng = Rng(51);
    for format in BLOCK_FORMATS {
        let (rows, blocks) = (6, 3);
        let bytes = random_blocks(format, rows * blocks, || rng.uniform(0.0, 1.0));
        let mut dense = vec![0f64; rows * blocks * format.block_values()];
        rlx::gguf::dequantize_f64(format, &bytes, &mut dense).unwrap();
        let row_bytes = blocks * format.block_bytes();
        let w = HostTensor::from_vec(bytes, [2, 3, row_bytes]).unwrap();
        let g = graph_of(
            &[("w", DType::U8, declared(&[2, 3, row_bytes], &[]))],
            |b, i| {
                b.op(Op::BlockDequantize(BlockDequantize { format }), i)
                    .unwrap()
            },
        );
        let expected = HostTensor::from_vec(
            dense.iter().map(|v| *v as f32).collect::<Vec<_>>(),
            [2, 3, blocks * format.block_values()],
        )
        .unwrap();
        check(&g, &[("w", &w)], &[], &[expected], 1.0);
    }
    let build = |format, row_bytes: usize| {
        let mut b = rlx::GraphBuilder::new();
        let w = b.input("w", DType::U8, [3, row_bytes]).unwrap();
        b.op(Op::BlockDequantize(BlockDequantize { format }), &[w])
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert!(build(GgmlType::Q4_0, 36).is_ok());
    assert!(
        build(GgmlType::Q4_0, 35)
            .unwrap_err()
            .contains("whole Q4_0 blocks")
    );
    assert!(build(GgmlType::Q8K, 292).unwrap_err().contains("Q8_K"));
}

/// Formats the product does not take, and weights of the wrong width, are build errors.
#[test]
fn block_matmul_refuses_other_formats_and_widths() {
    let build = |format, row_bytes: usize| {
        let mut b = rlx::GraphBuilder::new();
        let x = b.input("x", DType::F32, [2, 64]).unwrap();
        let w = b.param("w", DType::U8, [3, row_bytes]).unwrap();
        b.op(Op::BlockMatMul(BlockMatMul::exact(format)), &[x, w])
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert!(build(GgmlType::Q8_0, 68).is_ok());
    assert!(
        build(GgmlType::Q8_0, 67)
            .unwrap_err()
            .contains("68 bytes per row")
    );
    assert!(build(GgmlType::Q8K, 292).unwrap_err().contains("Q8_K"));
    assert!(
        build(GgmlType::Q4K, 144)
            .unwrap_err()
            .contains("not a multiple of the 256-value block")
    );
}

#[test]
fn gradient_matmul_every_transpose_with_batch_broadcast() {
    for (seed, (ta, tb)) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let a_dims = if ta { [2, 4, 3] } else { [2, 3, 4] };
        let b_dims = if tb { [5, 4] } else { [4, 5] };
        let a = Input::float("a", &a_dims).symbolic(0, "batch");
        let b = Input::float("b", &b_dims);
        let label = format!("matmul ta={ta} tb={tb}");
        grad_check(&label, 300 + seed as u64, &[a, b], &|g, i| {
            let m = Op::MatMul(MatMul {
                transpose_a: ta,
                transpose_b: tb,
            });
            op(g, m, &[i[0], i[1]])
        });
    }
}

#[test]
fn gradient_solve() {
    // A well-conditioned system: diagonal 3 plus noise.
    let a: Vec<f64> = (0..9)
        .map(|k| {
            if k % 4 == 0 {
                3.0
            } else {
                0.1 * k as f64 - 0.4
            }
        })
        .collect();
    let a = Input::exact("a", &[3, 3], a);
    let b = Input::float("b", &[3, 2]);
    grad_check("solve", 400, &[a, b], &|g, i| {
        op(g, Op::Solve, &[i[0], i[1]])
    });
}

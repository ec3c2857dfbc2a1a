//! Products with a matrix chosen per pair (`gather_matmul`) and their transpose
//! (`scatter_matmul`), the mixture-of-experts primitives: values, gradients, errors.

use rlx::backend::{Backend, Executable, RunError};
use rlx::builder::GraphBuilder;
use rlx::ir::{DType, GatherMatMul, Op, ScatterMatMul};
use rlx::tensor::HostTensor;

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, random, to_tensor};

/// Pairs `[t, s]` choosing among `groups`, each index drawn independently (repeats,
/// unused matrices and matrices every pair picks all occur).
fn routes(rng: &mut Rng, index: DType, dims: &[usize], groups: usize) -> HostTensor {
    random(rng, index, dims, 0.0, groups as f64 - 1.0)
}

/// Pair `p`'s row of `x` (`s` pairs per token, rows per token when `shared`).
fn row(x: &Nd, p: usize, s: usize, shared: bool) -> Vec<f64> {
    let k = x.shape[x.shape.len() - 1];
    let r = if shared { p / s } else { p };
    x.data[r * k..(r + 1) * k].to_vec()
}

/// `w[e]` as a `k x n` matrix, read from `[E, N, K]` when `transposed`.
fn matrix(w: &Nd, e: usize, transposed: bool) -> impl Fn(usize, usize) -> f64 + '_ {
    let (a, b) = (w.shape[1], w.shape[2]);
    move |i, j| {
        if transposed {
            w.data[(e * a + j) * b + i]
        } else {
            w.data[(e * a + i) * b + j]
        }
    }
}

fn gather_matmul_ref(x: &Nd, w: &Nd, idx: &Nd, transpose_b: bool) -> Nd {
    let (pairs, s) = (idx.data.len(), idx.shape[idx.shape.len() - 1]);
    let shared = x.shape.len() == idx.shape.len();
    let k = x.shape[x.shape.len() - 1];
    let n = if transpose_b { w.shape[1] } else { w.shape[2] };
    let mut data = Vec::new();
    for p in 0..pairs {
        let (r, m) = (
            row(x, p, s, shared),
            matrix(w, idx.data[p] as usize, transpose_b),
        );
        data.extend((0..n).map(|j| (0..k).map(|i| r[i] * m(i, j)).sum::<f64>()));
    }
    let mut shape = idx.shape.clone();
    shape.push(n);
    Nd::new(&shape, data)
}

fn scatter_matmul_ref(x: &Nd, g: &Nd, idx: &Nd, groups: usize, transpose: bool) -> Nd {
    let (pairs, s) = (idx.data.len(), idx.shape[idx.shape.len() - 1]);
    let shared = x.shape.len() == idx.shape.len();
    let (k, n) = (x.shape[x.shape.len() - 1], g.shape[g.shape.len() - 1]);
    let mut data = vec![0.0; groups * k * n];
    for p in 0..pairs {
        let e = idx.data[p] as usize;
        for (i, a) in row(x, p, s, shared).into_iter().enumerate() {
            for j in 0..n {
                let at = if transpose { j * k + i } else { i * n + j };
                data[e * k * n + at] += a * g.data[p * n + j];
            }
        }
    }
    let shape = if transpose {
        [groups, n, k]
    } else {
        [groups, k, n]
    };
    Nd::new(&shape, data)
}

/// Rows per token and per pair, both weight layouts, both index types, every float dtype,
/// the token count symbolic; then enough pairs to sort into blocks on two threads.
#[test]
fn gather_matmul_variants() {
    let mut rng = Rng(71);
    let mut cases = Vec::new();
    for dtype in FLOATS {
        cases.push((dtype, 5, 2, 4, 6, 3));
    }
    cases.push((DType::F32, 1, 1, 8, 5, 4));
    cases.push((DType::F32, 150, 4, 40, 33, 6));
    for (dtype, tokens, s, k, n, groups) in cases {
        for (shared, transpose_b, index) in [
            (true, true, DType::I64),
            (false, false, DType::I32),
            (true, false, DType::I32),
            (false, true, DType::I64),
        ] {
            let x_dims = if shared {
                vec![tokens, k]
            } else {
                vec![tokens, s, k]
            };
            let w_dims = if transpose_b {
                [groups, n, k]
            } else {
                [groups, k, n]
            };
            let x = random(&mut rng, dtype, &x_dims, -1.0, 1.0);
            let w = random(&mut rng, dtype, &w_dims, -1.0, 1.0);
            let idx = routes(&mut rng, index, &[tokens, s], groups);
            let g = graph_of(
                &[
                    ("x", dtype, declared(&x_dims, &[(0, "t")])),
                    ("w", dtype, declared(&w_dims, &[])),
                    ("idx", index, declared(&[tokens, s], &[(0, "t")])),
                ],
                |b, i| {
                    let product = Op::GatherMatMul(GatherMatMul { transpose_b });
                    b.op(product, i).unwrap()
                },
            );
            let want = gather_matmul_ref(&Nd::of(&x), &Nd::of(&w), &Nd::of(&idx), transpose_b);
            check(
                &g,
                &[("x", &x), ("w", &w), ("idx", &idx)],
                &[("t", tokens)],
                &[to_tensor(&want, dtype)],
                4.0,
            );
        }
    }
}

#[test]
fn scatter_matmul_variants() {
    let mut rng = Rng(72);
    let mut cases = Vec::new();
    for dtype in FLOATS {
        cases.push((dtype, 5, 2, 4, 6, 3));
    }
    cases.push((DType::F32, 150, 4, 40, 33, 6));
    for (dtype, tokens, s, k, n, groups) in cases {
        for (shared, transpose, index) in [
            (true, true, DType::I64),
            (false, false, DType::I32),
            (true, false, DType::I64),
            (false, true, DType::I32),
        ] {
            let x_dims = if shared {
                vec![tokens, k]
            } else {
                vec![tokens, s, k]
            };
            let x = random(&mut rng, dtype, &x_dims, -1.0, 1.0);
            let dy = random(&mut rng, dtype, &[tokens, s, n], -1.0, 1.0);
            // Matrix `groups - 1` is never picked: its block must come out zero.
            let idx = routes(&mut rng, index, &[tokens, s], groups - 1);
            let g = graph_of(
                &[
                    ("x", dtype, declared(&x_dims, &[(0, "t")])),
                    ("dy", dtype, declared(&[tokens, s, n], &[(0, "t")])),
                    ("idx", index, declared(&[tokens, s], &[(0, "t")])),
                ],
                |b, i| {
                    let product = Op::ScatterMatMul(ScatterMatMul { groups, transpose });
                    b.op(product, i).unwrap()
                },
            );
            let want =
                scatter_matmul_ref(&Nd::of(&x), &Nd::of(&dy), &Nd::of(&idx), groups, transpose);
            check(
                &g,
                &[("x", &x), ("dy", &dy), ("idx", &idx)],
                &[("t", tokens)],
                &[to_tensor(&want, dtype)],
                4.0,
            );
        }
    }
}

/// Ranks, dtypes and dims that do not fit the pairs are build errors.
#[test]
fn gathered_products_reject_mismatched_operands() {
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, [5, 4]).unwrap();
    let per_pair = g.input("per_pair", DType::F32, [5, 2, 4]).unwrap();
    let w = g.input("w", DType::F32, [3, 4, 6]).unwrap();
    let w_half = g.input("w_half", DType::F16, [3, 4, 6]).unwrap();
    let idx = g.input("idx", DType::I64, [5, 2]).unwrap();
    let float_idx = g.input("float_idx", DType::F32, [5, 2]).unwrap();
    let other_tokens = g.input("other_tokens", DType::I64, [4, 2]).unwrap();
    let symbolic_groups = g
        .input(
            "symbolic_groups",
            DType::F32,
            [rlx::ir::Dim::sym("e"), 4.into(), 6.into()],
        )
        .unwrap();
    let gather = |transpose_b| Op::GatherMatMul(GatherMatMul { transpose_b });
    assert!(g.op(gather(false), &[x, w, idx]).is_ok());
    assert!(g.op(gather(false), &[per_pair, w, idx]).is_ok());
    // [3, 4, 6] read as [E, N, K] has K = 6.
    assert!(g.op(gather(true), &[x, w, idx]).is_err());
    assert!(g.op(gather(false), &[x, w_half, idx]).is_err());
    assert!(g.op(gather(false), &[x, w, float_idx]).is_err());
    assert!(g.op(gather(false), &[x, w, other_tokens]).is_err());
    assert!(g.op(gather(false), &[x, symbolic_groups, idx]).is_err());
    assert!(g.op(gather(false), &[x, w]).is_err());
    let dy = g.input("dy", DType::F32, [5, 2, 6]).unwrap();
    let dy_flat = g.input("dy_flat", DType::F32, [5, 6]).unwrap();
    let scatter = Op::ScatterMatMul(ScatterMatMul {
        groups: 3,
        transpose: false,
    });
    let out = g.op(scatter.clone(), &[x, dy, idx]).unwrap();
    assert_eq!(g.ty(out).unwrap().shape, [3, 4, 6].into());
    assert!(g.op(scatter.clone(), &[x, dy_flat, idx]).is_err());
    assert!(g.op(scatter, &[x, dy, other_tokens]).is_err());
}

#[test]
fn gathered_product_indices_out_of_range_are_errors() {
    let g = graph_of(
        &[
            ("x", DType::F32, declared(&[2, 4], &[])),
            ("w", DType::F32, declared(&[3, 4, 5], &[])),
            ("i", DType::I64, declared(&[2, 2], &[])),
        ],
        |b, i| {
            let product = Op::GatherMatMul(GatherMatMul { transpose_b: false });
            b.op(product, i).unwrap()
        },
    );
    let scatter = graph_of(
        &[
            ("x", DType::F32, declared(&[2, 4], &[])),
            ("dy", DType::F32, declared(&[2, 2, 5], &[])),
            ("i", DType::I64, declared(&[2, 2], &[])),
        ],
        |b, i| {
            let product = Op::ScatterMatMul(ScatterMatMul {
                groups: 3,
                transpose: false,
            });
            b.op(product, i).unwrap()
        },
    );
    crate::on_every_backend!(label, backend => {
        out_of_range_on(label, &backend, &g, ("w", [3, 4, 5].as_slice()), "gather_matmul");
        out_of_range_on(label, &backend, &scatter, ("dy", [2, 2, 5].as_slice()), "scatter_matmul");
    });
}

fn out_of_range_on<B: Backend>(
    label: &str,
    backend: &B,
    g: &rlx::ir::Graph,
    (second, dims): (&str, &[usize]),
    name: &str,
) {
    let exe = backend.compile(g).unwrap();
    let x = HostTensor::zeros(DType::F32, [2, 4]);
    let other = HostTensor::zeros(DType::F32, dims.to_vec());
    for bad in [3i64, -1] {
        let i = HostTensor::from_vec(vec![0i64, 1, bad, 2], [2, 2]).unwrap();
        let err = exe
            .run(
                &[("x", x.view()), (second, other.view()), ("i", i.view())],
                &[],
            )
            .unwrap_err();
        let RunError::IndexOutOfRange { at, index, size } = &err else {
            panic!("{label}: {err:?}");
        };
        assert_eq!((at.op, *index, *size), (name, bad, 3), "{label}");
    }
}

/// Gradients of rows, matrices and cotangents, rows per token and per pair, both layouts
/// (the second derivatives come from the same two ops).
#[test]
fn gradient_gathered_products() {
    let idx = || Input::indices("idx", &[3, 2], vec![1, 0, 2, 2, 0, 1]);
    for (seed, (shared, transposed)) in [(true, true), (false, false), (true, false), (false, true)]
        .into_iter()
        .enumerate()
    {
        let x_dims: &[usize] = if shared { &[3, 4] } else { &[3, 2, 4] };
        let w_dims = if transposed { [3, 5, 4] } else { [3, 4, 5] };
        let inputs = [Input::float("x", x_dims), Input::float("w", &w_dims), idx()];
        grad_check(
            &format!("gather_matmul shared={shared} transpose_b={transposed}"),
            700 + seed as u64,
            &inputs,
            &|g, i| {
                op(
                    g,
                    Op::GatherMatMul(GatherMatMul {
                        transpose_b: transposed,
                    }),
                    i,
                )
            },
        );
        let inputs = [
            Input::float("x", x_dims),
            Input::float("dy", &[3, 2, 5]),
            idx(),
        ];
        grad_check(
            &format!("scatter_matmul shared={shared} transpose={transposed}"),
            710 + seed as u64,
            &inputs,
            &|g, i| {
                op(
                    g,
                    Op::ScatterMatMul(ScatterMatMul {
                        groups: 4,
                        transpose: transposed,
                    }),
                    i,
                )
            },
        );
    }
}

/// A token routed twice to the same matrix: both pairs read (and send gradient through) it.
#[test]
fn repeated_routes_add_up() {
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [1, 2]).unwrap();
    let w =
        HostTensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 2.0], [2, 2, 2]).unwrap();
    let idx = HostTensor::from_vec(vec![1i64, 1], [1, 2]).unwrap();
    let g = graph_of(
        &[
            ("x", DType::F32, declared(&[1, 2], &[])),
            ("w", DType::F32, declared(&[2, 2, 2], &[])),
            ("idx", DType::I64, declared(&[1, 2], &[])),
        ],
        |b, i| {
            let product = Op::GatherMatMul(GatherMatMul { transpose_b: false });
            b.op(product, i).unwrap()
        },
    );
    let want = HostTensor::from_vec(vec![2.0f32, 4.0, 2.0, 4.0], [1, 2, 2]).unwrap();
    check(
        &g,
        &[("x", &x), ("w", &w), ("idx", &idx)],
        &[],
        &[want],
        1.0,
    );
}

/// The routing of a mixture end to end: softmax of the router's logits, the top 2 of 4
/// experts per token, their weights renormalized, each token through its experts'
/// matrices, mixed by the weights. Gradients reach the logits (through the kept
/// probabilities), the tokens and the experts.
#[test]
fn gradient_routing_through_experts() {
    use rlx::ir::{ReduceOp, SortOutput, TopK};
    let inputs = [
        Input::float("logits", &[3, 4]).range(-1.5, 1.5),
        Input::float("x", &[3, 5]),
        Input::float("w", &[4, 6, 5]),
    ];
    for normalize in [false, true] {
        grad_check(
            &format!("routing normalize={normalize}"),
            720 + u64::from(normalize),
            &inputs,
            &|g, i| {
                let probs = g.softmax(i[0], 1).unwrap();
                let top = |output| {
                    Op::TopK(TopK {
                        k: 2,
                        axis: 1,
                        output,
                    })
                };
                let weights = op(g, top(SortOutput::Values), &[probs]);
                let experts = op(g, top(SortOutput::Indices), &[probs]);
                let weights = if normalize {
                    let total = g.reduce(ReduceOp::Sum, weights, &[1], true).unwrap();
                    g.binary(rlx::ir::BinaryOp::Div, weights, total).unwrap()
                } else {
                    weights
                };
                let routed = op(
                    g,
                    Op::GatherMatMul(GatherMatMul { transpose_b: true }),
                    &[i[1], i[2], experts],
                );
                let weights = g.reshape(weights, [3, 2, 1]).unwrap();
                let mixed = g.mul(routed, weights).unwrap();
                g.reduce(ReduceOp::Sum, mixed, &[1], false).unwrap()
            },
        );
    }
}

//! Layer and RMS norm, and the group and batch norm functions built from other ops.

use half::{bf16, f16};
use rlx::ir::{DType, Graph, LayerNorm, Op, RmsNorm};
use rlx::typed::{Const, Float, Tensor, build};

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, indices, random, to_tensor};

#[test]
fn layer_norm_and_rms_norm() {
    let mut rng = Rng(26);
    for dtype in FLOATS {
        for (rms, has_weight, has_bias) in [
            (false, true, true),
            (false, false, false),
            (false, true, false),
            (true, true, false),
            (true, false, false),
        ] {
            let (rows, features) = (6, 33);
            let x = random(&mut rng, dtype, &[2, 3, features], -3.0, 3.0);
            let w = random(&mut rng, dtype, &[features], 0.5, 1.5);
            let bias = random(&mut rng, dtype, &[features], -1.0, 1.0);
            let eps = 1e-5;
            let mut inputs = vec![(
                "x",
                dtype,
                declared(&[2, 3, features], &[(0, "b"), (1, "s")]),
            )];
            if has_weight {
                inputs.push(("w", dtype, declared(&[features], &[])));
            }
            if has_bias {
                inputs.push(("bias", dtype, declared(&[features], &[])));
            }
            let op = if rms {
                Op::RmsNorm(RmsNorm { eps, has_weight })
            } else {
                Op::LayerNorm(LayerNorm {
                    eps,
                    has_weight,
                    has_bias,
                })
            };
            let g = graph_of(&inputs, |b, i| b.op(op.clone(), i).unwrap());
            let (xv, wv, bv) = (x.to_f64_vec(), w.to_f64_vec(), bias.to_f64_vec());
            let mut out = Vec::new();
            for r in 0..rows {
                let row = &xv[r * features..(r + 1) * features];
                let mean = if rms {
                    0.0
                } else {
                    row.iter().sum::<f64>() / features as f64
                };
                let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / features as f64;
                for (j, v) in row.iter().enumerate() {
                    let mut y = (v - mean) / (var + eps).sqrt();
                    if has_weight {
                        y *= wv[j];
                    }
                    if has_bias {
                        y += bv[j];
                    }
                    out.push(y);
                }
            }
            let expected = to_tensor(&Nd::new(&[2, 3, features], out), dtype);
            let mut given = vec![("x", &x)];
            if has_weight {
                given.push(("w", &w));
            }
            if has_bias {
                given.push(("bias", &bias));
            }
            check(&g, &given, &[], &[expected], 8.0);
        }
    }
}

type N = Const<2>;

type C = Const<6>;

fn group_norm_graph<E: Float>() -> Graph {
    rlx::dims!(Batch);
    build(|g| {
        let x: Tensor<(Batch, C, Const<3>, Const<4>), E> = g.input("x");
        let (w, b): (Tensor<(C,), E>, _) = (g.input("w"), g.input("b"));
        g.output("y", x.group_norm(3, w, b, 1e-5));
    })
    .unwrap()
}

fn batch_norm_graph<E: Float>() -> Graph {
    build(|g| {
        let x: Tensor<(N, C, Const<5>), E> = g.input("x");
        let (mean, var): (Tensor<(C,), E>, _) = (g.input("mean"), g.input("var"));
        let (w, b) = (g.input("w"), g.input("b"));
        g.output("y", x.batch_norm(mean, var, w, b, 1e-3));
    })
    .unwrap()
}

/// The typed graph `make::<E>()` for `dtype`.
fn for_dtype(dtype: DType, make: [fn() -> Graph; 4]) -> Graph {
    match dtype {
        DType::F32 => make[0](),
        DType::F64 => make[1](),
        DType::F16 => make[2](),
        DType::BF16 => make[3](),
        other => panic!("{other:?} is not a float"),
    }
}

#[test]
fn group_norm_composite() {
    let mut rng = Rng(64);
    let (groups, eps) = (3, 1e-5);
    for dtype in FLOATS {
        let graph = for_dtype(
            dtype,
            [
                group_norm_graph::<f32>,
                group_norm_graph::<f64>,
                group_norm_graph::<f16>,
                group_norm_graph::<bf16>,
            ],
        );
        let xs = [2, 6, 3, 4];
        let x = random(&mut rng, dtype, &xs, -2.0, 3.0);
        let w = random(&mut rng, dtype, &[6], 0.5, 1.5);
        let b = random(&mut rng, dtype, &[6], -1.0, 1.0);
        let (nx, nw, nb) = (Nd::of(&x), Nd::of(&w), Nd::of(&b));
        let per_group = xs[1] / groups;
        let stats = |n: usize, g: usize| {
            let vals: Vec<f64> = indices(&xs)
                .iter()
                .filter(|i| i[0] == n && i[1] / per_group == g)
                .map(|i| nx.at(i))
                .collect();
            let mean = vals.iter().sum::<f64>() / vals.len() as f64;
            let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64;
            (mean, var)
        };
        let data = indices(&xs)
            .iter()
            .map(|i| {
                let (mean, var) = stats(i[0], i[1] / per_group);
                (nx.at(i) - mean) / (var + eps).sqrt() * nw.at(&[i[1]]) + nb.at(&[i[1]])
            })
            .collect();
        let expected = Nd::new(&xs, data);
        let inputs = [("x", &x), ("w", &w), ("b", &b)];
        check(&graph, &inputs, &[], &[to_tensor(&expected, dtype)], 8.0);
    }
}

#[test]
fn batch_norm_composite() {
    let mut rng = Rng(65);
    let eps = 1e-3;
    for dtype in FLOATS {
        let graph = for_dtype(
            dtype,
            [
                batch_norm_graph::<f32>,
                batch_norm_graph::<f64>,
                batch_norm_graph::<f16>,
                batch_norm_graph::<bf16>,
            ],
        );
        let xs = [2, 6, 5];
        let x = random(&mut rng, dtype, &xs, -2.0, 2.0);
        let mean = random(&mut rng, dtype, &[6], -0.5, 0.5);
        let var = random(&mut rng, dtype, &[6], 0.25, 2.0);
        let w = random(&mut rng, dtype, &[6], 0.5, 1.5);
        let b = random(&mut rng, dtype, &[6], -1.0, 1.0);
        let [nx, nm, nv, nw, nb] = [&x, &mean, &var, &w, &b].map(Nd::of);
        let data = indices(&xs)
            .iter()
            .map(|i| {
                let c = [i[1]];
                (nx.at(i) - nm.at(&c)) / (nv.at(&c) + eps).sqrt() * nw.at(&c) + nb.at(&c)
            })
            .collect();
        let expected = Nd::new(&xs, data);
        let inputs = [
            ("x", &x),
            ("mean", &mean),
            ("var", &var),
            ("w", &w),
            ("b", &b),
        ];
        check(&graph, &inputs, &[], &[to_tensor(&expected, dtype)], 8.0);
    }
}

#[test]
fn gradient_layer_and_rms_norm() {
    let x = Input::float("x", &[2, 3, 6])
        .range(-2.0, 2.0)
        .symbolic(1, "seq");
    let w = Input::float("w", &[6]).range(0.5, 1.5);
    let bias = Input::float("bias", &[6]);
    grad_check("layer_norm", 800, &[x, w, bias], &|g, i| {
        let ln = Op::LayerNorm(LayerNorm {
            eps: 1e-5,
            has_weight: true,
            has_bias: true,
        });
        op(g, ln, &[i[0], i[1], i[2]])
    });
    let x = Input::float("x", &[4, 5]).range(-2.0, 2.0);
    grad_check("layer_norm without affine", 801, &[x], &|g, i| {
        let ln = Op::LayerNorm(LayerNorm {
            eps: 1e-5,
            has_weight: false,
            has_bias: false,
        });
        op(g, ln, &[i[0]])
    });
    let x = Input::float("x", &[3, 6])
        .range(-2.0, 2.0)
        .symbolic(0, "batch");
    let w = Input::float("w", &[6]).range(0.5, 1.5);
    grad_check("rms_norm", 802, &[x, w], &|g, i| {
        let rms = Op::RmsNorm(RmsNorm {
            eps: 1e-6,
            has_weight: true,
        });
        op(g, rms, &[i[0], i[1]])
    });
}

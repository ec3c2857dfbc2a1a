use rlx::ir::{ArgReduce, Cumsum, LayerNorm, RmsNorm, Softmax};
use rlx::ir::{ArgReduceOp, DType, Op, ReduceOp};

use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, INTS, Nd, Rng, indices, random, to_tensor};

/// Reduces `x` over `axes` with `f` over the gathered values.
fn reduce_ref(x: &Nd, axes: &[usize], keep_dims: bool, f: impl Fn(&[f64]) -> f64) -> Nd {
    let kept: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(i, d)| if axes.contains(&i) { 1 } else { *d })
        .collect();
    let data = indices(&kept)
        .iter()
        .map(|out| {
            let vals: Vec<f64> = indices(&x.shape)
                .iter()
                .filter(|idx| {
                    idx.iter()
                        .enumerate()
                        .all(|(i, v)| axes.contains(&i) || *v == out[i])
                })
                .map(|idx| x.at(idx))
                .collect();
            f(&vals)
        })
        .collect();
    let shape: Vec<usize> = if keep_dims {
        kept
    } else {
        x.shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, d)| *d)
            .collect()
    };
    Nd::new(&shape, data)
}

fn combine(op: ReduceOp, v: &[f64]) -> f64 {
    match op {
        ReduceOp::Sum => v.iter().sum(),
        ReduceOp::Mean => v.iter().sum::<f64>() / v.len() as f64,
        ReduceOp::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
        ReduceOp::Prod => v.iter().product(),
    }
}

#[test]
fn reductions_over_axis_sets() {
    let mut rng = Rng(21);
    let shape = [3, 4, 5];
    let axis_sets: [&[usize]; 6] = [&[0], &[1], &[2], &[0, 2], &[1, 2], &[0, 1, 2]];
    for op in ReduceOp::ALL {
        for dtype in FLOATS.into_iter().chain(INTS) {
            if op == ReduceOp::Mean && !dtype.is_float() {
                continue;
            }
            for axes in axis_sets {
                for keep_dims in [false, true] {
                    let (lo, hi) = match (op, dtype) {
                        (ReduceOp::Prod, _) => (0.5, 1.5),
                        (_, DType::U8) => (0.0, 9.0),
                        (_, d) if d.is_float() => (-2.0, 2.0),
                        _ => (-9.0, 9.0),
                    };
                    let x = random(&mut rng, dtype, &shape, lo, hi);
                    let g = graph_of(&[("x", dtype, declared(&shape, &[(1, "n")]))], |b, i| {
                        b.reduce(op, i[0], axes, keep_dims).unwrap()
                    });
                    let expected = to_tensor(
                        &reduce_ref(&Nd::of(&x), axes, keep_dims, |v| combine(op, v)),
                        dtype,
                    );
                    check(&g, &[("x", &x)], &[], &[expected], 8.0);
                }
            }
        }
    }
}

#[test]
fn large_reductions_run_in_parallel() {
    let mut rng = Rng(22);
    for (shape, axes) in [([64usize, 700], [1usize]), ([700, 64], [0])] {
        let x = random(&mut rng, DType::F32, &shape, -1.0, 1.0);
        let g = graph_of(&[("x", DType::F32, declared(&shape, &[]))], |b, i| {
            b.reduce(ReduceOp::Sum, i[0], &axes, false).unwrap()
        });
        let expected = to_tensor(
            &reduce_ref(&Nd::of(&x), &axes, false, |v| v.iter().sum()),
            DType::F32,
        );
        check(&g, &[("x", &x)], &[], &[expected], 30.0);
    }
}

#[test]
fn argmax_and_argmin() {
    let mut rng = Rng(23);
    for op in [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin] {
        for dtype in FLOATS.into_iter().chain(INTS) {
            for axis in 0..3 {
                for keep_dims in [false, true] {
                    let x = random(&mut rng, dtype, &[3, 4, 5], 0.0, 6.0); // small range: ties
                    let g = graph_of(
                        &[("x", dtype, declared(&[3, 4, 5], &[(0, "n")]))],
                        |b, i| {
                            b.op(
                                Op::ArgReduce(ArgReduce {
                                    op,
                                    axis,
                                    keep_dims,
                                }),
                                &[i[0]],
                            )
                            .unwrap()
                        },
                    );
                    let first_best = |v: &[f64]| {
                        let mut best = 0;
                        for (k, x) in v.iter().enumerate() {
                            let better = if op == ArgReduceOp::ArgMax {
                                *x > v[best]
                            } else {
                                *x < v[best]
                            };
                            if better {
                                best = k;
                            }
                        }
                        best as f64
                    };
                    let expected = to_tensor(
                        &reduce_ref(&Nd::of(&x), &[axis], keep_dims, first_best),
                        DType::I64,
                    );
                    check(&g, &[("x", &x)], &[], &[expected], 1.0);
                }
            }
        }
    }
}

#[test]
fn cumsum_variants() {
    let mut rng = Rng(24);
    for dtype in FLOATS.into_iter().chain(INTS) {
        for axis in 0..2 {
            for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)]
            {
                let x = random(&mut rng, dtype, &[4, 6], 0.0, 9.0);
                let g = graph_of(&[("x", dtype, declared(&[4, 6], &[(1, "n")]))], |b, i| {
                    b.op(
                        Op::Cumsum(Cumsum {
                            axis,
                            exclusive,
                            reverse,
                        }),
                        &[i[0]],
                    )
                    .unwrap()
                });
                let nd = Nd::of(&x);
                let data = indices(&nd.shape)
                    .iter()
                    .map(|idx| {
                        let len = nd.shape[axis];
                        let pos = idx[axis];
                        let range: Vec<usize> = if reverse {
                            ((pos + usize::from(exclusive))..len).collect()
                        } else {
                            (0..pos + usize::from(!exclusive)).collect()
                        };
                        range
                            .into_iter()
                            .map(|k| {
                                let mut j = idx.clone();
                                j[axis] = k;
                                nd.at(&j)
                            })
                            .sum()
                    })
                    .collect();
                let expected = to_tensor(&Nd::new(&nd.shape, data), dtype);
                check(&g, &[("x", &x)], &[], &[expected], 8.0);
            }
        }
    }
}

#[test]
fn softmax_and_log_softmax() {
    let mut rng = Rng(25);
    for dtype in FLOATS {
        for axis in 0..3 {
            for log in [false, true] {
                let x = random(&mut rng, dtype, &[3, 4, 5], -4.0, 4.0);
                let g = graph_of(
                    &[("x", dtype, declared(&[3, 4, 5], &[(0, "b")]))],
                    |b, i| b.op(Op::Softmax(Softmax { axis, log }), &[i[0]]).unwrap(),
                );
                let nd = Nd::of(&x);
                let data = indices(&nd.shape)
                    .iter()
                    .map(|idx| {
                        let row: Vec<f64> = (0..nd.shape[axis])
                            .map(|k| {
                                let mut j = idx.clone();
                                j[axis] = k;
                                nd.at(&j)
                            })
                            .collect();
                        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
                        let v = nd.at(idx) - max;
                        if log { v - sum.ln() } else { v.exp() / sum }
                    })
                    .collect();
                let expected = to_tensor(&Nd::new(&nd.shape, data), dtype);
                check(&g, &[("x", &x)], &[], &[expected], 4.0);
            }
        }
    }
}

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

//! Reductions, arg-reductions, cumulative sums and linear scans: values and gradients.

use rlx::ir::{ArgReduce, ArgReduceOp, Cumsum, DType, LinearScan, Op, ReduceOp};

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, INTS, Nd, Rng, indices, random, to_tensor};
use rlx::tensor::HostTensor;

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

/// Integer products wrap as two's complement does, also where the exact value is past
/// float64's 53 bits (the op's float64 reference wraps in integers too: a product of
/// 64 factors of 3 to 15 in i32 once disagreed with every backend there).
#[test]
fn integer_reductions_wrap_past_float64s_precision() {
    let len = 64;
    // Odd factors: no power of two clears the low bits float64 would lose.
    let values: Vec<i32> = (0..4 * len).map(|i| 3 + 2 * (i * 5 % 7) as i32).collect();
    let expected: Vec<i32> = values
        .chunks(len)
        .map(|row| row.iter().fold(1i32, |a, b| a.wrapping_mul(*b)))
        .collect();
    let x = HostTensor::from_vec(values.clone(), [4, len]).unwrap();
    let g = graph_of(&[("x", DType::I32, declared(&[4, len], &[]))], |b, i| {
        let op = Op::Reduce(rlx::ir::Reduce {
            op: ReduceOp::Prod,
            axes: vec![1],
            keep_dims: false,
        });
        b.op(op, &[i[0]]).unwrap()
    });
    let expected = HostTensor::from_vec(expected, [4]).unwrap();
    check(&g, &[("x", &x)], &[], &[expected], 1.0);
}

/// Arg-reductions along rows longer than a vector's lanes (the CPU's last-axis path): ties
/// keep the first, a NaN wins wherever it is (the first of several), infinities compete,
/// a row of only -inf or +inf gives 0 or its first; every float dtype.
#[test]
fn argmax_and_argmin_over_long_rows() {
    let len = 1000;
    let mut rows: Vec<Vec<f64>> = Vec::new();
    for r in 0..8 {
        // Small integers: many ties, the extremes held by several positions.
        rows.push(
            (0..len)
                .map(|i| ((i * 37 + r * 11) % 23) as f64 - 11.0)
                .collect(),
        );
    }
    rows[1][997] = f64::NAN;
    rows[2][18] = f64::NAN;
    rows[2][700] = f64::NAN;
    rows[3][999] = f64::INFINITY;
    rows[3][400] = f64::NEG_INFINITY;
    rows[4] = vec![f64::NEG_INFINITY; len];
    rows[5] = vec![f64::INFINITY; len];
    rows[6][0] = 40.0;
    rows[7][len - 1] = -40.0;
    let values: Vec<f64> = rows.concat();
    for op in [ArgReduceOp::ArgMax, ArgReduceOp::ArgMin] {
        let expected: Vec<i64> = rows
            .iter()
            .map(|row| {
                if let Some(i) = row.iter().position(|v| v.is_nan()) {
                    return i as i64;
                }
                let mut best = 0;
                for (k, x) in row.iter().enumerate() {
                    let better = match op {
                        ArgReduceOp::ArgMax => *x > row[best],
                        ArgReduceOp::ArgMin => *x < row[best],
                    };
                    if better {
                        best = k;
                    }
                }
                best as i64
            })
            .collect();
        let expected = HostTensor::from_vec(expected, [rows.len()]).unwrap();
        for dtype in FLOATS {
            let x = to_tensor(&Nd::new(&[rows.len(), len], values.clone()), dtype);
            let g = graph_of(
                &[("x", dtype, declared(&[rows.len(), len], &[(0, "n")]))],
                |b, i| {
                    let op = Op::ArgReduce(ArgReduce {
                        op,
                        axis: 1,
                        keep_dims: false,
                    });
                    b.op(op, &[i[0]]).unwrap()
                },
            );
            check(&g, &[("x", &x)], &[], std::slice::from_ref(&expected), 1.0);
        }
        // Rows of no values: index 0 each (a random graph once read what the arena held).
        let empty = HostTensor::zeros(DType::F32, [3, 0]);
        let g = graph_of(&[("x", DType::F32, declared(&[3, 0], &[]))], |b, i| {
            let op = Op::ArgReduce(ArgReduce {
                op,
                axis: 1,
                keep_dims: false,
            });
            b.op(op, &[i[0]]).unwrap()
        });
        let zeros = HostTensor::from_vec(vec![0i64; 3], [3]).unwrap();
        check(&g, &[("x", &empty)], &[], &[zeros], 1.0);
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
fn gradient_reductions() {
    for (seed, kind) in ReduceOp::ALL.into_iter().enumerate() {
        for (axes, keep_dims) in [(vec![1], false), (vec![0, 2], true)] {
            let x = Input::float("x", &[3, 4, 2])
                .range(0.5, 1.5)
                .symbolic(1, "seq");
            let label = format!("{} {axes:?} keep={keep_dims}", kind.name());
            grad_check(&label, 500 + seed as u64, &[x], &|g, i| {
                g.reduce(kind, i[0], &axes, keep_dims).unwrap()
            });
        }
    }
    // A product over a row holding one zero, and one holding two.
    let x = Input::exact("x", &[2, 3], vec![0.0, 2.0, 3.0, 0.0, 0.0, 5.0]);
    grad_check("prod with zeros", 510, &[x], &|g, i| {
        g.reduce(ReduceOp::Prod, i[0], &[1], false).unwrap()
    });
    // Ties share the gradient of a max.
    let x = Input::exact("x", &[4], vec![1.0, 3.0, 3.0, -2.0]);
    grad_check("max with a tie", 511, &[x], &|g, i| {
        let m = g.reduce(ReduceOp::Max, i[0], &[0], false).unwrap();
        // Scale so the finite difference sees both tied elements move the max.
        g.mul(m, m).unwrap()
    });
}

#[test]
fn gradient_cumsum_every_direction() {
    for (seed, (exclusive, reverse)) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let x = Input::float("x", &[3, 5]);
        let label = format!("cumsum exclusive={exclusive} reverse={reverse}");
        grad_check(&label, 600 + seed as u64, &[x], &|g, i| {
            let c = Op::Cumsum(Cumsum {
                axis: 1,
                exclusive,
                reverse,
            });
            op(g, c, &[i[0]])
        });
    }
}

/// `h_t = a_t h_{t-1} + b_t` along `axis` of `a` and `b`, in float64, step by step, from
/// the matching entry of `start` (the axis of length 1) or 0.
fn linear_scan_ref(a: &Nd, b: &Nd, start: Option<&Nd>, axis: usize, reverse: bool) -> Nd {
    let len = a.shape[axis];
    let data = indices(&a.shape)
        .iter()
        .map(|idx| {
            let steps: Vec<usize> = if reverse {
                (idx[axis]..len).rev().collect()
            } else {
                (0..=idx[axis]).collect()
            };
            let mut line = idx.clone();
            line[axis] = 0;
            let h0 = start.map_or(0.0, |s| s.at(&line));
            steps.into_iter().fold(h0, |h, k| {
                let mut j = idx.clone();
                j[axis] = k;
                a.at(&j) * h + b.at(&j)
            })
        })
        .collect();
    Nd::new(&a.shape, data)
}

/// Every axis (lines that are contiguous, and columns in blocks of 64 and a remainder),
/// both directions, with and without a starting state, every float dtype; then one large
/// enough to split between threads.
#[test]
fn linear_scan_variants() {
    let mut rng = Rng(31);
    let mut cases: Vec<(DType, Vec<usize>, usize)> = Vec::new();
    for dtype in FLOATS {
        for axis in 0..3 {
            cases.push((dtype, vec![4, 9, 70], axis));
        }
    }
    cases.push((DType::F32, vec![2, 48, 1030], 1));
    for (dtype, shape, axis) in cases {
        for (reverse, started) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = random(&mut rng, dtype, &shape, -1.0, 1.0);
            let b = random(&mut rng, dtype, &shape, -1.0, 1.0);
            let mut start_shape = shape.clone();
            start_shape[axis] = 1;
            let h0 = random(&mut rng, dtype, &start_shape, -2.0, 2.0);
            let symbolic = if axis == 1 { vec![] } else { vec![(1, "n")] };
            let mut declared_inputs = vec![
                ("a", dtype, declared(&shape, &symbolic)),
                ("b", dtype, declared(&shape, &symbolic)),
            ];
            let mut values = vec![("a", &a), ("b", &b)];
            if started {
                declared_inputs.push(("h0", dtype, declared(&start_shape, &symbolic)));
                values.push(("h0", &h0));
            }
            let g = graph_of(&declared_inputs, |g, i| {
                let scan = Op::LinearScan(LinearScan { axis, reverse });
                g.op(scan, i).unwrap()
            });
            let start = started.then(|| Nd::of(&h0));
            let want = linear_scan_ref(&Nd::of(&a), &Nd::of(&b), start.as_ref(), axis, reverse);
            let scale = if dtype == DType::BF16 { 16.0 } else { 8.0 };
            check(&g, &values, &[], &[to_tensor(&want, dtype)], scale);
        }
    }
}

/// Operands of different shapes or dtypes, integers and an axis past the rank are
/// build errors.
#[test]
fn linear_scan_rejects_mismatched_operands() {
    use rlx::builder::GraphBuilder;
    let scan = |axis| {
        Op::LinearScan(LinearScan {
            axis,
            reverse: false,
        })
    };
    let mut g = GraphBuilder::new();
    let a = g.input("a", DType::F32, [2, 8]).unwrap();
    let wide = g.input("wide", DType::F32, [2, 9]).unwrap();
    let half = g.input("half", DType::F16, [2, 8]).unwrap();
    let ints = g.input("ints", DType::I32, [2, 8]).unwrap();
    assert!(g.op(scan(1), &[a, wide]).is_err());
    assert!(g.op(scan(1), &[a, half]).is_err());
    assert!(g.op(scan(1), &[ints, ints]).is_err());
    assert!(g.op(scan(2), &[a, a]).is_err());
    assert!(g.op(scan(1), &[a]).is_err());
    assert!(g.op(scan(1), &[a, a]).is_ok());
    // A starting state has the scanned axis of length 1, the other dims of `a`.
    let start = g.input("start", DType::F32, [2, 1]).unwrap();
    let long = g.input("long", DType::F32, [2, 2]).unwrap();
    assert!(g.op(scan(1), &[a, a, start]).is_ok());
    assert!(g.op(scan(0), &[a, a, start]).is_err());
    assert!(g.op(scan(1), &[a, a, long]).is_err());
    assert!(g.op(scan(1), &[a, a, start, start]).is_err());
}

#[test]
fn gradient_linear_scan_both_directions() {
    for (seed, (axis, reverse, started)) in [
        (1, false, false),
        (1, true, false),
        (0, false, true),
        (2, true, true),
        (1, false, true),
    ]
    .into_iter()
    .enumerate()
    {
        let a = Input::float("a", &[3, 6, 2]).range(-0.9, 0.9);
        let b = Input::float("b", &[3, 6, 2]);
        let mut start = [3, 6, 2];
        start[axis] = 1;
        let mut inputs = vec![a, b];
        if started {
            inputs.push(Input::float("h0", &start));
        }
        let label = format!("linear_scan axis={axis} reverse={reverse} started={started}");
        grad_check(&label, 620 + seed as u64, &inputs, &|g, i| {
            op(g, Op::LinearScan(LinearScan { axis, reverse }), i)
        });
    }
}

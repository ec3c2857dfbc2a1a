//! Unary and binary math, comparisons, `where`, casts and the elementwise fusion: values
//! and gradients.

use rlx::ir::{BinaryOp, CompareOp, DType, UnaryOp};
use rlx::tensor::HostTensor;

use crate::gradient::{Input, grad_check};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, INTS, Nd, Rng, random, to_tensor, zip_nd};

fn erf(x: f64) -> f64 {
    libm::erf(x)
}

pub(crate) fn unary_ref(kind: UnaryOp, x: f64) -> f64 {
    use UnaryOp as U;
    match kind {
        U::Neg => -x,
        U::Abs => x.abs(),
        U::Exp => x.exp(),
        U::Log => x.ln(),
        U::Sqrt => x.sqrt(),
        U::Rsqrt => 1.0 / x.sqrt(),
        U::Recip => 1.0 / x,
        U::Sin => x.sin(),
        U::Cos => x.cos(),
        U::Tanh => x.tanh(),
        U::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        U::Relu => x.max(0.0),
        U::Gelu => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
        U::GeluTanh => {
            0.5 * x
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
        }
        U::Silu => x / (1.0 + (-x).exp()),
        U::Erf => erf(x),
        U::Floor => x.floor(),
        U::Ceil => x.ceil(),
        U::Round => x.round_ties_even(),
        U::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        U::Softplus => (1.0 + x.exp()).ln(),
    }
}

fn unary_domain(kind: UnaryOp) -> (f64, f64) {
    match kind {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.1, 3.0),
        UnaryOp::Recip => (0.5, 2.0),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => (-4.0, 4.0),
        _ => (-3.0, 3.0),
    }
}

#[test]
fn unary_floats() {
    let mut rng = Rng(1);
    for kind in UnaryOp::ALL {
        for dtype in FLOATS {
            for (concrete, symbols) in [
                (vec![3, 5], vec![]),
                (vec![70, 9], vec![(0, "n")]),
                (vec![], vec![]),
            ] {
                let (lo, hi) = unary_domain(kind);
                let x = random(&mut rng, dtype, &concrete, lo, hi);
                let g = graph_of(&[("x", dtype, declared(&concrete, &symbols))], |b, i| {
                    b.unary(kind, i[0]).unwrap()
                });
                let expected = to_tensor(&Nd::of(&x).map(|v| unary_ref(kind, v)), dtype);
                check(&g, &[("x", &x)], &[], &[expected], 1.0);
            }
        }
    }
}

#[test]
fn unary_ints() {
    let mut rng = Rng(2);
    for kind in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Sign, UnaryOp::Relu] {
        for dtype in INTS {
            if kind == UnaryOp::Neg && dtype == DType::U8 {
                continue; // rejected by inference
            }
            let lo = if dtype == DType::U8 { 0.0 } else { -20.0 };
            let x = random(&mut rng, dtype, &[4, 6], lo, 20.0);
            let g = graph_of(&[("x", dtype, declared(&[4, 6], &[]))], |b, i| {
                b.unary(kind, i[0]).unwrap()
            });
            let expected = to_tensor(&Nd::of(&x).map(|v| unary_ref(kind, v)), dtype);
            check(&g, &[("x", &x)], &[], &[expected], 1.0);
        }
    }
}

/// An operand's concrete dims and the axes that are runtime dims.
type Operand = (Vec<usize>, Vec<(usize, &'static str)>);

/// Shapes of (a, b): same, suffix broadcast, two-way broadcast, scalar, symbolic, large.
fn binary_shapes() -> Vec<(Operand, Operand)> {
    vec![
        ((vec![4, 5], vec![]), (vec![4, 5], vec![])),
        ((vec![2, 3, 4], vec![]), (vec![4], vec![])),
        ((vec![3, 1], vec![]), (vec![1, 5], vec![])),
        ((vec![], vec![]), (vec![2, 3], vec![])),
        ((vec![6, 3], vec![(0, "batch")]), (vec![3], vec![])),
        (
            (vec![5, 7], vec![(0, "b"), (1, "s")]),
            (vec![5, 7], vec![(0, "b"), (1, "s")]),
        ),
        ((vec![300, 130], vec![]), (vec![130], vec![])), // large: parallel kernels
    ]
}

fn away_from_zero(t: &HostTensor) -> HostTensor {
    let nd = Nd::of(t).map(|v| {
        if v >= 0.0 {
            0.5 + v.abs() * 0.75
        } else {
            -0.5 - v.abs() * 0.75
        }
    });
    to_tensor(&nd, t.dtype())
}

fn binary_ref(kind: BinaryOp, a: f64, b: f64) -> f64 {
    match kind {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Max => a.max(b),
        BinaryOp::Min => a.min(b),
        BinaryOp::Rem => a - (a / b).floor() * b,
    }
}

#[test]
fn binary_floats() {
    let mut rng = Rng(3);
    for kind in BinaryOp::ALL {
        for dtype in FLOATS {
            for ((sa, ya), (sb, yb)) in binary_shapes() {
                let (lo, hi) = if kind == BinaryOp::Pow {
                    (0.5, 2.0)
                } else {
                    (-2.0, 2.0)
                };
                let a = random(&mut rng, dtype, &sa, lo, hi);
                let mut b = random(&mut rng, dtype, &sb, -2.0, 2.0);
                if matches!(kind, BinaryOp::Div | BinaryOp::Rem) {
                    b = away_from_zero(&b);
                }
                let g = graph_of(
                    &[
                        ("a", dtype, declared(&sa, &ya)),
                        ("b", dtype, declared(&sb, &yb)),
                    ],
                    |bld, i| bld.binary(kind, i[0], i[1]).unwrap(),
                );
                let expected = to_tensor(
                    &zip_nd(&[&Nd::of(&a), &Nd::of(&b)], |v| {
                        binary_ref(kind, v[0], v[1])
                    }),
                    dtype,
                );
                check(&g, &[("a", &a), ("b", &b)], &[], &[expected], 4.0);
            }
        }
    }
}

#[test]
fn binary_ints() {
    let mut rng = Rng(4);
    for kind in BinaryOp::ALL {
        if kind == BinaryOp::Pow {
            continue;
        }
        for dtype in INTS {
            for ((sa, ya), (sb, yb)) in binary_shapes() {
                let (lo, hi) = if dtype == DType::U8 {
                    (0.0, 15.0)
                } else {
                    (-10.0, 10.0)
                };
                let a = random(&mut rng, dtype, &sa, lo, hi);
                let mut b = random(&mut rng, dtype, &sb, lo, hi);
                if matches!(kind, BinaryOp::Div | BinaryOp::Rem) {
                    let nd = Nd::of(&b).map(|v| if v == 0.0 { 3.0 } else { v });
                    b = to_tensor(&nd, dtype);
                }
                let g = graph_of(
                    &[
                        ("a", dtype, declared(&sa, &ya)),
                        ("b", dtype, declared(&sb, &yb)),
                    ],
                    |bld, i| bld.binary(kind, i[0], i[1]).unwrap(),
                );
                let int_ref = |v: &[f64]| match kind {
                    BinaryOp::Div => (v[0] / v[1]).floor(),
                    _ => binary_ref(kind, v[0], v[1]),
                };
                let expected = to_tensor(&zip_nd(&[&Nd::of(&a), &Nd::of(&b)], int_ref), dtype);
                check(&g, &[("a", &a), ("b", &b)], &[], &[expected], 1.0);
            }
        }
    }
}

#[test]
fn integer_division_by_zero_is_zero_not_a_panic() {
    for dtype in INTS {
        let a = to_tensor(&Nd::new(&[3], vec![7.0, 0.0, 5.0]), dtype);
        let b = to_tensor(&Nd::new(&[3], vec![0.0, 0.0, 2.0]), dtype);
        for (kind, last) in [(BinaryOp::Div, 2.0), (BinaryOp::Rem, 1.0)] {
            let g = graph_of(
                &[
                    ("a", dtype, declared(&[3], &[])),
                    ("b", dtype, declared(&[3], &[])),
                ],
                |bld, i| bld.binary(kind, i[0], i[1]).unwrap(),
            );
            let expected = to_tensor(&Nd::new(&[3], vec![0.0, 0.0, last]), dtype);
            check(&g, &[("a", &a), ("b", &b)], &[], &[expected], 1.0);
        }
    }
}

#[test]
fn comparisons() {
    let mut rng = Rng(5);
    for kind in CompareOp::ALL {
        for dtype in FLOATS.into_iter().chain(INTS).chain([DType::Bool]) {
            if dtype == DType::Bool && !matches!(kind, CompareOp::Eq | CompareOp::Ne) {
                continue;
            }
            for ((sa, ya), (sb, yb)) in binary_shapes().into_iter().take(5) {
                // Small integer values so that ties happen.
                let (lo, hi) = if dtype == DType::Bool {
                    (0.0, 1.0)
                } else {
                    (0.0, 3.0)
                };
                let round = |t: HostTensor| to_tensor(&Nd::of(&t).map(f64::round), dtype);
                let a = round(random(
                    &mut rng,
                    if dtype == DType::Bool {
                        DType::F32
                    } else {
                        dtype
                    },
                    &sa,
                    lo,
                    hi,
                ));
                let b = round(random(
                    &mut rng,
                    if dtype == DType::Bool {
                        DType::F32
                    } else {
                        dtype
                    },
                    &sb,
                    lo,
                    hi,
                ));
                let g = graph_of(
                    &[
                        ("a", dtype, declared(&sa, &ya)),
                        ("b", dtype, declared(&sb, &yb)),
                    ],
                    |bld, i| bld.compare(kind, i[0], i[1]).unwrap(),
                );
                let f = |v: &[f64]| {
                    let r = match kind {
                        CompareOp::Eq => v[0] == v[1],
                        CompareOp::Ne => v[0] != v[1],
                        CompareOp::Lt => v[0] < v[1],
                        CompareOp::Le => v[0] <= v[1],
                        CompareOp::Gt => v[0] > v[1],
                        CompareOp::Ge => v[0] >= v[1],
                    };
                    f64::from(u8::from(r))
                };
                let expected = to_tensor(&zip_nd(&[&Nd::of(&a), &Nd::of(&b)], f), DType::Bool);
                check(&g, &[("a", &a), ("b", &b)], &[], &[expected], 1.0);
            }
        }
    }
}

#[test]
fn select_broadcasts_three_ways() {
    let mut rng = Rng(6);
    for dtype in FLOATS.into_iter().chain(INTS).chain([DType::Bool]) {
        let cond = to_tensor(
            &Nd::of(&random(&mut rng, DType::F32, &[3, 1, 5], 0.0, 1.0)).map(f64::round),
            DType::Bool,
        );
        let make = |rng: &mut Rng, shape: &[usize]| {
            let t = random(rng, DType::F32, shape, 0.0, 5.0);
            to_tensor(&Nd::of(&t).map(f64::round), dtype)
        };
        let a = make(&mut rng, &[4, 5]);
        let b = make(&mut rng, &[]);
        let g = graph_of(
            &[
                ("c", DType::Bool, declared(&[3, 1, 5], &[(0, "n")])),
                ("a", dtype, declared(&[4, 5], &[])),
                ("b", dtype, declared(&[], &[])),
            ],
            |bld, i| bld.select(i[0], i[1], i[2]).unwrap(),
        );
        let expected = to_tensor(
            &zip_nd(&[&Nd::of(&cond), &Nd::of(&a), &Nd::of(&b)], |v| {
                if v[0] != 0.0 { v[1] } else { v[2] }
            }),
            dtype,
        );
        check(
            &g,
            &[("c", &cond), ("a", &a), ("b", &b)],
            &[],
            &[expected],
            1.0,
        );
    }
}

/// The conversion Rust's `as` gives, written out per target type.
fn cast_ref(x: &HostTensor, to: DType) -> HostTensor {
    let from_float = x.dtype().is_float();
    let vals = x.to_f64_vec();
    let nd = Nd::new(
        x.shape(),
        vals.iter()
            .map(|&v| match to {
                DType::Bool => f64::from(u8::from(v != 0.0)),
                DType::I32 => f64::from(if from_float {
                    v as i32
                } else {
                    v as i64 as i32
                }),
                DType::I64 => (v as i64) as f64,
                DType::I8 => f64::from(if from_float { v as i8 } else { v as i64 as i8 }),
                DType::U8 => f64::from(if from_float { v as u8 } else { v as i64 as u8 }),
                DType::F32 => f64::from(v as f32),
                DType::F16 | DType::BF16 if !from_float => f64::from(v as f32),
                _ => v,
            })
            .collect(),
    );
    to_tensor(&nd, to)
}

#[test]
fn casts_between_every_pair_of_dtypes() {
    let mut rng = Rng(7);
    for from in DType::ALL {
        for to in DType::ALL {
            let x = match from {
                DType::Bool => to_tensor(
                    &Nd::of(&random(&mut rng, DType::F32, &[4, 8], 0.0, 1.0)).map(f64::round),
                    DType::Bool,
                ),
                DType::U8 => random(&mut rng, from, &[4, 8], 0.0, 255.0),
                DType::I8 => random(&mut rng, from, &[4, 8], -128.0, 127.0),
                d if d.is_float() => random(&mut rng, from, &[4, 8], -300.0, 300.0),
                _ => random(&mut rng, from, &[4, 8], -100_000.0, 100_000.0),
            };
            let g = graph_of(&[("x", from, declared(&[4, 8], &[(0, "n")]))], |b, i| {
                b.cast(i[0], to).unwrap()
            });
            check(&g, &[("x", &x)], &[], &[cast_ref(&x, to)], 1.0);
        }
    }
    // Saturation and NaN.
    let x = HostTensor::from_vec(vec![1e10f32, -1e10, f32::NAN, 2.9, -2.9], [5]).unwrap();
    let g = graph_of(&[("x", DType::F32, declared(&[5], &[]))], |b, i| {
        b.cast(i[0], DType::I32).unwrap()
    });
    let expected = HostTensor::from_vec(vec![i32::MAX, i32::MIN, 0, 2, -2], [5]).unwrap();
    check(&g, &[("x", &x)], &[], &[expected], 1.0);
}

/// A chain of elementwise ops against its f64 values on every backend, which the CPU runs as
/// two fused kernels (the value read twice ends the first): scalars, an operand read twice,
/// runtime dims, and sizes across several blocks and threads.
#[test]
fn fused_elementwise_chains() {
    use rlx::backend::Backend;
    use rlx::cpu::CpuBackend;
    let mut rng = Rng(16);
    // t = tanh(x·s + y) · x, then t − exp(−t).
    let chain = |b: &mut rlx::builder::GraphBuilder, i: &[rlx::ir::NodeId]| {
        let (x, y, s) = (i[0], i[1], i[2]);
        let t = b.mul(x, s).unwrap();
        let t = b.add(t, y).unwrap();
        let t = b.unary(UnaryOp::Tanh, t).unwrap();
        let t = b.mul(t, x).unwrap();
        let e = b.unary(UnaryOp::Neg, t).unwrap();
        let e = b.unary(UnaryOp::Exp, e).unwrap();
        b.binary(BinaryOp::Sub, t, e).unwrap()
    };
    let reference = |x: f64, y: f64, s: f64| {
        let t = (x * s + y).tanh() * x;
        t - (-t).exp()
    };
    // (shape, runtime dims)
    type Case = (Vec<usize>, Vec<(usize, &'static str)>);
    let shapes: [Case; 3] = [
        (vec![7], vec![]),
        (vec![3, 129], vec![(0, "rows")]),
        (vec![200, 300], vec![]),
    ];
    for dtype in FLOATS {
        for (shape, symbols) in &shapes {
            let x = random(&mut rng, dtype, shape, -2.0, 2.0);
            let y = random(&mut rng, dtype, shape, -2.0, 2.0);
            let s = random(&mut rng, dtype, &[1], 0.25, 0.75);
            let (nx, ny, ns) = (Nd::of(&x), Nd::of(&y), Nd::of(&s));
            let expected = Nd::new(
                shape,
                nx.data
                    .iter()
                    .zip(&ny.data)
                    .map(|(x, y)| reference(*x, *y, ns.data[0]))
                    .collect(),
            );
            let inputs = [
                ("x", dtype, declared(shape, symbols)),
                ("y", dtype, declared(shape, symbols)),
                ("s", dtype, declared(&[1], &[])),
            ];
            let g = graph_of(&inputs, chain);
            if matches!(dtype, DType::F32 | DType::F64) {
                let lowered = CpuBackend::default()
                    .compile(&g)
                    .unwrap()
                    .lowered()
                    .to_string();
                for fused in [
                    "fused_elementwise[mul, add, tanh, mul]",
                    "fused_elementwise[neg, exp, sub]",
                ] {
                    assert!(lowered.contains(fused), "{lowered}");
                }
            }
            check(
                &g,
                &[("x", &x), ("y", &y), ("s", &s)],
                &[],
                &[to_tensor(&expected, dtype)],
                4.0,
            );
        }
    }
}

/// Operands broadcast inside a fused chain: a value per row (`[R, 1]`, as a row statistic)
/// and one row for all rows (`[C]`, as a bias), against their f64 values on every backend,
/// with rows shorter and longer than the CPU's fused blocks and a runtime row count.
#[test]
fn fused_elementwise_broadcast_operands() {
    use rlx::backend::Backend;
    use rlx::cpu::CpuBackend;
    let mut rng = Rng(18);
    // tanh((x − r) · c) + r
    let chain = |b: &mut rlx::builder::GraphBuilder, i: &[rlx::ir::NodeId]| {
        let (x, r, c) = (i[0], i[1], i[2]);
        let t = b.binary(BinaryOp::Sub, x, r).unwrap();
        let t = b.mul(t, c).unwrap();
        let t = b.unary(UnaryOp::Tanh, t).unwrap();
        b.add(t, r).unwrap()
    };
    type Case = (usize, usize, Vec<(usize, &'static str)>);
    let cases: [Case; 3] = [
        (100, 7, vec![]),
        (3, 129, vec![(0, "rows")]),
        (150, 300, vec![]),
    ];
    for dtype in FLOATS {
        for (rows, cols, symbols) in &cases {
            let shape = [*rows, *cols];
            let x = random(&mut rng, dtype, &shape, -2.0, 2.0);
            let r = random(&mut rng, dtype, &[*rows, 1], -1.0, 1.0);
            let c = random(&mut rng, dtype, &[*cols], 0.25, 0.75);
            let (nx, nr, nc) = (Nd::of(&x), Nd::of(&r), Nd::of(&c));
            let expected = Nd::new(
                &shape,
                (0..rows * cols)
                    .map(|i| {
                        let (row, col) = (i / cols, i % cols);
                        ((nx.data[i] - nr.data[row]) * nc.data[col]).tanh() + nr.data[row]
                    })
                    .collect(),
            );
            let inputs = [
                ("x", dtype, declared(&shape, symbols)),
                ("r", dtype, declared(&[*rows, 1], symbols)),
                ("c", dtype, declared(&[*cols], &[])),
            ];
            let g = graph_of(&inputs, chain);
            if matches!(dtype, DType::F32 | DType::F64) {
                let lowered = CpuBackend::default()
                    .compile(&g)
                    .unwrap()
                    .lowered()
                    .to_string();
                assert!(
                    lowered.contains("fused_elementwise[sub, mul, tanh, add]"),
                    "{lowered}"
                );
            }
            check(
                &g,
                &[("x", &x), ("r", &r), ("c", &c)],
                &[],
                &[to_tensor(&expected, dtype)],
                4.0,
            );
        }
    }
}

/// The CPU backend fuses an elementwise chain into one kernel with the unfused graph's
/// results; a value the graph exposes, and half precisions, stay unfused.
#[test]
fn elementwise_fusion_keeps_results_and_exposed_values() {
    use rlx::backend::{Backend, Executable};
    use rlx::builder::GraphBuilder;
    use rlx::cpu::{CpuBackend, CpuOptions};
    let mut rng = Rng(17);
    let build = |dtype: DType, expose: bool| {
        let mut b = GraphBuilder::new();
        let x = b.input("x", dtype, [64, 100]).unwrap();
        let y = b.input("y", dtype, [64, 100]).unwrap();
        let half = b.scalar(0.5, dtype);
        let t = b.mul(x, half).unwrap();
        let t = b.binary(BinaryOp::Sub, t, y).unwrap();
        if expose {
            b.output("difference", t).unwrap();
        }
        let t = b.unary(UnaryOp::Sigmoid, t).unwrap();
        let t = b.mul(t, x).unwrap();
        b.output("out", t).unwrap();
        b.finish().unwrap()
    };
    for dtype in [DType::F32, DType::F64, DType::F16] {
        let x = random(&mut rng, dtype, &[64, 100], -3.0, 3.0);
        let y = random(&mut rng, dtype, &[64, 100], -3.0, 3.0);
        for expose in [false, true] {
            let graph = build(dtype, expose);
            let run = |options: CpuOptions| {
                let exe = CpuBackend::new(options).compile(&graph).unwrap();
                let out = exe.run(&[("x", x.view()), ("y", y.view())], &[]).unwrap();
                let profile = exe
                    .profile(&[("x", x.view()), ("y", y.view())], &[], 1)
                    .unwrap();
                (exe.lowered().to_string(), out, profile.to_string())
            };
            let (fused_text, fused, profile) = run(CpuOptions::default());
            let (plain_text, plain, _) = run(CpuOptions {
                optimize: false,
                ..CpuOptions::default()
            });
            let expected = match (dtype, expose) {
                (DType::F16, _) => None,
                (_, false) => Some("fused_elementwise[mul, sub, sigmoid, mul]"),
                (_, true) => Some("fused_elementwise[sigmoid, mul]"),
            };
            match expected {
                Some(expected) => {
                    assert!(fused_text.contains(expected), "{fused_text}");
                    assert!(profile.contains("fused_elementwise"), "{profile}");
                }
                None => assert!(!fused_text.contains("fused_elementwise"), "{fused_text}"),
            }
            assert!(!plain_text.contains("fused_elementwise"));
            for (f, p) in fused.iter().zip(&plain) {
                assert_eq!(f.shape(), p.shape());
                for (a, b) in f.to_f64_vec().iter().zip(p.to_f64_vec()) {
                    assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
                }
            }
        }
    }
}

#[test]
fn gradient_unary_math() {
    for (seed, kind) in UnaryOp::ALL.into_iter().enumerate() {
        // Keep away from the points where a function is not differentiable or not defined.
        let (lo, hi) = match kind {
            UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip => (0.3, 2.0),
            UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Sign => (0.1, 1.0),
            _ => (-2.0, 2.0),
        };
        let x = Input::float("x", &[2, 3]).range(lo, hi);
        let flip = matches!(kind, UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Sign);
        grad_check(kind.name(), seed as u64, &[x], &|b, i| {
            // Exercise negative inputs of the kinks too: x and −x.
            if flip {
                let neg = b.unary(UnaryOp::Neg, i[0]).unwrap();
                let both = b.concat(&[i[0], neg], 0).unwrap();
                b.unary(kind, both).unwrap()
            } else {
                b.unary(kind, i[0]).unwrap()
            }
        });
    }
}

#[test]
fn gradient_binary_math_with_broadcasting() {
    for (seed, kind) in BinaryOp::ALL.into_iter().enumerate() {
        let (lo, hi) = match kind {
            BinaryOp::Pow | BinaryOp::Div | BinaryOp::Rem => (0.5, 2.0),
            _ => (-1.0, 1.0),
        };
        let a = Input::float("a", &[2, 3, 4])
            .range(lo, hi)
            .symbolic(0, "batch");
        let b = Input::float("b", &[3, 1]).range(lo, hi);
        grad_check(kind.name(), 100 + seed as u64, &[a, b], &|g, i| {
            g.binary(kind, i[0], i[1]).unwrap()
        });
    }
}

#[test]
fn gradient_select_and_compare() {
    let c = Input::float("c", &[3, 4]);
    let a = Input::float("a", &[3, 4]);
    let b = Input::float("b", &[4]);
    grad_check("where", 200, &[c, a, b], &|g, i| {
        let zero = g.scalar(0.1, DType::F64);
        let cond = g.compare(CompareOp::Gt, i[0], zero).unwrap();
        g.select(cond, i[1], i[2]).unwrap()
    });
}

#[test]
fn gradient_casts_between_floats() {
    // f64 -> f64 through a widening round trip of the cotangent: exact.
    let x = Input::float("x", &[3]);
    grad_check("cast", 970, &[x], &|g, i| {
        let y = g.cast(i[0], DType::F64).unwrap();
        g.mul(y, y).unwrap()
    });
}

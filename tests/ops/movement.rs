use rlx::backend::{Executable, RunError};
use rlx::ir::{DType, Dim, Op, Scalar, Shape};
use rlx::ir::{Gather, Pad, Slice};
use rlx::tensor::HostTensor;

use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, INTS, Nd, Rng, indices, random, to_tensor};

/// Every dtype: movement ops are byte moves and must work for all of them.
fn all_dtypes() -> Vec<DType> {
    FLOATS
        .into_iter()
        .chain(INTS)
        .chain([DType::Bool])
        .collect()
}

fn sample(rng: &mut Rng, dtype: DType, shape: &[usize]) -> HostTensor {
    let t = random(rng, DType::F64, shape, 0.0, 100.0);
    let nd = Nd::of(&t).map(|v| {
        if dtype == DType::Bool {
            (v as i64 % 2) as f64
        } else {
            v.round()
        }
    });
    to_tensor(&nd, dtype)
}

/// Builds the expected tensor by reading `x` at `source(out_index)`.
fn gather_ref(
    x: &Nd,
    out_shape: &[usize],
    source: impl Fn(&[usize]) -> Option<Vec<usize>>,
    fill: f64,
) -> Nd {
    let data = indices(out_shape)
        .iter()
        .map(|idx| source(idx).map_or(fill, |s| x.at(&s)))
        .collect();
    Nd::new(out_shape, data)
}

#[test]
fn reshape_and_permute() {
    let mut rng = Rng(31);
    for dtype in all_dtypes() {
        let x = sample(&mut rng, dtype, &[2, 3, 4]);
        // A reshape through a symbolic flatten and back is a view; the exp forces a kernel.
        let g = graph_of(
            &[("x", dtype, declared(&[2, 3, 4], &[(0, "b"), (1, "s")]))],
            |b, i| {
                let flat = Shape::new([Dim::sym("b").mul(&Dim::sym("s")), Dim::from(4)]);
                let f = b.reshape(i[0], flat).unwrap();
                b.permute(f, &[1, 0]).unwrap()
            },
        );
        let nd = Nd::of(&x);
        let expected = gather_ref(&nd, &[4, 6], |o| Some(vec![o[1] / 3, o[1] % 3, o[0]]), 0.0);
        check(&g, &[("x", &x)], &[], &[to_tensor(&expected, dtype)], 1.0);

        let g = graph_of(&[("x", dtype, declared(&[2, 3, 4], &[]))], |b, i| {
            b.permute(i[0], &[2, 0, 1]).unwrap()
        });
        let expected = gather_ref(&nd, &[4, 2, 3], |o| Some(vec![o[1], o[2], o[0]]), 0.0);
        check(&g, &[("x", &x)], &[], &[to_tensor(&expected, dtype)], 1.0);

        // stop_gradient is the identity on values, as an output and between kernels.
        let g = graph_of(
            &[("x", dtype, declared(&[2, 3, 4], &[(0, "b")]))],
            |b, i| {
                let cut = b.op(rlx::ir::Op::StopGradient, &[i[0]]).unwrap();
                b.permute(cut, &[2, 0, 1]).unwrap()
            },
        );
        check(&g, &[("x", &x)], &[], &[to_tensor(&expected, dtype)], 1.0);
        let g = graph_of(&[("x", dtype, declared(&[2, 3, 4], &[]))], |b, i| {
            b.op(rlx::ir::Op::StopGradient, &[i[0]]).unwrap()
        });
        check(&g, &[("x", &x)], &[], &[to_tensor(&nd, dtype)], 1.0);
    }
}

#[test]
fn slices() {
    let mut rng = Rng(32);
    let cases: [(usize, i64, Option<i64>, usize); 6] = [
        (1, 1, Some(4), 1),
        (1, 0, None, 2),
        (0, -2, None, 1),
        (1, 1, Some(-1), 3),
        (2, 0, Some(0), 1),
        (1, -6, Some(6), 2),
    ];
    for dtype in all_dtypes() {
        let x = sample(&mut rng, dtype, &[3, 6, 2]);
        let nd = Nd::of(&x);
        for (axis, start, stop, step) in cases {
            // A stepped slice of a symbolic axis has no exact size, so only unit steps get one.
            let symbols: &[(usize, &str)] = if step == 1 { &[(1, "s")] } else { &[] };
            let g = graph_of(&[("x", dtype, declared(&[3, 6, 2], symbols))], |b, i| {
                b.op(
                    Op::Slice(Slice {
                        axis,
                        start,
                        stop,
                        step,
                    }),
                    &[i[0]],
                )
                .unwrap()
            });
            let size = nd.shape[axis] as i64;
            let first = if start < 0 { size + start } else { start };
            let last = stop.map_or(size, |s| if s < 0 { size + s } else { s });
            let len = ((last - first).max(0) as usize).div_ceil(step);
            let mut out_shape = nd.shape.clone();
            out_shape[axis] = len;
            let expected = gather_ref(
                &nd,
                &out_shape,
                |o| {
                    let mut s = o.to_vec();
                    s[axis] = first as usize + o[axis] * step;
                    Some(s)
                },
                0.0,
            );
            check(&g, &[("x", &x)], &[], &[to_tensor(&expected, dtype)], 1.0);
        }
    }
}

#[test]
fn concat_broadcast_and_pad() {
    let mut rng = Rng(33);
    for dtype in all_dtypes() {
        let a = sample(&mut rng, dtype, &[2, 3]);
        let b = sample(&mut rng, dtype, &[2, 1]);
        let c = sample(&mut rng, dtype, &[2, 0]);
        let g = graph_of(
            &[
                ("a", dtype, declared(&[2, 3], &[(1, "s")])),
                ("b", dtype, declared(&[2, 1], &[])),
                ("c", dtype, declared(&[2, 0], &[])),
            ],
            |bld, i| bld.concat(&[i[0], i[1], i[2], i[0]], 1).unwrap(),
        );
        let (na, nb) = (Nd::of(&a), Nd::of(&b));
        let data = indices(&[2, 7])
            .iter()
            .map(|o| match o[1] {
                0..=2 => na.at(&[o[0], o[1]]),
                3 => nb.at(&[o[0], 0]),
                j => na.at(&[o[0], j - 4]),
            })
            .collect();
        check(
            &g,
            &[("a", &a), ("b", &b), ("c", &c)],
            &[],
            &[to_tensor(&Nd::new(&[2, 7], data), dtype)],
            1.0,
        );

        // Broadcast a column to a runtime number of rows given in `dims`.
        let g = graph_of(&[("b", dtype, declared(&[2, 1], &[]))], |bld, i| {
            bld.op(
                Op::Broadcast(rlx::ir::Broadcast {
                    shape: Shape::new([Dim::sym("n"), Dim::from(2), Dim::from(5)]),
                }),
                &[i[0]],
            )
            .unwrap()
        });
        let expected = gather_ref(&nb, &[3, 2, 5], |o| Some(vec![o[1], 0]), 0.0);
        check(
            &g,
            &[("b", &b)],
            &[("n", 3)],
            &[to_tensor(&expected, dtype)],
            1.0,
        );

        let value = if dtype == DType::Bool {
            Scalar::Bool(true)
        } else {
            Scalar::Float(7.0)
        };
        let g = graph_of(&[("a", dtype, declared(&[2, 3], &[]))], |bld, i| {
            bld.op(
                Op::Pad(Pad {
                    pads: vec![(1, 0), (2, 1)],
                    value,
                }),
                &[i[0]],
            )
            .unwrap()
        });
        let fill = if dtype == DType::Bool { 1.0 } else { 7.0 };
        let expected = gather_ref(
            &na,
            &[3, 6],
            |o| (o[0] >= 1 && (2..5).contains(&o[1])).then(|| vec![o[0] - 1, o[1] - 2]),
            fill,
        );
        check(&g, &[("a", &a)], &[], &[to_tensor(&expected, dtype)], 1.0);
    }
}

#[test]
fn gather_embeddings_and_along_inner_axes() {
    let mut rng = Rng(34);
    for dtype in all_dtypes() {
        for index in [DType::I32, DType::I64] {
            let table = sample(&mut rng, dtype, &[10, 4]);
            let ids = random(&mut rng, index, &[2, 3], 0.0, 9.0);
            let g = graph_of(
                &[
                    ("t", dtype, declared(&[10, 4], &[])),
                    ("ids", index, declared(&[2, 3], &[(0, "b"), (1, "s")])),
                ],
                |b, i| b.op(Op::Gather(Gather { axis: 0 }), &[i[0], i[1]]).unwrap(),
            );
            let (nt, ni) = (Nd::of(&table), Nd::of(&ids));
            let expected = gather_ref(
                &nt,
                &[2, 3, 4],
                |o| Some(vec![ni.at(&[o[0], o[1]]) as usize, o[2]]),
                0.0,
            );
            check(
                &g,
                &[("t", &table), ("ids", &ids)],
                &[],
                &[to_tensor(&expected, dtype)],
                1.0,
            );

            let idx = random(&mut rng, index, &[5], 0.0, 3.0);
            let g = graph_of(
                &[
                    ("t", dtype, declared(&[10, 4], &[])),
                    ("i", index, declared(&[5], &[])),
                ],
                |b, i| b.op(Op::Gather(Gather { axis: 1 }), &[i[0], i[1]]).unwrap(),
            );
            let ni = Nd::of(&idx);
            let expected = gather_ref(
                &nt,
                &[10, 5],
                |o| Some(vec![o[0], ni.at(&[o[1]]) as usize]),
                0.0,
            );
            check(
                &g,
                &[("t", &table), ("i", &idx)],
                &[],
                &[to_tensor(&expected, dtype)],
                1.0,
            );
        }
    }
}

#[test]
fn gather_out_of_range_is_an_error() {
    let g = graph_of(
        &[
            ("t", DType::F32, declared(&[4, 2], &[])),
            ("i", DType::I64, declared(&[2], &[])),
        ],
        |b, i| b.op(Op::Gather(Gather { axis: 0 }), &[i[0], i[1]]).unwrap(),
    );
    crate::on_every_backend!(label, backend => { gather_out_of_range_on(label, &backend, &g) });
}

fn gather_out_of_range_on<B: rlx::backend::Backend>(label: &str, backend: &B, g: &rlx::ir::Graph) {
    let exe = backend.compile(g).unwrap();
    let t = HostTensor::zeros(DType::F32, [4, 2]);
    for bad in [4i64, -1] {
        let i = HostTensor::from_vec(vec![0i64, bad], [2]).unwrap();
        let err = exe
            .run(&[("t", t.view()), ("i", i.view())], &[])
            .unwrap_err();
        let RunError::IndexOutOfRange { at, index, size } = &err else {
            panic!("{label}: {err:?}");
        };
        assert_eq!((at.op, *index, *size), ("gather", bad, 4), "{label}");
        let origin = at
            .origin
            .expect("the builder records where the node was made");
        assert_eq!(origin.file(), file!(), "{label}");
        let message = err.to_string();
        assert!(
            message.contains("`gather` (built at tests/ops/movement.rs")
                && message.ends_with(&format!(
                    ": index {bad} is out of range for an axis of size 4"
                )),
            "{label}: {message}"
        );
    }
}

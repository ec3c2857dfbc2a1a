//! Reshape, permute, slice, concat, broadcast, pad, gather, scatter-add, windows at
//! run-time offsets (dynamic slice, slice update) and stop-gradient: values and gradients.

use rlx::backend::{Backend, Executable, RunError};
use rlx::builder::GraphBuilder;
use rlx::ir::{
    Broadcast, DType, Dim, DynamicSlice, Gather, Op, Pad, ReduceOp, Scalar, ScatterAdd, Shape,
    Slice, SliceUpdate,
};
use rlx::tensor::HostTensor;

use crate::gradient::{Input, grad_check, op};
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

/// Axes, window sizes, offsets and the offsets' shape of a dynamic slice.
type WindowCase = (&'static [usize], &'static [usize], &'static [i64], Shape);

/// A window of `[3, 5, 4]` read at run-time offsets: one axis with a scalar offset, two
/// axes with a vector (of a symbolic axis), and the whole axis.
#[test]
fn dynamic_slice_reads_a_window_at_run_time_offsets() {
    let mut rng = Rng(36);
    for dtype in all_dtypes() {
        for index in [DType::I32, DType::I64] {
            let x = sample(&mut rng, dtype, &[3, 5, 4]);
            let nx = Nd::of(&x);
            let cases: [WindowCase; 3] = [
                (&[1], &[2], &[3], Shape::new([])),
                (&[0, 1], &[2, 3], &[1, 2], Shape::new([Dim::from(2)])),
                (&[2], &[4], &[0], Shape::new([Dim::from(1)])),
            ];
            for (axes, sizes, offsets, offsets_shape) in cases {
                let g = graph_of(
                    &[
                        ("x", dtype, declared(&[3, 5, 4], &[(1, "s")])),
                        ("o", index, offsets_shape.clone()),
                    ],
                    |b, i| {
                        let op = Op::DynamicSlice(DynamicSlice {
                            axes: axes.to_vec(),
                            sizes: sizes.iter().map(|&n| Dim::from(n)).collect(),
                        });
                        b.op(op, &[i[0], i[1]]).unwrap()
                    },
                );
                let mut out_shape = vec![3, 5, 4];
                let mut start = vec![0; 3];
                for ((&a, &n), &o) in axes.iter().zip(sizes).zip(offsets) {
                    out_shape[a] = n;
                    start[a] = o as usize;
                }
                let expected = gather_ref(
                    &nx,
                    &out_shape,
                    |o| Some(o.iter().zip(&start).map(|(i, s)| i + s).collect()),
                    0.0,
                );
                let dims: Vec<usize> = offsets_shape.static_dims().unwrap();
                let o = to_tensor(
                    &Nd::new(&dims, offsets.iter().map(|&v| v as f64).collect()),
                    index,
                );
                check(
                    &g,
                    &[("x", &x), ("o", &o)],
                    &[],
                    &[to_tensor(&expected, dtype)],
                    1.0,
                );
            }
        }
    }
}

/// An update written over a window of `[4, 6]` at run-time offsets: a row into a cache, a
/// block along both axes, and an empty update.
#[test]
fn slice_update_writes_a_window_at_run_time_offsets() {
    let mut rng = Rng(37);
    for dtype in all_dtypes() {
        for index in [DType::I32, DType::I64] {
            let x = sample(&mut rng, dtype, &[4, 6]);
            let nx = Nd::of(&x);
            let cases: [(&[usize], [usize; 2], &[i64]); 3] = [
                (&[0], [1, 6], &[3]),
                (&[0, 1], [2, 3], &[1, 3]),
                (&[1], [4, 0], &[6]),
            ];
            for (axes, update_shape, offsets) in cases {
                let update = sample(&mut rng, dtype, &update_shape);
                let nu = Nd::of(&update);
                let g = graph_of(
                    &[
                        ("x", dtype, declared(&[4, 6], &[])),
                        ("u", dtype, declared(&update_shape, &[])),
                        ("o", index, Shape::new([Dim::from(axes.len())])),
                    ],
                    |b, i| {
                        let op = Op::SliceUpdate(SliceUpdate {
                            axes: axes.to_vec(),
                        });
                        b.op(op, &[i[0], i[1], i[2]]).unwrap()
                    },
                );
                let mut start = [0usize; 2];
                for (&a, &o) in axes.iter().zip(offsets) {
                    start[a] = o as usize;
                }
                let expected = gather_ref(&nx, &[4, 6], |o| Some(o.to_vec()), 0.0);
                let data = indices(&[4, 6])
                    .iter()
                    .map(|o| {
                        let inside =
                            (0..2).all(|a| o[a] >= start[a] && o[a] < start[a] + update_shape[a]);
                        if inside {
                            nu.at(&[o[0] - start[0], o[1] - start[1]])
                        } else {
                            expected.at(o)
                        }
                    })
                    .collect();
                let o = to_tensor(
                    &Nd::new(&[axes.len()], offsets.iter().map(|&v| v as f64).collect()),
                    index,
                );
                check(
                    &g,
                    &[("x", &x), ("u", &update), ("o", &o)],
                    &[],
                    &[to_tensor(&Nd::new(&[4, 6], data), dtype)],
                    1.0,
                );
            }
        }
    }
}

/// Windows per row of axis 0 (offsets `[rows, axes]`): each row of `[3, 5, 4]` reads, or
/// has written over, a window at offsets of its own; a row's offset outside its axis fails
/// the run.
#[test]
fn windows_per_row_at_run_time_offsets() {
    let mut rng = Rng(38);
    // (axes, one row's window, offsets row after row)
    let cases: [(&[usize], [usize; 2], &[i64]); 3] = [
        (&[1], [2, 4], &[0, 3, 1]),
        (&[1, 2], [2, 3], &[0, 1, 3, 0, 1, 1]),
        (&[2], [5, 1], &[3, 0, 2]),
    ];
    for dtype in all_dtypes() {
        for index in [DType::I32, DType::I64] {
            for (axes, [w1, w2], offsets) in cases {
                let x = sample(&mut rng, dtype, &[3, 5, 4]);
                let update = sample(&mut rng, dtype, &[3, w1, w2]);
                let (nx, nu) = (Nd::of(&x), Nd::of(&update));
                let starts: Vec<[usize; 3]> = offsets
                    .chunks(axes.len())
                    .map(|row| {
                        let mut start = [0; 3];
                        for (&a, &o) in axes.iter().zip(row) {
                            start[a] = o as usize;
                        }
                        start
                    })
                    .collect();
                let o = to_tensor(
                    &Nd::new(
                        &[3, axes.len()],
                        offsets.iter().map(|&v| v as f64).collect(),
                    ),
                    index,
                );
                let offsets_ty = Shape::new([Dim::from(3), Dim::from(axes.len())]);
                let read = graph_of(
                    &[
                        ("x", dtype, declared(&[3, 5, 4], &[])),
                        ("o", index, offsets_ty.clone()),
                    ],
                    |b, i| {
                        let window = [w1, w2];
                        let op = Op::DynamicSlice(DynamicSlice {
                            axes: axes.to_vec(),
                            sizes: axes.iter().map(|&a| Dim::from(window[a - 1])).collect(),
                        });
                        b.op(op, &[i[0], i[1]]).unwrap()
                    },
                );
                let window = gather_ref(
                    &nx,
                    &[3, w1, w2],
                    |o| Some(o.iter().zip(&starts[o[0]]).map(|(i, s)| i + s).collect()),
                    0.0,
                );
                check(
                    &read,
                    &[("x", &x), ("o", &o)],
                    &[],
                    &[to_tensor(&window, dtype)],
                    1.0,
                );
                let write = graph_of(
                    &[
                        ("x", dtype, declared(&[3, 5, 4], &[])),
                        ("u", dtype, declared(&[3, w1, w2], &[])),
                        ("o", index, offsets_ty),
                    ],
                    |b, i| {
                        let op = Op::SliceUpdate(SliceUpdate {
                            axes: axes.to_vec(),
                        });
                        b.op(op, &[i[0], i[1], i[2]]).unwrap()
                    },
                );
                let data = indices(&[3, 5, 4])
                    .iter()
                    .map(|o| {
                        let s = starts[o[0]];
                        let inside =
                            o[1] >= s[1] && o[1] < s[1] + w1 && o[2] >= s[2] && o[2] < s[2] + w2;
                        if inside {
                            nu.at(&[o[0], o[1] - s[1], o[2] - s[2]])
                        } else {
                            nx.at(o)
                        }
                    })
                    .collect();
                check(
                    &write,
                    &[("x", &x), ("u", &update), ("o", &o)],
                    &[],
                    &[to_tensor(&Nd::new(&[3, 5, 4], data), dtype)],
                    1.0,
                );
            }
        }
    }
    // One row's offset outside its axis: the run fails naming it.
    let write = graph_of(
        &[
            ("x", DType::F32, declared(&[3, 5, 4], &[])),
            ("u", DType::F32, declared(&[3, 2, 4], &[])),
            ("o", DType::I64, Shape::new([Dim::from(3), Dim::from(1)])),
        ],
        |b, i| {
            let op = Op::SliceUpdate(SliceUpdate { axes: vec![1] });
            b.op(op, &[i[0], i[1], i[2]]).unwrap()
        },
    );
    crate::on_every_backend!(label, backend => {
        let exe = backend.compile(&write).unwrap();
        let x = HostTensor::zeros(DType::F32, [3, 5, 4]);
        let u = HostTensor::zeros(DType::F32, [3, 2, 4]);
        let o = HostTensor::from_vec(vec![1i64, 4, 0], [3, 1]).unwrap();
        let err = exe
            .run(&[("x", x.view()), ("u", u.view()), ("o", o.view())], &[])
            .unwrap_err();
        let RunError::WindowOutOfRange { offset, window, size, .. } = err else {
            panic!("{label}: {err:?}");
        };
        assert_eq!((offset, window, size), (4, 2, 5), "{label}");
    });
}

#[test]
fn a_window_outside_its_axis_is_an_error() {
    let read = graph_of(
        &[
            ("x", DType::F32, declared(&[8, 2], &[])),
            ("o", DType::I64, Shape::new([])),
        ],
        |b, i| {
            let op = Op::DynamicSlice(DynamicSlice {
                axes: vec![0],
                sizes: vec![Dim::from(3)],
            });
            b.op(op, &[i[0], i[1]]).unwrap()
        },
    );
    let write = graph_of(
        &[
            ("x", DType::F32, declared(&[8, 2], &[])),
            ("u", DType::F32, declared(&[3, 2], &[])),
            ("o", DType::I64, Shape::new([])),
        ],
        |b, i| {
            let op = Op::SliceUpdate(SliceUpdate { axes: vec![0] });
            b.op(op, &[i[0], i[1], i[2]]).unwrap()
        },
    );
    crate::on_every_backend!(label, backend => {
        window_out_of_range_on(label, &backend, &read, "dynamic_slice");
        window_out_of_range_on(label, &backend, &write, "slice_update");
    });
}

fn window_out_of_range_on<B: rlx::backend::Backend>(
    label: &str,
    backend: &B,
    g: &rlx::ir::Graph,
    op: &str,
) {
    let exe = backend.compile(g).unwrap();
    let x = HostTensor::zeros(DType::F32, [8, 2]);
    let u = HostTensor::zeros(DType::F32, [3, 2]);
    for (bad, fine) in [(6i64, 5i64), (-1, 0)] {
        let run = |offset: i64| {
            let o = HostTensor::from_vec(vec![offset], []).unwrap();
            let mut inputs = vec![("x", x.view()), ("o", o.view())];
            if op == "slice_update" {
                inputs.push(("u", u.view()));
            }
            exe.run(&inputs, &[])
        };
        run(fine).unwrap_or_else(|e| panic!("{label} {op}: offset {fine}: {e}"));
        let err = run(bad).unwrap_err();
        let RunError::WindowOutOfRange {
            at,
            offset,
            window,
            size,
        } = &err
        else {
            panic!("{label} {op}: {err:?}");
        };
        assert_eq!((at.op, *offset, *window, *size), (op, bad, 3, 8), "{label}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("`{op}` (built at tests/ops/movement.rs"))
                && message.ends_with(&format!(
                    ": offset {bad} puts a window of 3 outside an axis of size 8"
                )),
            "{label}: {message}"
        );
    }
}

#[test]
fn scatter_add_accumulates_repeated_indices() {
    let mut rng = Rng(41);
    for dtype in FLOATS.into_iter().chain([DType::I32, DType::I64]) {
        for axis in 0..2 {
            let data = random(&mut rng, dtype, &[5, 4], 0.0, 5.0);
            let idx = HostTensor::from_vec(vec![1i64, 3, 1, 0], [4]).unwrap();
            let mut upd_shape = vec![5, 4];
            upd_shape[axis] = 4;
            let updates = random(&mut rng, dtype, &upd_shape, 0.0, 5.0);
            let g = graph_of(
                &[
                    ("d", dtype, declared(&[5, 4], &[])),
                    ("i", DType::I64, declared(&[4], &[])),
                    ("u", dtype, declared(&upd_shape, &[])),
                ],
                |b, i| {
                    b.op(Op::ScatterAdd(ScatterAdd { axis }), &[i[0], i[1], i[2]])
                        .unwrap()
                },
            );
            let mut expected = Nd::of(&data);
            let (nu, ni) = (Nd::of(&updates), Nd::of(&idx));
            for u in indices(&upd_shape) {
                let mut at = u.clone();
                at[axis] = ni.at(&[u[axis]]) as usize;
                let flat = at[0] * 4 + at[1];
                expected.data[flat] += nu.at(&u);
            }
            check(
                &g,
                &[("d", &data), ("i", &idx), ("u", &updates)],
                &[],
                &[to_tensor(&expected, dtype)],
                4.0,
            );
        }
    }
}

#[test]
fn gradient_movement() {
    let x = Input::float("x", &[2, 3, 4]).symbolic(0, "batch");
    grad_check("reshape", 900, &[x], &|g, i| {
        g.reshape(i[0], Shape::new([Dim::sym("batch"), Dim::Static(12)]))
            .unwrap()
    });
    let x = Input::float("x", &[2, 3, 4]);
    grad_check("permute", 901, &[x], &|g, i| {
        g.permute(i[0], &[2, 0, 1]).unwrap()
    });
    let x = Input::float("x", &[3, 1]);
    grad_check("broadcast", 902, &[x], &|g, i| {
        op(
            g,
            Op::Broadcast(Broadcast {
                shape: Shape::from([2, 3, 4]),
            }),
            &[i[0]],
        )
    });
    for (seed, (start, stop, step)) in [
        (1, Some(4), 1),
        (-5, None, 2),
        (0, Some(-1), 3),
        (2, Some(2), 1),
    ]
    .into_iter()
    .enumerate()
    {
        let x = Input::float("x", &[3, 7]);
        let label = format!("slice {start}:{stop:?}:{step}");
        grad_check(&label, 910 + seed as u64, &[x], &|g, i| {
            let s = Op::Slice(Slice {
                axis: 1,
                start,
                stop,
                step,
            });
            op(g, s, &[i[0]])
        });
    }
    let x = Input::float("x", &[5, 3]).symbolic(0, "seq");
    grad_check("slice of a symbolic axis", 920, &[x], &|g, i| {
        let s = Op::Slice(Slice {
            axis: 0,
            start: 1,
            stop: Some(-1),
            step: 1,
        });
        op(g, s, &[i[0]])
    });
    let a = Input::float("a", &[2, 3]);
    let b = Input::float("b", &[2, 1]);
    let c = Input::float("c", &[2, 2]);
    grad_check("concat", 930, &[a, b, c], &|g, i| {
        g.concat(&[i[0], i[1], i[2]], 1).unwrap()
    });
    let a = Input::float("a", &[2, 3]).symbolic(0, "n");
    let b = Input::float("b", &[4, 3]).symbolic(0, "m");
    let c = Input::float("c", &[3, 3]).symbolic(0, "k");
    grad_check("concat of symbolic sizes", 932, &[a, b, c], &|g, i| {
        g.concat(&[i[0], i[1], i[2]], 0).unwrap()
    });
    let a = Input::float("a", &[2, 3]).symbolic(0, "n");
    let b = Input::float("b", &[4, 3]);
    grad_check("concat after a symbolic size", 931, &[a, b], &|g, i| {
        g.concat(&[i[0], i[1]], 0).unwrap()
    });
    let x = Input::float("x", &[2, 3]);
    grad_check("pad", 940, &[x], &|g, i| {
        let p = Op::Pad(Pad {
            pads: vec![(1, 0), (2, 1)],
            value: Scalar::Float(0.5),
        });
        op(g, p, &[i[0]])
    });
    let data = Input::float("data", &[5, 3]);
    let idx = Input::indices("idx", &[2, 2], vec![4, 0, 4, 2]);
    grad_check("gather with repeats", 950, &[data, idx], &|g, i| {
        op(g, Op::Gather(Gather { axis: 0 }), &[i[0], i[1]])
    });
    let data = Input::float("data", &[3, 4]);
    let idx = Input::indices("idx", &[3], vec![1, 1, 3]);
    let updates = Input::float("updates", &[3, 3]);
    grad_check("scatter_add", 960, &[data, idx, updates], &|g, i| {
        op(
            g,
            Op::ScatterAdd(ScatterAdd { axis: 1 }),
            &[i[0], i[1], i[2]],
        )
    });
    let x = Input::float("x", &[4, 3]);
    let offsets = Input::indices("o", &[2], vec![1, 1]);
    grad_check("dynamic_slice", 970, &[x, offsets], &|g, i| {
        let window = Op::DynamicSlice(DynamicSlice {
            axes: vec![0, 1],
            sizes: vec![Dim::from(2), Dim::from(2)],
        });
        op(g, window, &[i[0], i[1]])
    });
    let x = Input::float("x", &[5, 3]).symbolic(0, "cap");
    let row = Input::float("row", &[2, 3]);
    let offsets = Input::indices("o", &[], vec![2]);
    grad_check("slice_update", 980, &[x, row, offsets], &|g, i| {
        let write = Op::SliceUpdate(SliceUpdate { axes: vec![0] });
        op(g, write, &[i[0], i[1], i[2]])
    });
    // Windows per row of axis 0.
    let x = Input::float("x", &[3, 5, 2]);
    let offsets = Input::indices("o", &[3, 1], vec![2, 0, 3]);
    grad_check("dynamic_slice per row", 971, &[x, offsets], &|g, i| {
        let window = Op::DynamicSlice(DynamicSlice {
            axes: vec![1],
            sizes: vec![Dim::from(2)],
        });
        op(g, window, &[i[0], i[1]])
    });
    let x = Input::float("x", &[3, 5, 2]);
    let rows = Input::float("rows", &[3, 1, 2]);
    let offsets = Input::indices("o", &[3, 1], vec![4, 0, 2]);
    grad_check("slice_update per row", 981, &[x, rows, offsets], &|g, i| {
        let write = Op::SliceUpdate(SliceUpdate { axes: vec![1] });
        op(g, write, &[i[0], i[1], i[2]])
    });
}

#[test]
fn stop_gradient_cuts_one_path() {
    // d/dx (x · stop(x)) = stop(x) = x, not 2x; the finite difference sees 2x, so this
    // checks the analytic value directly.
    use rlx::autodiff::{Wrt, gradients};
    use rlx::backend::{Backend, Executable};
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F64, [3]).unwrap();
    let cut = op(&mut b, Op::StopGradient, &[x]);
    let y = b.mul(x, cut).unwrap();
    let loss = b.reduce(ReduceOp::Sum, y, &[0], false).unwrap();
    b.output("loss", loss).unwrap();
    let graph = b.finish().unwrap();
    let t = gradients(&graph, "loss", &Wrt::Named(vec!["x".into()])).unwrap();
    let exe = rlx::cpu::CpuBackend::default().compile(&t).unwrap();
    let xs = rlx::tensor::HostTensor::from_vec(vec![1.0f64, -2.0, 3.0], [3]).unwrap();
    let out = exe.run(&[("x", xs.view())], &[]).unwrap();
    assert_eq!(out[1].to_f64_vec(), [1.0, -2.0, 3.0]);
}

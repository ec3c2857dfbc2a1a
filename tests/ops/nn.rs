use rlx::ir::{Attention, Conv, Custom, Pool, QuantizedMatMul, Rope, ScatterAdd, Sort, TopK};
use std::collections::BTreeMap;
use std::sync::Arc;

use rlx::backend::{Backend, Executable, RunError};
use rlx::cpu::{CpuBackend, CustomInputs, CustomKernel, TensorMut};
use rlx::ir::{AttentionMask, AttrValue, DType, Op, PoolKind, SortOutput, TensorType};
use rlx::tensor::HostTensor;

use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, INTS, Nd, Rng, indices, random, to_tensor};

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

/// Positions of one line sorted stably by value (NaN largest).
fn sorted_positions(line: &[f64], descending: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..line.len()).collect();
    order.sort_by(|&a, &b| {
        let ord = line[a].total_cmp(&line[b]);
        if descending { ord.reverse() } else { ord }
    });
    order
}

#[test]
fn sort_argsort_and_topk() {
    let mut rng = Rng(42);
    for dtype in FLOATS.into_iter().chain(INTS) {
        for axis in 0..2 {
            let x = random(&mut rng, dtype, &[4, 6], 0.0, 5.0); // ties
            let nx = Nd::of(&x);
            let line = |o: &[usize]| -> Vec<f64> {
                (0..nx.shape[axis])
                    .map(|k| {
                        let mut at = o.to_vec();
                        at[axis] = k;
                        nx.at(&at)
                    })
                    .collect()
            };
            for (op, keep, descending) in [
                (
                    Op::Sort(Sort {
                        axis,
                        descending: false,
                        output: SortOutput::Values,
                    }),
                    None,
                    false,
                ),
                (
                    Op::Sort(Sort {
                        axis,
                        descending: true,
                        output: SortOutput::Indices,
                    }),
                    None,
                    true,
                ),
                (
                    Op::TopK(TopK {
                        k: 3,
                        axis,
                        output: SortOutput::Values,
                    }),
                    Some(3),
                    true,
                ),
                (
                    Op::TopK(TopK {
                        k: 2,
                        axis,
                        output: SortOutput::Indices,
                    }),
                    Some(2),
                    true,
                ),
            ] {
                let want_indices = matches!(
                    op,
                    Op::Sort(Sort {
                        output: SortOutput::Indices,
                        ..
                    }) | Op::TopK(TopK {
                        output: SortOutput::Indices,
                        ..
                    })
                );
                let g = graph_of(&[("x", dtype, declared(&[4, 6], &[]))], |b, i| {
                    b.op(op.clone(), &[i[0]]).unwrap()
                });
                let mut out_shape = vec![4, 6];
                out_shape[axis] = keep.unwrap_or(out_shape[axis]);
                let data = indices(&out_shape)
                    .iter()
                    .map(|o| {
                        let order = sorted_positions(&line(o), descending);
                        let k = order[o[axis]];
                        if want_indices { k as f64 } else { line(o)[k] }
                    })
                    .collect();
                let out_dtype = if want_indices { DType::I64 } else { dtype };
                check(
                    &g,
                    &[("x", &x)],
                    &[],
                    &[to_tensor(&Nd::new(&out_shape, data), out_dtype)],
                    1.0,
                );
            }
        }
    }
}

#[test]
fn rope_both_layouts_with_offsets() {
    let mut rng = Rng(43);
    for dtype in FLOATS {
        for traditional in [false, true] {
            for (dims, offset) in [(8usize, None), (4, Some(5i64))] {
                let x = random(&mut rng, dtype, &[2, 3, 8], -1.0, 1.0);
                let op = Op::Rope(Rope {
                    dims,
                    base: 10000.0,
                    scale: 0.5,
                    traditional,
                });
                let mut inputs = vec![("x", dtype, declared(&[2, 3, 8], &[(1, "s")]))];
                if offset.is_some() {
                    inputs.push(("off", DType::I64, declared(&[], &[])));
                }
                let g = graph_of(&inputs, |b, i| b.op(op.clone(), i).unwrap());
                let nx = Nd::of(&x);
                let mut out = nx.clone();
                for b in 0..2 {
                    for s in 0..3 {
                        let pos = (offset.unwrap_or(0) as f64 + s as f64) * 0.5;
                        for i in 0..dims / 2 {
                            let theta = pos * 10000f64.powf(-2.0 * i as f64 / dims as f64);
                            let (p, q) = if traditional {
                                (2 * i, 2 * i + 1)
                            } else {
                                (i, i + dims / 2)
                            };
                            let (x1, x2) = (nx.at(&[b, s, p]), nx.at(&[b, s, q]));
                            out.data[(b * 3 + s) * 8 + p] = x1 * theta.cos() - x2 * theta.sin();
                            out.data[(b * 3 + s) * 8 + q] = x1 * theta.sin() + x2 * theta.cos();
                        }
                    }
                }
                let off = HostTensor::scalar(offset.unwrap_or(0));
                let mut given = vec![("x", &x)];
                if offset.is_some() {
                    given.push(("off", &off));
                }
                check(&g, &given, &[], &[to_tensor(&out, dtype)], 2.0);
            }
        }
    }
}

/// softmax(q kᵀ · scale + mask) v with the same masking rules as the op.
#[allow(clippy::too_many_arguments)]
fn attention_ref(
    q: &Nd,
    k: &Nd,
    v: &Nd,
    scale: f64,
    mask: AttentionMask,
    m: Option<&Nd>,
    group: usize,
) -> Nd {
    let r = q.shape.len();
    let (sq, d) = (q.shape[r - 2], q.shape[r - 1]);
    let (sk, dv) = (k.shape[r - 2], v.shape[r - 1]);
    let mut out_shape = q.shape.clone();
    out_shape[r - 1] = dv;
    let data = indices(&out_shape)
        .iter()
        .map(|o| {
            let lead = &o[..r - 2];
            let mut kv_lead = lead.to_vec();
            if r >= 3 {
                kv_lead[r - 3] /= group;
            }
            let i = o[r - 2];
            let pos = i + sk - sq;
            let scores: Vec<f64> = (0..sk)
                .map(|j| {
                    let visible = match mask {
                        AttentionMask::Causal => j <= pos,
                        AttentionMask::SlidingWindow(w) => j <= pos && j + w > pos,
                        _ => true,
                    };
                    if !visible {
                        return f64::NEG_INFINITY;
                    }
                    let at = |t: &Nd, lead: &[usize], row: usize, col: usize| {
                        let mut idx = lead.to_vec();
                        idx.extend([row, col]);
                        t.at(&idx)
                    };
                    let mut s = (0..d)
                        .map(|c| at(q, lead, i, c) * at(k, &kv_lead, j, c))
                        .sum::<f64>()
                        * scale;
                    if let Some(m) = m {
                        let mut idx = lead.to_vec();
                        idx.extend([i, j]);
                        let mv = m.at_broadcast(&idx);
                        if mask == AttentionMask::Tensor
                            && m.data.iter().all(|x| *x == 0.0 || *x == 1.0)
                            && m.shape.len() < 10
                        {
                            // Bool masks are passed as 0/1.
                        }
                        s += mv;
                    }
                    s
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if max == f64::NEG_INFINITY {
                return 0.0;
            }
            let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            (0..sk)
                .map(|j| {
                    let mut idx = kv_lead.clone();
                    idx.extend([j, o[r - 1]]);
                    e[j] / sum * v.at(&idx)
                })
                .sum()
        })
        .collect();
    Nd::new(&out_shape, data)
}

#[test]
fn attention_masks_and_grouped_heads() {
    let mut rng = Rng(44);
    for dtype in FLOATS {
        // (q, k, v shapes, mask, group)
        type Case = ([usize; 4], [usize; 4], [usize; 4], AttentionMask, usize);
        let cases: Vec<Case> = vec![
            (
                [2, 3, 5, 8],
                [2, 3, 5, 8],
                [2, 3, 5, 8],
                AttentionMask::None,
                1,
            ),
            (
                [2, 3, 5, 8],
                [2, 3, 5, 8],
                [2, 3, 5, 6],
                AttentionMask::Causal,
                1,
            ),
            (
                [1, 2, 2, 4],
                [1, 2, 7, 4],
                [1, 2, 7, 4],
                AttentionMask::Causal,
                1,
            ),
            (
                [1, 2, 6, 4],
                [1, 2, 6, 4],
                [1, 2, 6, 4],
                AttentionMask::SlidingWindow(2),
                1,
            ),
            (
                [1, 4, 3, 4],
                [1, 2, 3, 4],
                [1, 2, 3, 4],
                AttentionMask::None,
                2,
            ),
            // Several query blocks and key blocks: the online softmax across key blocks,
            // causal and windowed ranges that start or end inside a block.
            (
                [1, 3, 70, 8],
                [1, 3, 300, 8],
                [1, 3, 300, 5],
                AttentionMask::None,
                1,
            ),
            (
                [1, 2, 100, 4],
                [1, 2, 600, 4],
                [1, 2, 600, 4],
                AttentionMask::Causal,
                1,
            ),
            (
                [1, 1, 530, 4],
                [1, 1, 530, 4],
                [1, 1, 530, 4],
                AttentionMask::SlidingWindow(300),
                1,
            ),
            // Grouped heads with a value width other than the key width, queries over
            // several blocks and keys over several tiles of the fused GPU kernel.
            (
                [2, 6, 130, 16],
                [2, 2, 140, 16],
                [2, 2, 140, 12],
                AttentionMask::None,
                3,
            ),
        ];
        for (qs, ks, vs, mask, group) in cases {
            let q = random(&mut rng, dtype, &qs, -1.0, 1.0);
            let k = random(&mut rng, dtype, &ks, -1.0, 1.0);
            let v = random(&mut rng, dtype, &vs, -1.0, 1.0);
            let op = Op::Attention(Attention { scale: 0.35, mask });
            let g = graph_of(
                &[
                    ("q", dtype, declared(&qs, &[(0, "b")])),
                    ("k", dtype, declared(&ks, &[(0, "b")])),
                    ("v", dtype, declared(&vs, &[(0, "b")])),
                ],
                |b, i| b.op(op.clone(), i).unwrap(),
            );
            let expected = attention_ref(
                &Nd::of(&q),
                &Nd::of(&k),
                &Nd::of(&v),
                0.35,
                mask,
                None,
                group,
            );
            check(
                &g,
                &[("q", &q), ("k", &k), ("v", &v)],
                &[],
                &[to_tensor(&expected, dtype)],
                4.0,
            );
        }
        // Explicit masks: an additive float mask per query/key, and a BERT-style padding mask
        // `[B, 1, 1, Sk]` that differs per batch but not per head.
        let (qs, ms) = ([2usize, 3, 4, 8], [2usize, 1, 1, 4]);
        let q = random(&mut rng, dtype, &qs, -1.0, 1.0);
        let k = random(&mut rng, dtype, &qs, -1.0, 1.0);
        let v = random(&mut rng, dtype, &qs, -1.0, 1.0);
        let pad = to_tensor(
            &Nd::new(&ms, vec![0.0, 0.0, 0.0, -1e9, 0.0, 0.0, -1e9, -1e9]),
            dtype,
        );
        let additive = random(&mut rng, dtype, &[4, 4], -1.0, 1.0);
        for (mask_t, mshape) in [(&pad, ms.to_vec()), (&additive, vec![4, 4])] {
            let op = Op::Attention(Attention {
                scale: 0.35,
                mask: AttentionMask::Tensor,
            });
            let g = graph_of(
                &[
                    ("q", dtype, declared(&qs, &[])),
                    ("k", dtype, declared(&qs, &[])),
                    ("v", dtype, declared(&qs, &[])),
                    ("m", dtype, declared(&mshape, &[])),
                ],
                |b, i| b.op(op.clone(), i).unwrap(),
            );
            let expected = attention_ref(
                &Nd::of(&q),
                &Nd::of(&k),
                &Nd::of(&v),
                0.35,
                AttentionMask::Tensor,
                Some(&Nd::of(mask_t)),
                1,
            );
            check(
                &g,
                &[("q", &q), ("k", &k), ("v", &v), ("m", mask_t)],
                &[],
                &[to_tensor(&expected, dtype)],
                4.0,
            );
        }
        // A bool mask: true may attend; a fully masked row gives zeros.
        let keep = HostTensor::from_vec(
            vec![true, false, true, true, false, false, false, false],
            [2, 4],
        )
        .unwrap();
        let qs2 = [1usize, 2, 2, 4];
        let (q, k, v) = (
            random(&mut rng, dtype, &qs2, -1.0, 1.0),
            random(&mut rng, dtype, &[1, 2, 4, 4], -1.0, 1.0),
            random(&mut rng, dtype, &[1, 2, 4, 4], -1.0, 1.0),
        );
        let op = Op::Attention(Attention {
            scale: 0.5,
            mask: AttentionMask::Tensor,
        });
        let g = graph_of(
            &[
                ("q", dtype, declared(&qs2, &[])),
                ("k", dtype, declared(&[1, 2, 4, 4], &[])),
                ("v", dtype, declared(&[1, 2, 4, 4], &[])),
                ("m", DType::Bool, declared(&[2, 4], &[])),
            ],
            |b, i| b.op(op.clone(), i).unwrap(),
        );
        let additive = Nd::of(&keep).map(|x| if x != 0.0 { 0.0 } else { f64::NEG_INFINITY });
        let expected = attention_ref(
            &Nd::of(&q),
            &Nd::of(&k),
            &Nd::of(&v),
            0.5,
            AttentionMask::Tensor,
            Some(&additive),
            1,
        );
        assert!(expected.data[4..8].iter().all(|v| *v == 0.0));
        check(
            &g,
            &[("q", &q), ("k", &k), ("v", &v), ("m", &keep)],
            &[],
            &[to_tensor(&expected, dtype)],
            4.0,
        );
        // A bool mask over more keys than one block: rows whose first block is all masked
        // (the running maximum starts at -inf), rows masked everywhere, mixed rows.
        let (sq, sk) = (60usize, 300usize);
        let keep: Vec<bool> = (0..sq * sk)
            .map(|at| {
                let (i, j) = (at / sk, at % sk);
                match i % 3 {
                    0 => j >= 260,
                    1 => false,
                    _ => (j * 7 + i) % 5 != 0,
                }
            })
            .collect();
        let keep = HostTensor::from_vec(keep, [sq, sk]).unwrap();
        let (qs3, ks3) = ([1usize, 2, sq, 4], [1usize, 2, sk, 4]);
        let (q, k, v) = (
            random(&mut rng, dtype, &qs3, -1.0, 1.0),
            random(&mut rng, dtype, &ks3, -1.0, 1.0),
            random(&mut rng, dtype, &ks3, -1.0, 1.0),
        );
        let g = graph_of(
            &[
                ("q", dtype, declared(&qs3, &[])),
                ("k", dtype, declared(&ks3, &[])),
                ("v", dtype, declared(&ks3, &[])),
                ("m", DType::Bool, declared(&[sq, sk], &[])),
            ],
            |b, i| b.op(op.clone(), i).unwrap(),
        );
        let additive = Nd::of(&keep).map(|x| if x != 0.0 { 0.0 } else { f64::NEG_INFINITY });
        let expected = attention_ref(
            &Nd::of(&q),
            &Nd::of(&k),
            &Nd::of(&v),
            0.5,
            AttentionMask::Tensor,
            Some(&additive),
            1,
        );
        check(
            &g,
            &[("q", &q), ("k", &k), ("v", &v), ("m", &keep)],
            &[],
            &[to_tensor(&expected, dtype)],
            4.0,
        );
    }
}

/// A direct (no im2col) convolution or pooling reference over `[N, C, H, W]`.
#[allow(clippy::too_many_arguments)]
fn window_ref(
    x: &Nd,
    out_hw: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dil: [usize; 2],
    f: impl Fn(usize, usize, &dyn Fn(usize, usize) -> Option<(usize, usize)>) -> f64,
    n_out_channels: usize,
) -> Nd {
    let shape = [x.shape[0], n_out_channels, out_hw[0], out_hw[1]];
    let data = indices(&shape)
        .iter()
        .map(|o| {
            let tap = |ky: usize, kx: usize| -> Option<(usize, usize)> {
                let y = (o[2] * stride[0] + ky * dil[0]).checked_sub(pad[0])?;
                let xx = (o[3] * stride[1] + kx * dil[1]).checked_sub(pad[1])?;
                (y < x.shape[2] && xx < x.shape[3]).then_some((y, xx))
            };
            f(o[0], o[1], &tap)
        })
        .collect();
    Nd::new(&shape, data)
}

#[test]
fn conv_1d_and_2d_with_groups() {
    let mut rng = Rng(45);
    for dtype in FLOATS {
        // (x, w, stride, padding, dilation, groups, bias)
        type Case = (
            Vec<usize>,
            Vec<usize>,
            Vec<usize>,
            Vec<(usize, usize)>,
            Vec<usize>,
            usize,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                vec![2, 3, 7, 6],
                vec![4, 3, 3, 3],
                vec![1, 1],
                vec![(1, 1), (1, 1)],
                vec![1, 1],
                1,
                true,
            ),
            (
                vec![1, 4, 9, 9],
                vec![6, 2, 3, 2],
                vec![2, 1],
                vec![(1, 1), (0, 0)],
                vec![1, 2],
                2,
                false,
            ),
            (
                vec![2, 4, 10],
                vec![4, 1, 3],
                vec![1],
                vec![(2, 0)],
                vec![1],
                4,
                true,
            ),
        ];
        for (xs, ws, stride, padding, dilation, groups, with_bias) in cases {
            let x = random(&mut rng, dtype, &xs, -1.0, 1.0);
            let w = random(&mut rng, dtype, &ws, -1.0, 1.0);
            let bias = random(&mut rng, dtype, &[ws[0]], -1.0, 1.0);
            let op = Op::Conv(Conv {
                stride: stride.clone(),
                padding: padding.clone(),
                dilation: dilation.clone(),
                groups,
            });
            let mut inputs = vec![
                ("x", dtype, declared(&xs, &[(0, "n")])),
                ("w", dtype, declared(&ws, &[])),
            ];
            if with_bias {
                inputs.push(("b", dtype, declared(&[ws[0]], &[])));
            }
            let g = graph_of(&inputs, |b, i| b.op(op.clone(), i).unwrap());
            let out_ty = g[g.outputs()[0].node].ty.shape.clone();
            // View 1-D as 2-D with height 1.
            let two = |v: &[usize], fill: usize| {
                if v.len() == 1 {
                    [fill, v[0]]
                } else {
                    [v[0], v[1]]
                }
            };
            let mut x4 = Nd::of(&x);
            let mut w4 = Nd::of(&w);
            if xs.len() == 3 {
                x4.shape = vec![xs[0], xs[1], 1, xs[2]];
                w4.shape = vec![ws[0], ws[1], 1, ws[2]];
            }
            let dims: Vec<usize> = out_ty
                .dims()
                .iter()
                .skip(2)
                .map(|d| d.as_static().unwrap_or(0))
                .collect();
            let out_hw = two(&dims, 1);
            let (cg, og) = (xs[1] / groups, ws[0] / groups);
            let pads: Vec<usize> = padding.iter().map(|p| p.0).collect();
            let nb = Nd::of(&bias);
            let k = [w4.shape[2], w4.shape[3]];
            let expected = window_ref(
                &x4,
                out_hw,
                two(&stride, 1),
                two(&pads, 0),
                two(&dilation, 1),
                |n, o, tap| {
                    let g = o / og;
                    let mut acc = if with_bias { nb.at(&[o]) } else { 0.0 };
                    for c in 0..cg {
                        for ky in 0..k[0] {
                            for kx in 0..k[1] {
                                if let Some((y, xx)) = tap(ky, kx) {
                                    acc += x4.at(&[n, g * cg + c, y, xx]) * w4.at(&[o, c, ky, kx]);
                                }
                            }
                        }
                    }
                    acc
                },
                ws[0],
            );
            let expected = Nd {
                shape: out_ty
                    .dims()
                    .iter()
                    .map(|d| d.as_static().unwrap_or(xs[0]))
                    .collect(),
                data: expected.data,
            };
            let mut given = vec![("x", &x), ("w", &w)];
            if with_bias {
                given.push(("b", &bias));
            }
            check(&g, &given, &[], &[to_tensor(&expected, dtype)], 6.0);
        }
    }
}

#[test]
fn max_and_avg_pooling() {
    let mut rng = Rng(46);
    for dtype in FLOATS {
        for kind in [PoolKind::Max, PoolKind::Avg] {
            for (xs, kernel, stride, padding) in [
                (
                    vec![2, 3, 6, 7],
                    vec![2, 2],
                    vec![2, 2],
                    vec![(0, 0), (1, 1)],
                ),
                (vec![1, 2, 9], vec![3], vec![2], vec![(1, 1)]),
            ] {
                let x = random(&mut rng, dtype, &xs, -1.0, 1.0);
                let op = Op::Pool(Pool {
                    kind,
                    kernel: kernel.clone(),
                    stride: stride.clone(),
                    padding: padding.clone(),
                });
                let g = graph_of(&[("x", dtype, declared(&xs, &[]))], |b, i| {
                    b.op(op.clone(), i).unwrap()
                });
                let out_ty = g[g.outputs()[0].node].ty.shape.clone();
                let two = |v: &[usize], fill: usize| {
                    if v.len() == 1 {
                        [fill, v[0]]
                    } else {
                        [v[0], v[1]]
                    }
                };
                let mut x4 = Nd::of(&x);
                if xs.len() == 3 {
                    x4.shape = vec![xs[0], xs[1], 1, xs[2]];
                }
                let dims: Vec<usize> = out_ty
                    .dims()
                    .iter()
                    .skip(2)
                    .map(|d| d.as_static().unwrap())
                    .collect();
                let k = two(&kernel, 1);
                let pads: Vec<usize> = padding.iter().map(|p| p.0).collect();
                let expected = window_ref(
                    &x4,
                    two(&dims, 1),
                    two(&stride, 1),
                    two(&pads, 0),
                    [1, 1],
                    |n, c, tap| {
                        let mut vals = Vec::new();
                        for ky in 0..k[0] {
                            for kx in 0..k[1] {
                                match tap(ky, kx) {
                                    Some((y, xx)) => vals.push(x4.at(&[n, c, y, xx])),
                                    None if kind == PoolKind::Avg => vals.push(0.0),
                                    None => {}
                                }
                            }
                        }
                        match kind {
                            PoolKind::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                            PoolKind::Avg => vals.iter().sum::<f64>() / (k[0] * k[1]) as f64,
                        }
                    },
                    xs[1],
                );
                let expected = Nd {
                    shape: out_ty
                        .dims()
                        .iter()
                        .map(|d| d.as_static().unwrap())
                        .collect(),
                    data: expected.data,
                };
                check(&g, &[("x", &x)], &[], &[to_tensor(&expected, dtype)], 2.0);
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
            let q: Vec<u8> = (0..n * k)
                .map(|_| rng.int(0, (1 << bits) - 1) as u8)
                .collect();
            let packed: Vec<u8> = if bits == 8 {
                q.clone()
            } else {
                q.chunks(2).map(|p| p[0] | (p[1] << 4)).collect()
            };
            let w = HostTensor::from_vec(packed, [n, k * bits as usize / 8]).unwrap();
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

/// `y = x + attrs["shift"]` for f32, failing on a negative shift.
struct Shift;

impl CustomKernel for Shift {
    fn compute(
        &self,
        attrs: &BTreeMap<String, AttrValue>,
        inputs: &CustomInputs<'_>,
        out: TensorMut<'_>,
    ) -> Result<(), String> {
        let Some(AttrValue::Float(shift)) = attrs.get("shift") else {
            return Err("missing attribute `shift`".into());
        };
        if *shift < 0.0 {
            return Err(format!("shift {shift} is negative"));
        }
        let x = inputs.get(0).ok_or("needs an operand")?;
        for (o, i) in out.bytes.chunks_exact_mut(4).zip(x.bytes.chunks_exact(4)) {
            let v = f32::from_le_bytes(i.try_into().map_err(|_| "bad bytes")?) + *shift as f32;
            o.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

#[test]
fn custom_ops_run_registered_kernels_and_report_failures() {
    for (shift, expect_ok) in [(1.5, true), (-1.0, false)] {
        let attrs = BTreeMap::from([("shift".to_string(), AttrValue::Float(shift))]);
        let op = Op::Custom(Custom {
            name: "shift".into(),
            attrs,
            output: TensorType::new(DType::F32, declared(&[2, 2], &[(0, "n")])),
        });
        let g = graph_of(
            &[("x", DType::F32, declared(&[2, 2], &[(0, "n")]))],
            |b, i| {
                let y = b.op(op.clone(), i).unwrap();
                b.unary(rlx::ir::UnaryOp::Neg, y).unwrap()
            },
        );
        let backend = CpuBackend::default().with_custom_op("shift", Arc::new(Shift));
        let exe = backend.compile(&g).unwrap();
        let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
        let result = exe.run(&[("x", x.view())], &[]);
        if expect_ok {
            assert_eq!(
                result.unwrap()[0].as_slice::<f32>().unwrap(),
                &[-2.5, -3.5, -4.5, -5.5]
            );
        } else {
            assert_eq!(
                result.unwrap_err().to_string(),
                "custom op \"shift\" failed: shift -1 is negative"
            );
        }
    }
}

/// Swaps axes 1 and 2 of a rank-4 array.
fn swap_heads(x: &Nd) -> Nd {
    let s = &x.shape;
    let shape = [s[0], s[2], s[1], s[3]];
    let data = indices(&shape)
        .iter()
        .map(|i| x.at(&[i[0], i[2], i[1], i[3]]))
        .collect();
    Nd::new(&shape, data)
}

/// Heads split from `[B, S, H, D]` by a permute only the attention reads (and merged back by
/// one only the output feeds) are read and written in place on the CPU: no permute kernel
/// runs, and the results are those of the permuted graph. A permute something else also
/// reads, and an attention output the graph exposes, keep their copies.
#[test]
fn attention_reads_and_writes_split_heads_in_place() {
    let mut rng = Rng(45);
    let (b, s, h, d) = (2usize, 7usize, 3usize, 4usize);
    let split = [b, s, h, d];
    for dtype in FLOATS {
        let q = random(&mut rng, dtype, &split, -1.0, 1.0);
        let k = random(&mut rng, dtype, &split, -1.0, 1.0);
        let v = random(&mut rng, dtype, &split, -1.0, 1.0);
        let heads = |x: &HostTensor| swap_heads(&Nd::of(x));
        let attended = attention_ref(
            &heads(&q),
            &heads(&k),
            &heads(&v),
            0.4,
            AttentionMask::Causal,
            None,
            1,
        );
        let merged = swap_heads(&attended);
        // (expose the attention output, expose v's permute, permutes expected to run)
        for (expose_out, expose_v, permutes) in
            [(false, false, 0), (true, false, 1), (false, true, 1)]
        {
            let mut bld = rlx::builder::GraphBuilder::new();
            let ids: Vec<_> = ["q", "k", "v"]
                .iter()
                .map(|n| bld.input(n, dtype, split).unwrap())
                .collect();
            let perm = [0, 2, 1, 3];
            let p: Vec<_> = ids
                .iter()
                .map(|i| bld.permute(*i, &perm).unwrap())
                .collect();
            let op = Op::Attention(Attention {
                scale: 0.4,
                mask: AttentionMask::Causal,
            });
            let a = bld.op(op, &p).unwrap();
            let y = bld.permute(a, &perm).unwrap();
            bld.output("y", y).unwrap();
            let mut expected = vec![to_tensor(&merged, dtype)];
            if expose_out {
                bld.output("attended", a).unwrap();
                expected.push(to_tensor(&attended, dtype));
            }
            if expose_v {
                bld.output("v_heads", p[2]).unwrap();
                expected.push(to_tensor(&heads(&v), dtype));
            }
            let g = bld.finish().unwrap();
            let inputs = [("q", &q), ("k", &k), ("v", &v)];
            check(&g, &inputs, &[], &expected, 4.0);
            let exe = CpuBackend::default().compile(&g).unwrap();
            let views: Vec<_> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
            let profile = exe.profile(&views, &[], 1).unwrap();
            let ran = profile.steps.iter().filter(|st| st.op == "permute").count();
            assert_eq!(
                ran, permutes,
                "{dtype} expose_out={expose_out} expose_v={expose_v}"
            );
        }
    }
}

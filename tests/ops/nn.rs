//! Rope and attention: values and gradients, and the attention reading split heads in
//! place.

use rlx::backend::{Backend, Executable};
use rlx::cpu::CpuBackend;
use rlx::ir::{Attention, AttentionMask, CompareOp, DType, Op, Rope};
use rlx::tensor::HostTensor;

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, indices, random, to_tensor};

/// Frequencies of their own for `dims` rotated features, spread as Llama 3's scaling
/// leaves them: the fast pairs as `base` makes them, the slow ones slowed further.
fn own_frequencies(dims: usize) -> Vec<f64> {
    (0..dims / 2)
        .map(|i| 10000f64.powf(-2.0 * i as f64 / dims as f64) / (1.0 + i as f64))
        .collect()
}

#[test]
fn rope_both_layouts_with_offsets() {
    let mut rng = Rng(43);
    for dtype in FLOATS {
        for traditional in [false, true] {
            for (dims, offset, own) in [
                (8usize, None, false),
                (4, Some(5i64), false),
                (8, Some(3), true),
                (4, None, true),
            ] {
                let x = random(&mut rng, dtype, &[2, 3, 8], -1.0, 1.0);
                let freqs = own.then(|| own_frequencies(dims));
                let op = Op::Rope(Rope {
                    dims,
                    base: 10000.0,
                    scale: 0.5,
                    traditional,
                    freqs: freqs.clone().map(Into::into),
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
                            let frequency = match &freqs {
                                Some(f) => f[i],
                                None => 10000f64.powf(-2.0 * i as f64 / dims as f64),
                            };
                            let theta = pos * frequency;
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

/// Rope with one offset per row of axis 0 equals rope of each row alone at its offset
/// (the float64 reference of the scalar form, row by row).
#[test]
fn rope_with_an_offset_per_row() {
    let mut rng = Rng(44);
    let offsets = [4i64, 0, 9];
    for dtype in FLOATS {
        for traditional in [false, true] {
            let x = random(&mut rng, dtype, &[3, 2, 3, 8], -1.0, 1.0);
            let rope = Op::Rope(Rope {
                dims: 6,
                base: 10000.0,
                scale: 0.5,
                traditional,
                freqs: None,
            });
            let g = graph_of(
                &[
                    ("x", dtype, declared(&[3, 2, 3, 8], &[])),
                    ("off", DType::I64, declared(&[3], &[])),
                ],
                |b, i| b.op(rope.clone(), i).unwrap(),
            );
            let mut expected = Vec::new();
            for (row, &offset) in offsets.iter().enumerate() {
                let one = graph_of(
                    &[
                        ("x", dtype, declared(&[3, 2, 3, 8], &[])),
                        ("off", DType::I64, declared(&[], &[])),
                    ],
                    |b, i| {
                        let op = Op::Slice(rlx::ir::Slice {
                            axis: 0,
                            start: row as i64,
                            stop: Some(row as i64 + 1),
                            step: 1,
                        });
                        let x = b.op(op, &[i[0]]).unwrap();
                        b.op(rope.clone(), &[x, i[1]]).unwrap()
                    },
                );
                let off = HostTensor::scalar(offset);
                let given = [("x", &x), ("off", &off)];
                let out = rlx::ir::evaluate_reference(&one, &given, &[], &[]).unwrap();
                expected.extend(Nd::of(&out[0]).data);
            }
            let expected = to_tensor(&Nd::new(&[3, 2, 3, 8], expected), dtype);
            let off = HostTensor::from_vec(offsets.to_vec(), [3]).unwrap();
            check(&g, &[("x", &x), ("off", &off)], &[], &[expected], 2.0);
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
            // A decode step's one query row per head (the CPU's direct loops), grouped, over
            // two key blocks, with head and value widths that leave tails after the
            // vector-wide steps (83 = 5·16 + 3, 75 = 64 + 8 + 3).
            (
                [1, 4, 1, 83],
                [1, 2, 300, 83],
                [1, 2, 300, 75],
                AttentionMask::Causal,
                2,
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
            let op = Op::Attention(Attention {
                scale: 0.35,
                mask,
                key_length: false,
            });
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
                key_length: false,
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
            key_length: false,
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
                key_length: false,
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

#[test]
fn gradient_attention_every_mask_with_grouped_heads() {
    use rlx::ir::AttentionMask;
    let masks = [
        AttentionMask::None,
        AttentionMask::Causal,
        AttentionMask::SlidingWindow(2),
        AttentionMask::Tensor,
    ];
    for (seed, mask) in masks.into_iter().enumerate() {
        let q = Input::float("q", &[2, 4, 3, 5]);
        let k = Input::float("k", &[2, 2, 4, 5]);
        let v = Input::float("v", &[2, 2, 4, 6]);
        let mut inputs = vec![q, k, v];
        if mask == AttentionMask::Tensor {
            // An additive mask, differentiated too.
            inputs.push(Input::float("m", &[3, 4]));
        }
        let label = format!("attention {mask:?}");
        grad_check(&label, 1000 + seed as u64, &inputs, &|g, i| {
            op(
                g,
                Op::Attention(Attention {
                    scale: 0.4,
                    mask,
                    key_length: false,
                }),
                i,
            )
        });
    }
    // A boolean mask with one fully masked row.
    let q = Input::float("q", &[1, 2, 3, 4]);
    let k = Input::float("k", &[1, 2, 3, 4]);
    let v = Input::float("v", &[1, 2, 3, 4]);
    let m = Input::exact(
        "m",
        &[3, 3],
        vec![1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
    );
    grad_check("attention bool mask", 1010, &[q, k, v, m], &|g, i| {
        let half = g.scalar(0.5, DType::F64);
        let keep = g.compare(CompareOp::Gt, i[3], half).unwrap();
        op(
            g,
            Op::Attention(Attention {
                scale: 0.5,
                mask: AttentionMask::Tensor,
                key_length: false,
            }),
            &[i[0], i[1], i[2], keep],
        )
    });
    let q = Input::float("q", &[2, 5, 4]).symbolic(1, "seq");
    let k = Input::float("k", &[2, 5, 4]).symbolic(1, "seq");
    let v = Input::float("v", &[2, 5, 4]).symbolic(1, "seq");
    grad_check(
        "causal attention, symbolic seq",
        1011,
        &[q, k, v],
        &|g, i| {
            op(
                g,
                Op::Attention(Attention {
                    scale: 0.5,
                    mask: AttentionMask::Causal,
                    key_length: false,
                }),
                i,
            )
        },
    );
}

/// Attention over the first `n` keys equals attention over `k` and `v` sliced to `n` (and a
/// mask sliced alike), for every mask kind, grouped heads and `n` from 0 to all keys.
#[test]
fn attention_over_a_run_time_number_of_keys() {
    let mut rng = Rng(47);
    let masks = [
        AttentionMask::None,
        AttentionMask::Causal,
        AttentionMask::SlidingWindow(2),
        AttentionMask::Tensor,
    ];
    // (q, k, v, mask dims; key lengths): small heads, then decoding shapes that NVIDIA
    // GPUs run in RLX's decoding kernel: one query row for three heads of a key head, and
    // three rows for four heads over keys in several chunks (the split path).
    type Shapes = ([usize; 4], [usize; 4], [usize; 4], [usize; 2], [usize; 3]);
    let shapes: [Shapes; 3] = [
        ([1, 4, 2, 3], [1, 2, 5, 3], [1, 2, 5, 4], [2, 5], [0, 2, 5]),
        ([2, 6, 1, 8], [2, 2, 5, 8], [2, 2, 5, 4], [1, 5], [0, 2, 5]),
        (
            [1, 4, 3, 64],
            [1, 1, 1100, 64],
            [1, 1, 1100, 64],
            [3, 1100],
            [1, 700, 1100],
        ),
    ];
    for dtype in FLOATS {
        for mask in masks {
            for (qs, ks, vs, ms, lengths) in shapes {
                for n in lengths {
                    let q = random(&mut rng, dtype, &qs, -1.0, 1.0);
                    let k = random(&mut rng, dtype, &ks, -1.0, 1.0);
                    let v = random(&mut rng, dtype, &vs, -1.0, 1.0);
                    let m = random(&mut rng, dtype, &ms, -1.0, 0.0);
                    let length = HostTensor::from_vec(vec![n as i32], []).unwrap();
                    let tensor = mask == AttentionMask::Tensor;
                    let attention = |key_length| {
                        Op::Attention(Attention {
                            scale: 0.6,
                            mask,
                            key_length,
                        })
                    };
                    let mut inputs = vec![
                        ("q", dtype, declared(&qs, &[])),
                        ("k", dtype, declared(&ks, &[])),
                        ("v", dtype, declared(&vs, &[])),
                    ];
                    if tensor {
                        inputs.push(("m", dtype, declared(&ms, &[])));
                    }
                    inputs.push(("n", DType::I32, declared(&[], &[])));
                    let g = graph_of(&inputs, |b, i| b.op(attention(true), i).unwrap());
                    // The same over sliced operands, by the float64 reference.
                    let sliced = graph_of(&inputs[..inputs.len() - 1], |b, i| {
                        let cut = |b: &mut rlx::builder::GraphBuilder, x, axis| {
                            let op = Op::Slice(rlx::ir::Slice {
                                axis,
                                start: 0,
                                stop: Some(n as i64),
                                step: 1,
                            });
                            b.op(op, &[x]).unwrap()
                        };
                        let mut operands = vec![i[0], cut(b, i[1], 2), cut(b, i[2], 2)];
                        if tensor {
                            operands.push(cut(b, i[3], 1));
                        }
                        b.op(attention(false), &operands).unwrap()
                    });
                    let mut given = vec![("q", &q), ("k", &k), ("v", &v)];
                    if tensor {
                        given.push(("m", &m));
                    }
                    let expected = rlx::ir::evaluate_reference(&sliced, &given, &[], &[]).unwrap();
                    let expected = to_tensor(&Nd::of(&expected[0]), dtype);
                    given.push(("n", &length));
                    check(&g, &given, &[], &[expected], 1.0);
                }
            }
        }
    }
}

/// Attention over a number of keys per row of axis 0 equals each row's attention over its
/// own first keys (the float64 reference of sliced operands, row by row): small heads, and
/// decoding shapes NVIDIA GPUs run in RLX's decoding kernel (one chunk, and several).
#[test]
fn attention_over_a_number_of_keys_per_row() {
    let mut rng = Rng(48);
    let masks = [
        AttentionMask::None,
        AttentionMask::Causal,
        AttentionMask::SlidingWindow(2),
        AttentionMask::Tensor,
    ];
    type Shapes = (
        [usize; 4],
        [usize; 4],
        [usize; 4],
        [usize; 2],
        &'static [i32],
    );
    let shapes: [Shapes; 3] = [
        ([3, 6, 1, 8], [3, 2, 9, 8], [3, 2, 9, 4], [1, 9], &[0, 4, 9]),
        (
            [2, 9, 1, 64],
            [2, 3, 300, 64],
            [2, 3, 300, 64],
            [1, 300],
            &[130, 7],
        ),
        (
            [2, 4, 3, 64],
            [2, 1, 1100, 64],
            [2, 1, 1100, 64],
            [3, 1100],
            &[700, 1100],
        ),
    ];
    for dtype in FLOATS {
        for mask in masks {
            for (qs, ks, vs, ms, lengths) in shapes {
                let q = random(&mut rng, dtype, &qs, -1.0, 1.0);
                let k = random(&mut rng, dtype, &ks, -1.0, 1.0);
                let v = random(&mut rng, dtype, &vs, -1.0, 1.0);
                let m = random(&mut rng, dtype, &ms, -1.0, 0.0);
                let tensor = mask == AttentionMask::Tensor;
                let attention = |key_length| {
                    Op::Attention(Attention {
                        scale: 0.6,
                        mask,
                        key_length,
                    })
                };
                let mut inputs = vec![
                    ("q", dtype, declared(&qs, &[])),
                    ("k", dtype, declared(&ks, &[])),
                    ("v", dtype, declared(&vs, &[])),
                ];
                if tensor {
                    inputs.push(("m", dtype, declared(&ms, &[])));
                }
                let mut given = vec![("q", &q), ("k", &k), ("v", &v)];
                if tensor {
                    given.push(("m", &m));
                }
                let mut expected = Vec::new();
                for (row, &n) in lengths.iter().enumerate() {
                    let sliced = graph_of(&inputs, |b, i| {
                        let cut = |b: &mut rlx::builder::GraphBuilder, x, axis, start, stop| {
                            let op = Op::Slice(rlx::ir::Slice {
                                axis,
                                start,
                                stop: Some(stop),
                                step: 1,
                            });
                            b.op(op, &[x]).unwrap()
                        };
                        let row = row as i64;
                        let one =
                            |b: &mut rlx::builder::GraphBuilder, x| cut(b, x, 0, row, row + 1);
                        let (q, k, v) = (one(b, i[0]), one(b, i[1]), one(b, i[2]));
                        let mut operands = vec![
                            q,
                            cut(b, k, 2, 0, i64::from(n)),
                            cut(b, v, 2, 0, i64::from(n)),
                        ];
                        if tensor {
                            operands.push(cut(b, i[3], 1, 0, i64::from(n)));
                        }
                        b.op(attention(false), &operands).unwrap()
                    });
                    let out = rlx::ir::evaluate_reference(&sliced, &given, &[], &[]).unwrap();
                    expected.extend(Nd::of(&out[0]).data);
                }
                let mut out_shape = qs;
                out_shape[3] = vs[3];
                let expected = to_tensor(&Nd::new(&out_shape, expected), dtype);
                inputs.push(("n", DType::I32, declared(&[lengths.len()], &[])));
                let g = graph_of(&inputs, |b, i| b.op(attention(true), i).unwrap());
                let n = HostTensor::from_vec(lengths.to_vec(), [lengths.len()]).unwrap();
                given.push(("n", &n));
                check(&g, &given, &[], &[expected], 1.0);
            }
        }
    }
    // One row's length past the keys fails the run, after a window written per row (two
    // checks in one run).
    let g = graph_of(
        &[
            ("q", DType::F32, declared(&[2, 2, 1, 4], &[])),
            ("k", DType::F32, declared(&[2, 1, 5, 4], &[])),
            ("u", DType::F32, declared(&[2, 1, 1, 4], &[])),
            ("n", DType::I64, declared(&[2], &[])),
            ("o", DType::I64, declared(&[2, 1], &[])),
        ],
        |b, i| {
            let write = Op::SliceUpdate(rlx::ir::SliceUpdate { axes: vec![2] });
            let k = b.op(write, &[i[1], i[2], i[4]]).unwrap();
            let attend = Op::Attention(Attention {
                scale: 0.5,
                mask: AttentionMask::Causal,
                key_length: true,
            });
            b.op(attend, &[i[0], k, k, i[3]]).unwrap()
        },
    );
    crate::on_every_backend!(label, backend => {
        use rlx::backend::{Backend, Executable, RunError};
        let exe = backend.compile(&g).unwrap();
        let q = HostTensor::zeros(DType::F32, [2, 2, 1, 4]);
        let k = HostTensor::zeros(DType::F32, [2, 1, 5, 4]);
        let u = HostTensor::zeros(DType::F32, [2, 1, 1, 4]);
        let o = HostTensor::from_vec(vec![2i64, 4], [2, 1]).unwrap();
        let run = |lengths: Vec<i64>| {
            let n = HostTensor::from_vec(lengths, [2]).unwrap();
            let inputs = [
                ("q", q.view()),
                ("k", k.view()),
                ("u", u.view()),
                ("n", n.view()),
                ("o", o.view()),
            ];
            exe.run(&inputs, &[])
        };
        run(vec![3, 5]).unwrap_or_else(|e| panic!("{label}: {e}"));
        let err = run(vec![3, 6]).unwrap_err();
        let RunError::WindowOutOfRange { offset, window, size, .. } = err else {
            panic!("{label}: {err:?}");
        };
        assert_eq!((offset, window, size), (0, 6, 5), "{label}");
    });
}

#[test]
fn gradient_attention_over_a_run_time_number_of_keys() {
    use rlx::ir::AttentionMask;
    for (seed, mask) in [AttentionMask::Causal, AttentionMask::Tensor]
        .into_iter()
        .enumerate()
    {
        let mut inputs = vec![
            Input::float("q", &[2, 2, 3]),
            Input::float("k", &[2, 6, 3]),
            Input::float("v", &[2, 6, 4]),
        ];
        if mask == AttentionMask::Tensor {
            inputs.push(Input::float("m", &[2, 6]));
        }
        inputs.push(Input::indices("n", &[], vec![4]));
        let label = format!("attention over 4 of 6 keys, {mask:?}");
        grad_check(&label, 1020 + seed as u64, &inputs, &|g, i| {
            let attend = Op::Attention(Attention {
                scale: 0.5,
                mask,
                key_length: true,
            });
            op(g, attend, i)
        });
    }
    // A number of keys per row of axis 0.
    for (seed, mask) in [AttentionMask::Causal, AttentionMask::Tensor]
        .into_iter()
        .enumerate()
    {
        let mut inputs = vec![
            Input::float("q", &[2, 2, 2, 3]),
            Input::float("k", &[2, 1, 6, 3]),
            Input::float("v", &[2, 1, 6, 4]),
        ];
        if mask == AttentionMask::Tensor {
            inputs.push(Input::float("m", &[2, 6]));
        }
        inputs.push(Input::indices("n", &[2], vec![3, 6]));
        let label = format!("attention over 3 and 6 of 6 keys, {mask:?}");
        grad_check(&label, 1030 + seed as u64, &inputs, &|g, i| {
            let attend = Op::Attention(Attention {
                scale: 0.5,
                mask,
                key_length: true,
            });
            op(g, attend, i)
        });
    }
}

#[test]
fn gradient_rope_both_layouts() {
    for (seed, traditional) in [false, true].into_iter().enumerate() {
        let x = Input::float("x", &[2, 3, 8]);
        let label = format!("rope traditional={traditional}");
        grad_check(&label, 1100 + seed as u64, &[x], &|g, i| {
            let r = Op::Rope(Rope {
                dims: 6,
                base: 100.0,
                scale: 1.0,
                traditional,
                freqs: None,
            });
            op(g, r, &[i[0]])
        });
    }
    let x = Input::float("x", &[2, 3, 8]);
    grad_check("rope with frequencies of its own", 1103, &[x], &|g, i| {
        let r = Op::Rope(Rope {
            dims: 8,
            base: 10000.0,
            scale: 1.0,
            traditional: false,
            freqs: Some(own_frequencies(8).into()),
        });
        op(g, r, &[i[0]])
    });
    let x = Input::float("x", &[2, 1, 3, 4]);
    let offsets = Input::indices("offset", &[2], vec![3, 0]);
    grad_check(
        "rope with an offset per row",
        1104,
        &[x, offsets],
        &|g, i| {
            let r = Op::Rope(Rope {
                dims: 4,
                base: 10.0,
                scale: 0.5,
                traditional: false,
                freqs: None,
            });
            op(g, r, &[i[0], i[1]])
        },
    );
    let x = Input::float("x", &[1, 4, 4]);
    let offset = Input::indices("offset", &[], vec![3]);
    grad_check("rope with an offset", 1102, &[x, offset], &|g, i| {
        let r = Op::Rope(Rope {
            dims: 4,
            base: 10.0,
            scale: 0.5,
            traditional: false,
            freqs: None,
        });
        op(g, r, &[i[0], i[1]])
    });
}

//! Attention over int8 rows scaled back per row (`cast(k8) · ks`, an int8 key/value cache):
//! the CPU reads the int8 rows and their scales in place (`fused_attention`), with the
//! results of the ops themselves, for every mask, a run-time number of keys, grouped heads,
//! one query row and many (the direct loops and the GEMM path), more keys than one key
//! block, and int8 keys, values or both; a product the graph exposes stays unfused.

use rlx::backend::Backend;
use rlx::builder::GraphBuilder;
use rlx::cpu::CpuBackend;
use rlx::ir::{Attention, AttentionMask, BinaryOp, Broadcast, Cast, DType, NodeId, Op, Shape};
use rlx::tensor::HostTensor;

use crate::harness::check;
use crate::reference::{Nd, Rng, random, to_tensor};

/// `cast(rows, f32) · broadcast(scales)`.
fn scaled(b: &mut GraphBuilder, rows: NodeId, scales: NodeId, shape: &[usize]) -> NodeId {
    let cast = b.op(Op::Cast(Cast { to: DType::F32 }), &[rows]).unwrap();
    let spread = Op::Broadcast(Broadcast {
        shape: Shape::from(shape),
    });
    let spread = b.op(spread, &[scales]).unwrap();
    b.binary(BinaryOp::Mul, cast, spread).unwrap()
}

#[test]
fn attention_reads_int8_rows_in_place() {
    let mut rng = Rng(71);
    let masks = [
        AttentionMask::None,
        AttentionMask::Causal,
        AttentionMask::SlidingWindow(40),
        AttentionMask::Tensor,
    ];
    // (query rows, keys, n): one row and many, one key block and two.
    for (sq, sk, n) in [(1usize, 300usize, 290usize), (5, 20, 20), (9, 300, 270)] {
        for mask in masks {
            for (int8, key_length) in [
                ([true, true], true),
                ([true, false], false),
                ([false, true], true),
            ] {
                let (hq, hk, d, dv) = (4, 2, 8, 16);
                let (qs, ks, vs) = ([1, hq, sq, d], [1, hk, sk, d], [1, hk, sk, dv]);
                let (kss, vss) = ([1, hk, sk, 1], [1, hk, sk, 1]);
                let ms = [sq, sk];
                let tensor = mask == AttentionMask::Tensor;
                let q = random(&mut rng, DType::F32, &qs, -1.0, 1.0);
                let k8 = random(&mut rng, DType::I8, &ks, -127.0, 127.0);
                let v8 = random(&mut rng, DType::I8, &vs, -127.0, 127.0);
                let kf = random(&mut rng, DType::F32, &ks, -1.0, 1.0);
                let vf = random(&mut rng, DType::F32, &vs, -1.0, 1.0);
                let k_scale = random(&mut rng, DType::F32, &kss, 0.001, 0.01);
                let v_scale = random(&mut rng, DType::F32, &vss, 0.001, 0.01);
                let m = random(&mut rng, DType::F32, &ms, -1.0, 0.0);
                let length = HostTensor::from_vec(vec![n as i64], []).unwrap();
                let build = |expose: bool| {
                    let mut b = GraphBuilder::new();
                    let q_in = b.input("q", DType::F32, qs).unwrap();
                    let mut operands = vec![q_in];
                    for (i, (name, shape, scale_shape)) in
                        [("k", &ks, &kss), ("v", &vs, &vss)].into_iter().enumerate()
                    {
                        operands.push(if int8[i] {
                            let rows = b.input(name, DType::I8, *shape).unwrap();
                            let scale_name = format!("{name}_scale");
                            let scales = b.input(&scale_name, DType::F32, *scale_shape).unwrap();
                            let product = scaled(&mut b, rows, scales, shape);
                            if expose && i == 0 {
                                b.output("keys", product).unwrap();
                            }
                            product
                        } else {
                            b.input(name, DType::F32, *shape).unwrap()
                        });
                    }
                    if tensor {
                        operands.push(b.input("m", DType::F32, ms).unwrap());
                    }
                    if key_length {
                        operands.push(b.input("n", DType::I64, [0usize; 0]).unwrap());
                    }
                    let op = Op::Attention(Attention {
                        scale: 0.3,
                        mask,
                        key_length,
                    });
                    let y = b.op(op, &operands).unwrap();
                    b.output("y", y).unwrap();
                    b.finish().unwrap()
                };
                let mut given: Vec<(&str, &HostTensor)> = vec![("q", &q)];
                given.push(if int8[0] { ("k", &k8) } else { ("k", &kf) });
                given.push(if int8[1] { ("v", &v8) } else { ("v", &vf) });
                if int8[0] {
                    given.push(("k_scale", &k_scale));
                }
                if int8[1] {
                    given.push(("v_scale", &v_scale));
                }
                if tensor {
                    given.push(("m", &m));
                }
                if key_length {
                    given.push(("n", &length));
                }
                let label = format!("sq={sq} sk={sk} {mask:?} int8={int8:?}");
                for expose in [false, true] {
                    let g = build(expose);
                    let expected = rlx::ir::evaluate_reference(&g, &given, &[], &[]).unwrap();
                    let expected: Vec<HostTensor> = expected
                        .iter()
                        .map(|e| to_tensor(&Nd::of(e), DType::F32))
                        .collect();
                    check(&g, &given, &[], &expected, 2.0);
                    let lowered = CpuBackend::default()
                        .compile(&g)
                        .unwrap()
                        .lowered()
                        .to_string();
                    let mut attrs = Vec::new();
                    attrs.extend((int8[0] && !expose).then_some("int8_keys"));
                    attrs.extend(int8[1].then_some("int8_values"));
                    let fused = format!("fused_attention[{}]", attrs.join(", "));
                    if attrs.is_empty() {
                        assert!(!lowered.contains("fused_attention"), "{label}: {lowered}");
                    } else {
                        assert!(lowered.contains(&fused), "{label}: {fused} in {lowered}");
                    }
                }
            }
        }
    }
}

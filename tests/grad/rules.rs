//! One or more cases per differentiable op.

use rlx::builder::GraphBuilder;
use rlx::ir::{
    Attention, Broadcast, Conv, ConvTranspose, Cumsum, Gather, LayerNorm, MatMul, Pad, Pool,
    RmsNorm, Rope, ScatterAdd, Slice, Softmax, Sort, TopK, Upsample,
};
use rlx::ir::{BinaryOp, CompareOp, DType, Dim, NodeId, Op, ReduceOp, Scalar, Shape, UnaryOp};

use crate::harness::{Input, grad_check};

fn op(b: &mut GraphBuilder, op: Op, inputs: &[NodeId]) -> NodeId {
    b.op(op, inputs).unwrap()
}

#[test]
fn unary_math() {
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
fn binary_math_with_broadcasting() {
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
fn select_and_compare() {
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
fn matmul_every_transpose_with_batch_broadcast() {
    for (seed, (ta, tb)) in [(false, false), (true, false), (false, true), (true, true)]
        .into_iter()
        .enumerate()
    {
        let a_dims = if ta { [2, 4, 3] } else { [2, 3, 4] };
        let b_dims = if tb { [5, 4] } else { [4, 5] };
        let a = Input::float("a", &a_dims).symbolic(0, "batch");
        let b = Input::float("b", &b_dims);
        let label = format!("matmul ta={ta} tb={tb}");
        grad_check(&label, 300 + seed as u64, &[a, b], &|g, i| {
            let m = Op::MatMul(MatMul {
                transpose_a: ta,
                transpose_b: tb,
            });
            op(g, m, &[i[0], i[1]])
        });
    }
}

#[test]
fn solve() {
    // A well-conditioned system: diagonal 3 plus noise.
    let a: Vec<f64> = (0..9)
        .map(|k| {
            if k % 4 == 0 {
                3.0
            } else {
                0.1 * k as f64 - 0.4
            }
        })
        .collect();
    let a = Input::exact("a", &[3, 3], a);
    let b = Input::float("b", &[3, 2]);
    grad_check("solve", 400, &[a, b], &|g, i| {
        op(g, Op::Solve, &[i[0], i[1]])
    });
}

#[test]
fn reductions() {
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
fn cumsum_every_direction() {
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

#[test]
fn softmax_and_log_softmax() {
    for log in [false, true] {
        let x = Input::float("x", &[3, 5])
            .range(-2.0, 2.0)
            .symbolic(0, "batch");
        grad_check(&format!("softmax log={log}"), 700, &[x], &|g, i| {
            op(g, Op::Softmax(Softmax { axis: 1, log }), &[i[0]])
        });
    }
}

#[test]
fn layer_and_rms_norm() {
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

#[test]
fn movement() {
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
}

#[test]
fn casts_between_floats() {
    // f64 -> f64 through a widening round trip of the cotangent: exact.
    let x = Input::float("x", &[3]);
    grad_check("cast", 970, &[x], &|g, i| {
        let y = g.cast(i[0], DType::F64).unwrap();
        g.mul(y, y).unwrap()
    });
}

#[test]
fn attention_every_mask_with_grouped_heads() {
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
            op(g, Op::Attention(Attention { scale: 0.4, mask }), i)
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
                }),
                i,
            )
        },
    );
}

#[test]
fn rope_both_layouts() {
    for (seed, traditional) in [false, true].into_iter().enumerate() {
        let x = Input::float("x", &[2, 3, 8]);
        let label = format!("rope traditional={traditional}");
        grad_check(&label, 1100 + seed as u64, &[x], &|g, i| {
            let r = Op::Rope(Rope {
                dims: 6,
                base: 100.0,
                scale: 1.0,
                traditional,
            });
            op(g, r, &[i[0]])
        });
    }
    let x = Input::float("x", &[1, 4, 4]);
    let offset = Input::indices("offset", &[], vec![3]);
    grad_check("rope with an offset", 1102, &[x, offset], &|g, i| {
        let r = Op::Rope(Rope {
            dims: 4,
            base: 10.0,
            scale: 0.5,
            traditional: false,
        });
        op(g, r, &[i[0], i[1]])
    });
}

#[test]
fn conv_and_its_transpose() {
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
            vec![2, 3, 5, 6],
            vec![4, 3, 3, 2],
            vec![2, 1],
            vec![(1, 0), (1, 1)],
            vec![1, 2],
            1,
            true,
        ),
        (
            vec![1, 4, 7],
            vec![6, 2, 3],
            vec![2],
            vec![(1, 1)],
            vec![1],
            2,
            false,
        ),
        (
            vec![2, 2, 9],
            vec![2, 2, 2],
            vec![3],
            vec![(0, 2)],
            vec![2],
            1,
            true,
        ),
    ];
    for (seed, (xs, ws, stride, padding, dilation, groups, bias)) in cases.into_iter().enumerate() {
        let mut inputs = vec![Input::float("x", &xs), Input::float("w", &ws)];
        if bias {
            inputs.push(Input::float("b", &[ws[0]]));
        }
        let conv = Op::Conv(Conv {
            stride: stride.clone(),
            padding: padding.clone(),
            dilation: dilation.clone(),
            groups,
        });
        grad_check(
            &format!("conv {conv}"),
            1200 + seed as u64,
            &inputs,
            &|g, i| op(g, conv.clone(), i),
        );
        // The transpose with the same geometry: the weight [C_in, C_out/groups, *k].
        let tw = {
            let mut t = ws.clone();
            t[0] = xs[1];
            t[1] = ws[0] / groups;
            t
        };
        let mut inputs = vec![Input::float("x", &xs), Input::float("w", &tw)];
        if bias {
            inputs.push(Input::float("b", &[tw[1] * groups]));
        }
        let output_padding: Vec<usize> = stride.iter().map(|s| s - 1).collect();
        let t = Op::ConvTranspose(ConvTranspose {
            stride: stride.clone(),
            padding: padding.clone(),
            output_padding,
            dilation: dilation.clone(),
            groups,
        });
        grad_check(&format!("{t}"), 1210 + seed as u64, &inputs, &|g, i| {
            op(g, t.clone(), i)
        });
    }
}

#[test]
fn pooling_both_kinds() {
    use rlx::ir::PoolKind;
    for (seed, kind) in [PoolKind::Avg, PoolKind::Max].into_iter().enumerate() {
        let x = Input::float("x", &[2, 3, 5, 6]);
        let p = Op::Pool(Pool {
            kind,
            kernel: vec![3, 2],
            stride: vec![2, 2],
            padding: vec![(1, 1), (0, 1)],
        });
        grad_check(&format!("{p}"), 1300 + seed as u64, &[x], &|g, i| {
            op(g, p.clone(), i)
        });
        let x = Input::float("x", &[1, 2, 7]);
        let p = Op::Pool(Pool {
            kind,
            kernel: vec![3],
            stride: vec![1],
            padding: vec![(1, 1)],
        });
        grad_check(
            &format!("{p} 1-D overlapping"),
            1310 + seed as u64,
            &[x],
            &|g, i| op(g, p.clone(), i),
        );
    }
}

#[test]
fn upsampling_every_mode() {
    use rlx::ir::UpsampleMode;
    for (seed, mode) in UpsampleMode::ALL.into_iter().enumerate() {
        for size in [[7, 4], [2, 9]] {
            let x = Input::float("x", &[2, 2, 3, 5]);
            let u = Op::Upsample(Upsample {
                mode,
                size: Shape::from(size),
            });
            grad_check(&format!("{u}"), 1400 + seed as u64, &[x], &|g, i| {
                op(g, u.clone(), i)
            });
        }
    }
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

#[test]
fn sorted_and_top_k_values() {
    use rlx::ir::SortOutput;
    let x = Input::float("x", &[3, 6, 2]);
    grad_check("topk values", 1500, &[x], &|g, i| {
        let t = Op::TopK(TopK {
            k: 3,
            axis: 1,
            output: SortOutput::Values,
        });
        op(g, t, &[i[0]])
    });
    for (seed, (axis, descending)) in [(0, true), (2, false)].into_iter().enumerate() {
        let x = Input::float("x", &[4, 3, 5]);
        grad_check(
            &format!("sort axis {axis}"),
            1510 + seed as u64,
            &[x],
            &|g, i| {
                let s = Op::Sort(Sort {
                    axis,
                    descending,
                    output: SortOutput::Values,
                });
                op(g, s, &[i[0]])
            },
        );
    }
}

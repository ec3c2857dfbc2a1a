//! Planner properties on random graphs: no two buffers live at the same time overlap, the
//! peak is at least the lower bound, and results are bit-identical with and without NaN
//! poisoning and with memory reuse disabled.

#[path = "ops/reference.rs"]
#[allow(dead_code)]
mod reference;

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{BinaryOp, Dim, NodeId, Op, ReduceOp, UnaryOp};
use rlx::ir::{LayerNorm, Slice};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

use reference::{Rng, random};

const WIDTH: usize = 8;

/// A random graph over `[batch, WIDTH]` f32 tensors: every op keeps or restores that shape,
/// so any earlier node can feed any later one and lifetimes vary widely.
fn random_graph(rng: &mut Rng) -> Graph {
    let mut b = GraphBuilder::new();
    let batch = Dim::sym("batch");
    let row = [batch.clone(), Dim::from(WIDTH)];
    let mut pool: Vec<NodeId> = (0..1 + rng.int(0, 2))
        .map(|i| b.input(&format!("x{i}"), DType::F32, row.clone()).unwrap())
        .collect();
    let w = b.param("w", DType::F32, [WIDTH, WIDTH]).unwrap();
    let steps = 4 + rng.int(0, 20);
    for _ in 0..steps {
        let pick =
            |rng: &mut Rng, pool: &[NodeId]| pool[rng.int(0, pool.len() as i64 - 1) as usize];
        let (x, y) = (pick(rng, &pool), pick(rng, &pool));
        let node = match rng.int(0, 9) {
            0 => b.unary(UnaryOp::Tanh, x).unwrap(),
            1 => b.binary(BinaryOp::Add, x, y).unwrap(),
            2 => b.binary(BinaryOp::Mul, x, y).unwrap(),
            3 => b.matmul(x, w).unwrap(),
            4 => b.softmax(x, 1).unwrap(),
            5 => {
                let s = b.reduce(ReduceOp::Sum, x, &[1], true).unwrap();
                b.binary(BinaryOp::Sub, x, s).unwrap()
            }
            6 => {
                let c = b.concat(&[x, y], 1).unwrap();
                let start = rng.int(0, WIDTH as i64);
                b.op(
                    Op::Slice(Slice {
                        axis: 1,
                        start,
                        stop: Some(start + WIDTH as i64),
                        step: 1,
                    }),
                    &[c],
                )
                .unwrap()
            }
            7 => {
                let t = b.transpose(x, 0, 1).unwrap();
                let t = b.unary(UnaryOp::Neg, t).unwrap();
                b.transpose(t, 0, 1).unwrap()
            }
            8 => {
                let r = b
                    .reshape(x, [batch.clone(), Dim::from(2), Dim::from(WIDTH / 2)])
                    .unwrap();
                let r = b.unary(UnaryOp::Sigmoid, r).unwrap();
                b.reshape(r, row.clone()).unwrap()
            }
            _ => b
                .op(
                    Op::LayerNorm(LayerNorm {
                        eps: 1e-5,
                        has_weight: false,
                        has_bias: false,
                    }),
                    &[x],
                )
                .unwrap(),
        };
        pool.push(node);
    }
    let outputs = 1 + rng.int(0, 2);
    for i in 0..outputs {
        let node = pool[rng.int(0, pool.len() as i64 - 1) as usize];
        b.output(&format!("y{i}"), node).unwrap();
    }
    b.finish().unwrap()
}

fn run(
    options: CpuOptions,
    graph: &Graph,
    inputs: &[(String, HostTensor)],
    w: &HostTensor,
) -> (Vec<HostTensor>, rlx::cpu::PlanReport) {
    let exe = CpuBackend::new(options).compile(graph).unwrap();
    exe.set_weight("w", w.view()).unwrap();
    let views: Vec<_> = inputs.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
    let out = exe.run(&views, &[]).unwrap();
    let report = exe
        .plan_report(&[("batch", inputs[0].1.shape()[0])])
        .unwrap();
    (out, report)
}

fn bits(ts: &[HostTensor]) -> Vec<Vec<u8>> {
    ts.iter().map(|t| t.data().bytes().to_vec()).collect()
}

#[test]
fn random_graphs_plan_safely_and_deterministically() {
    let mut rng = Rng(99);
    for case in 0..60 {
        let graph = random_graph(&mut rng);
        let batch = 1 + rng.int(0, 6) as usize;
        let inputs: Vec<(String, HostTensor)> = graph
            .inputs()
            .map(|(_, n)| {
                let name = n.name.clone().unwrap();
                (
                    name,
                    random(&mut rng, DType::F32, &[batch, WIDTH], -1.0, 1.0),
                )
            })
            .collect();
        let w = random(&mut rng, DType::F32, &[WIDTH, WIDTH], -0.5, 0.5);

        let (plain, report) = run(CpuOptions::default(), &graph, &inputs, &w);
        let poisoned = CpuOptions {
            poison: true,
            ..CpuOptions::default()
        };
        let no_reuse = CpuOptions {
            reuse_memory: false,
            poison: true,
            ..CpuOptions::default()
        };
        let unoptimized = CpuOptions {
            optimize: false,
            poison: true,
            ..CpuOptions::default()
        };
        for (label, options) in [
            ("poison", poisoned),
            ("no-reuse", no_reuse),
            ("unoptimized", unoptimized),
        ] {
            let (out, _) = run(options, &graph, &inputs, &w);
            assert_eq!(bits(&out), bits(&plain), "case {case} {label}\n{graph}");
        }
        for t in &plain {
            assert!(
                t.to_f64_vec().iter().all(|v| v.is_finite()),
                "case {case}: poison leaked\n{graph}"
            );
        }

        assert!(report.peak_bytes >= report.lower_bound, "case {case}");
        let buffers = &report.buffers;
        for (i, a) in buffers.iter().enumerate() {
            for b in &buffers[i + 1..] {
                let live_together = a.2 <= b.3 && b.2 <= a.3;
                let disjoint = a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0 || a.1 == 0 || b.1 == 0;
                assert!(
                    !live_together || disjoint,
                    "case {case}: {a:?} overlaps {b:?}\n{graph}"
                );
            }
        }
    }
}

//! Every kind of every IR enum that crosses the C ABI runs on MLX and gives the CPU's
//! result: the kind is rebuilt from its printed name, so a code mapped to the wrong MLX
//! function (or to none) fails here by name.
#![cfg(feature = "mlx")]

use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::cpu::CpuBackend;
use rlx::ir::{ArgReduce, Pool, Reduce, Sort, TopK};
use rlx::ir::{
    ArgReduceOp, BinaryOp, CompareOp, DType, Graph, NodeId, Op, PoolKind, ReduceOp, SortOutput,
    UnaryOp,
};
use rlx::mlx::{MlxBackend, MlxMode};
use rlx::tensor::HostTensor;

/// Inputs in (0.25, 2.25) with varied values, so every function of the vocabulary is defined
/// and distinguishable from every other.
fn input(shape: &[usize], seed: usize) -> HostTensor {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|i| 0.25 + ((i * 7 + seed * 3) % 17) as f32 / 8.0)
        .collect();
    HostTensor::from_vec(values, shape.to_vec()).unwrap()
}

/// Runs `graph` (inputs `a`, `b`) on the CPU and on MLX and compares by `name`.
fn same_on_both(name: &str, graph: &Graph, a: &HostTensor, b: &HostTensor) {
    let inputs = [("a", a.view()), ("b", b.view())];
    let used: Vec<_> = inputs
        .iter()
        .filter(|(n, _)| graph.input(n).is_some())
        .cloned()
        .collect();
    let cpu = CpuBackend::default().compile(graph).unwrap();
    let expected = { cpu }.run(&used, &[]).unwrap();
    rlx::mlx::set_kernel_fusion(false).unwrap();
    let mlx = MlxBackend::new(MlxMode::Lazy).compile(graph).unwrap();
    let got = mlx
        .run(&used, &[])
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got[0].dtype(), expected[0].dtype(), "{name}");
    assert_eq!(got[0].shape(), expected[0].shape(), "{name}");
    for (g, e) in got[0].to_f64_vec().iter().zip(expected[0].to_f64_vec()) {
        assert!(
            (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
            "{name}: MLX gives {g}, the CPU {e}"
        );
    }
}

fn graph(f: impl FnOnce(&mut GraphBuilder, NodeId, NodeId) -> NodeId) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("a", DType::F32, [3, 4]).unwrap();
    let y = b.input("b", DType::F32, [3, 4]).unwrap();
    let out = f(&mut b, x, y);
    b.output("y", out).unwrap();
    b.finish().unwrap()
}

#[test]
fn every_elementwise_kind_matches_the_cpu_by_name() {
    let (a, b) = (input(&[3, 4], 1), input(&[3, 4], 2));
    for kind in UnaryOp::ALL {
        let kind = UnaryOp::from_name(kind.name()).unwrap();
        let g = graph(|g, x, _| g.unary(kind, x).unwrap());
        same_on_both(kind.name(), &g, &a, &b);
    }
    for kind in BinaryOp::ALL {
        let kind = BinaryOp::from_name(kind.name()).unwrap();
        let g = graph(|g, x, y| g.binary(kind, x, y).unwrap());
        same_on_both(kind.name(), &g, &a, &b);
    }
    for kind in CompareOp::ALL {
        let kind = CompareOp::from_name(kind.name()).unwrap();
        let g = graph(|g, x, y| g.op(Op::Compare(kind), &[x, y]).unwrap());
        same_on_both(kind.name(), &g, &a, &b);
    }
}

#[test]
fn every_reduction_kind_matches_the_cpu_by_name() {
    let (a, b) = (input(&[3, 4], 3), input(&[3, 4], 4));
    for kind in ReduceOp::ALL {
        let op = ReduceOp::from_name(kind.name()).unwrap();
        let g = graph(|g, x, _| {
            g.op(
                Op::Reduce(Reduce {
                    op,
                    axes: vec![1],
                    keep_dims: false,
                }),
                &[x],
            )
            .unwrap()
        });
        same_on_both(kind.name(), &g, &a, &b);
    }
    for kind in ArgReduceOp::ALL {
        let op = ArgReduceOp::from_name(kind.name()).unwrap();
        let g = graph(|g, x, _| {
            g.op(
                Op::ArgReduce(ArgReduce {
                    op,
                    axis: 1,
                    keep_dims: false,
                }),
                &[x],
            )
            .unwrap()
        });
        same_on_both(kind.name(), &g, &a, &b);
    }
    for kind in SortOutput::ALL {
        let output = SortOutput::from_name(kind.name()).unwrap();
        for descending in [false, true] {
            let g = graph(|g, x, _| {
                g.op(
                    Op::Sort(Sort {
                        axis: 1,
                        descending,
                        output,
                    }),
                    &[x],
                )
                .unwrap()
            });
            same_on_both(&format!("sort {}", kind.name()), &g, &a, &b);
            let g = graph(|g, x, _| {
                g.op(
                    Op::TopK(TopK {
                        k: 2,
                        axis: 1,
                        output,
                    }),
                    &[x],
                )
                .unwrap()
            });
            same_on_both(&format!("topk {}", kind.name()), &g, &a, &b);
        }
    }
}

#[test]
fn every_pool_kind_matches_the_cpu_by_name() {
    let x = input(&[1, 2, 5, 5], 5);
    for kind in PoolKind::ALL {
        let kind = PoolKind::from_name(kind.name()).unwrap();
        let mut b = GraphBuilder::new();
        let a = b.input("a", DType::F32, [1, 2, 5, 5]).unwrap();
        let y = b
            .op(
                Op::Pool(Pool {
                    kind,
                    kernel: vec![3, 2],
                    stride: vec![2, 1],
                    padding: vec![(1, 1), (0, 1)],
                }),
                &[a],
            )
            .unwrap();
        b.output("y", y).unwrap();
        same_on_both(kind.name(), &b.finish().unwrap(), &x, &x);
    }
}

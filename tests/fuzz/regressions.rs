//! Mismatches `fuzz_graphs` found, each minimised to one op with its operands, checked
//! through the public API on every configuration against values worked out by hand.

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{DType, Op};
use rlx::prelude::GraphBuilder;
use rlx_workspace::fuzz::tensor;

fn executables(graph: &rlx::ir::Graph) -> Vec<(String, Box<dyn Executable>)> {
    let mut all: Vec<(String, Box<dyn Executable>)> = Vec::new();
    for threads in [1, 2] {
        let cpu = CpuBackend::new(CpuOptions {
            threads,
            ..CpuOptions::default()
        });
        all.push((
            format!("cpu-{threads}"),
            Box::new(cpu.compile(graph).unwrap()),
        ));
    }
    #[cfg(feature = "mlx")]
    for mode in [rlx::mlx::MlxMode::Eager, rlx::mlx::MlxMode::Lazy] {
        let mlx = rlx::mlx::MlxBackend::new(mode);
        all.push((
            format!("mlx-{mode:?}"),
            Box::new(mlx.compile(graph).unwrap()),
        ));
    }
    all
}

/// Seed 12797139957856551458 as found: a zero-size weight packed for one matmul ahead of a
/// weight packed for another.
#[test]
fn an_empty_weight_leaves_the_next_weights_packing_intact() {
    let b = [-1.0, -1.1875];
    for dtype in [DType::F16, DType::F32] {
        let mut g = GraphBuilder::new();
        let x = g.input("x", dtype, [2, 1, 3]).unwrap();
        let empty = g.param("empty", dtype, [0, 3]).unwrap();
        let w = g.param("w", dtype, [2, 1]).unwrap();
        let op = Op::MatMul {
            transpose_a: false,
            transpose_b: true,
        };
        let nothing = g.op(op.clone(), &[x, empty]).unwrap();
        let op = Op::MatMul {
            transpose_a: true,
            transpose_b: true,
        };
        let outer = g.op(op, &[x, w]).unwrap();
        g.output("nothing", nothing).unwrap();
        g.output("outer", outer).unwrap();
        let graph = g.finish().unwrap();
        let a = [-1.25, -1.96875, 2.5, 0.5, -1.0, -0.1875];
        let want: Vec<f64> = (0..2)
            .flat_map(|batch| {
                (0..3).flat_map(move |i| (0..2).map(move |j| a[batch * 3 + i] * b[j]))
            })
            .collect();
        for (label, exe) in executables(&graph) {
            exe.set_weights(&[
                ("empty", tensor(dtype, &[0, 3], &[]).view()),
                ("w", tensor(dtype, &[2, 1], &b).view()),
            ])
            .unwrap();
            let out = exe
                .run(&[("x", tensor(dtype, &[2, 1, 3], &a).view())], &[])
                .unwrap();
            assert_eq!(out[0].shape(), [2, 1, 0]);
            for (k, (g, w)) in out[1].to_f64_vec().iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-2 * w.abs(),
                    "{label} {dtype}: element {k} is {g}, want {w}"
                );
            }
        }
    }
}

/// Seeds 3 of 300 at `--seed 1`, among others: reductions over an empty axis, which MLX
/// refused ("Cannot max reduce over axis 0 with size 0", "[argmin] Cannot argmin reduce
/// zero size array", "[logsumexp] Received empty array") where the CPU gave the identity.
/// Both now give the documented values; the CPU's integer product of nothing is 1 (it was 0).
#[test]
fn reductions_over_an_empty_axis_give_their_identity_everywhere() {
    use rlx::ir::{ArgReduceOp, ReduceOp};
    let inf = f64::INFINITY;
    let cases: Vec<(DType, Op, Vec<f64>)> = vec![
        (
            DType::F32,
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![0],
                keep_dims: false,
            },
            vec![-inf; 3],
        ),
        (
            DType::F32,
            Op::Reduce {
                op: ReduceOp::Min,
                axes: vec![0],
                keep_dims: true,
            },
            vec![inf; 3],
        ),
        (
            DType::F32,
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0],
                keep_dims: false,
            },
            vec![0.0; 3],
        ),
        (
            DType::F32,
            Op::Reduce {
                op: ReduceOp::Prod,
                axes: vec![0],
                keep_dims: false,
            },
            vec![1.0; 3],
        ),
        (
            DType::I32,
            Op::Reduce {
                op: ReduceOp::Prod,
                axes: vec![0],
                keep_dims: false,
            },
            vec![1.0; 3],
        ),
        (
            DType::I64,
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![0],
                keep_dims: false,
            },
            vec![0.0; 3],
        ),
        (
            DType::F16,
            Op::ArgReduce {
                op: ArgReduceOp::ArgMax,
                axis: 0,
                keep_dims: false,
            },
            vec![0.0; 3],
        ),
        (
            DType::I32,
            Op::ArgReduce {
                op: ArgReduceOp::ArgMin,
                axis: 0,
                keep_dims: true,
            },
            vec![0.0; 3],
        ),
        // Over a full axis of an empty array: an empty result.
        (
            DType::F32,
            Op::ArgReduce {
                op: ArgReduceOp::ArgMax,
                axis: 1,
                keep_dims: true,
            },
            vec![],
        ),
    ];
    for (dtype, op, want) in cases {
        let mut g = GraphBuilder::new();
        let x = g.input("x", dtype, [0, 3]).unwrap();
        let y = g.op(op.clone(), &[x]).unwrap();
        g.output("y", y).unwrap();
        let graph = g.finish().unwrap();
        for (label, exe) in executables(&graph) {
            let got = exe
                .run(&[("x", tensor(dtype, &[0, 3], &[]).view())], &[])
                .unwrap();
            assert_eq!(got[0].to_f64_vec(), want, "{label}: {op} of {dtype}[0, 3]");
        }
    }
    // Seed 3, case ~1000 (a hang): MLX's CPU sum of some empty arrays never returned. An
    // empty operand now never reaches MLX's reductions, whichever axes are empty.
    let sum = |axes: Vec<usize>, keep_dims| Op::Reduce {
        op: ReduceOp::Sum,
        axes,
        keep_dims,
    };
    let mean = Op::Reduce {
        op: ReduceOp::Mean,
        axes: vec![0],
        keep_dims: false,
    };
    // Operand dims, op, result dims, result values.
    type Shaped = (Vec<usize>, Op, Vec<usize>, Vec<f64>);
    let shaped: Vec<Shaped> = vec![
        (vec![0, 3], sum(vec![1], false), vec![0], vec![]),
        (vec![3, 0, 2], sum(vec![0, 2], true), vec![1, 0, 1], vec![]),
        (vec![3, 0, 2], sum(vec![1], false), vec![3, 2], vec![0.0; 6]),
        (vec![2, 0], sum(vec![0, 1], false), vec![], vec![0.0]),
        (vec![0, 3], mean, vec![3], vec![f64::NAN; 3]),
    ];
    for (dims, op, out_dims, want) in shaped {
        let mut g = GraphBuilder::new();
        let x = g.input("x", DType::F32, dims.as_slice()).unwrap();
        let y = g.op(op.clone(), &[x]).unwrap();
        g.output("y", y).unwrap();
        let graph = g.finish().unwrap();
        for (label, exe) in executables(&graph) {
            let got = exe
                .run(&[("x", tensor(DType::F32, &dims, &[]).view())], &[])
                .unwrap();
            assert_eq!(got[0].shape(), out_dims, "{label}: {op} of {dims:?}");
            let same = got[0]
                .to_f64_vec()
                .iter()
                .zip(&want)
                .all(|(g, w)| g == w || (g.is_nan() && w.is_nan()));
            assert!(
                same,
                "{label}: {op} of {dims:?} gave {:?}",
                got[0].to_f64_vec()
            );
        }
    }
    // Softmax over an empty axis: an empty result.
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, [2, 0]).unwrap();
    let y = g.op(Op::Softmax { axis: 1, log: true }, &[x]).unwrap();
    g.output("y", y).unwrap();
    let graph = g.finish().unwrap();
    for (label, exe) in executables(&graph) {
        let got = exe
            .run(&[("x", tensor(DType::F32, &[2, 0], &[]).view())], &[])
            .unwrap();
        assert_eq!(got[0].shape(), [2, 0], "{label}");
    }
}

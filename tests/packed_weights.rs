//! Matmuls whose `b` is a weight, and gathered products whose matrices are one, read it
//! packed once at bind time: the results must equal the same product with `b` given as an
//! input (packed on every run), for every float dtype, both layouts, several K blocks and
//! ragged N, and after the weight is re-bound; on MLX, weights also bound as the operand of
//! products of a block of rows.

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{DType, Op};
use rlx::ir::{GatherMatMul, MatMul};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

/// Values exact in every float dtype (multiples of 1/8 below 2).
fn values(dtype: DType, shape: &[usize], seed: usize) -> HostTensor {
    let len: usize = shape.iter().product();
    let v: Vec<f64> = (0..len)
        .map(|i| ((i * 7 + seed * 13) % 23) as f64 / 8.0 - 1.375)
        .collect();
    let shape = shape.to_vec();
    match dtype {
        DType::F32 => HostTensor::from_vec(v.iter().map(|x| *x as f32).collect(), shape),
        DType::F64 => HostTensor::from_vec(v, shape),
        DType::F16 => {
            HostTensor::from_vec(v.iter().map(|x| half::f16::from_f64(*x)).collect(), shape)
        }
        _ => HostTensor::from_vec(v.iter().map(|x| half::bf16::from_f64(*x)).collect(), shape),
    }
    .unwrap()
}

fn product(
    dtype: DType,
    transpose_b: bool,
    (batch, m, k, n): (usize, usize, usize, usize),
    as_weight: bool,
    threads: usize,
    seeds: &[usize],
) -> Vec<Vec<f64>> {
    let b_shape = if transpose_b { [n, k] } else { [k, n] };
    let mut g = GraphBuilder::new();
    let a = g.input("a", dtype, [batch, m, k]).unwrap();
    let b = if as_weight {
        g.param("b", dtype, b_shape).unwrap()
    } else {
        g.input("b", dtype, b_shape).unwrap()
    };
    let op = Op::MatMul(MatMul {
        transpose_a: false,
        transpose_b,
    });
    let c = g.op(op, &[a, b]).unwrap();
    g.output("c", c).unwrap();
    let backend = CpuBackend::new(CpuOptions {
        threads,
        ..CpuOptions::default()
    });
    let exe = backend.compile(&g.finish().unwrap()).unwrap();
    let a = values(dtype, &[batch, m, k], 1);
    let mut results = Vec::new();
    for &seed in seeds {
        let b = values(dtype, &b_shape, seed);
        let out = if as_weight {
            exe.set_weight("b", b.view()).unwrap();
            // Kept packed alone, the weight reads back exactly as bound.
            assert_eq!(
                exe.weight("b").unwrap(),
                b,
                "{dtype:?} transpose_b={transpose_b}"
            );
            exe.run(&[("a", a.view())], &[]).unwrap()
        } else {
            exe.run(&[("a", a.view()), ("b", b.view())], &[]).unwrap()
        };
        results.push(out[0].to_f64_vec());
    }
    results
}

#[test]
fn packed_weights_match_products_packed_per_run() {
    let dtypes = [DType::F32, DType::F64, DType::F16, DType::BF16];
    for dtype in dtypes {
        for transpose_b in [false, true] {
            for dims in [(1, 5, 7, 3), (2, 9, 300, 37), (1, 40, 530, 70)] {
                for threads in [1, 2] {
                    let seeds = [2, 3];
                    let packed = product(dtype, transpose_b, dims, true, threads, &seeds);
                    let per_run = product(dtype, transpose_b, dims, false, threads, &seeds);
                    assert_eq!(
                        packed, per_run,
                        "{dtype:?} transpose_b={transpose_b} {dims:?} threads={threads}"
                    );
                    assert_ne!(packed[0], packed[1], "re-binding the weight is seen");
                }
            }
        }
    }
}

/// A weight that only products read is kept once, packed: its region fits a memory limit
/// that its bytes as bound and its packing together exceed. One that another op also
/// reads keeps both, and both are right after a re-bind.
#[test]
fn weights_only_products_read_are_kept_packed_alone() {
    let (k, n) = (256, 256);
    let weight_bytes = k * n * 4;
    let graph = |also_read: bool| {
        let mut g = GraphBuilder::new();
        let a = g.input("a", DType::F32, [3, k]).unwrap();
        let b = g.param("b", DType::F32, [k, n]).unwrap();
        let op = Op::MatMul(MatMul {
            transpose_a: false,
            transpose_b: false,
        });
        let c = g.op(op, &[a, b]).unwrap();
        g.output("c", c).unwrap();
        if also_read {
            let doubled = g.op(Op::Binary(rlx::ir::BinaryOp::Add), &[b, b]).unwrap();
            g.output("doubled", doubled).unwrap();
        }
        g.finish().unwrap()
    };
    let limited = CpuBackend::new(CpuOptions {
        memory_limit: Some(weight_bytes * 3 / 2),
        ..CpuOptions::default()
    });
    let exe = limited.compile(&graph(false)).unwrap();
    let refused = limited.compile(&graph(true));
    assert!(
        matches!(refused, Err(rlx::backend::CompileError::OutOfMemory { .. })),
        "a weight another op reads keeps its bytes beside its packing"
    );
    let both = CpuBackend::default().compile(&graph(true)).unwrap();
    let a = values(DType::F32, &[3, k], 1);
    for seed in [2, 3] {
        let b = values(DType::F32, &[k, n], seed);
        exe.set_weight("b", b.view()).unwrap();
        both.set_weight("b", b.view()).unwrap();
        assert_eq!(exe.weight("b").unwrap(), b);
        assert_eq!(both.weight("b").unwrap(), b);
        let packed = exe.run(&[("a", a.view())], &[]).unwrap();
        let kept = both.run(&[("a", a.view())], &[]).unwrap();
        assert_eq!(packed[0], kept[0]);
        let twice: Vec<f64> = b.to_f64_vec().iter().map(|x| 2.0 * x).collect();
        assert_eq!(kept[1].to_f64_vec(), twice);
        // Bytes at an odd address (a file's may sit anywhere) are packed alike.
        let mut shifted = vec![0u8; 1];
        shifted.extend_from_slice(b.view().bytes);
        let shape = [k, n];
        let odd = rlx::tensor::TensorRef::new(DType::F32, &shape, &shifted[1..]).unwrap();
        exe.set_weight("b", odd).unwrap();
        assert_eq!(exe.weight("b").unwrap(), b);
        assert_eq!(exe.run(&[("a", a.view())], &[]).unwrap()[0], kept[0]);
    }
}

/// `gather_matmul` of `tokens` rows routed to 2 of 5 matrices, stored as a weight or given.
fn gathered(
    dtype: DType,
    transpose_b: bool,
    (tokens, k, n): (usize, usize, usize),
    as_weight: bool,
    seeds: &[usize],
) -> Vec<Vec<f64>> {
    let w_shape = if transpose_b { [5, n, k] } else { [5, k, n] };
    let mut g = GraphBuilder::new();
    let x = g.input("x", dtype, [tokens, k]).unwrap();
    let routes = g.input("routes", DType::I64, [tokens, 2]).unwrap();
    let w = if as_weight {
        g.param("w", dtype, w_shape).unwrap()
    } else {
        g.input("w", dtype, w_shape).unwrap()
    };
    let y = g
        .op(
            Op::GatherMatMul(GatherMatMul { transpose_b }),
            &[x, w, routes],
        )
        .unwrap();
    g.output("y", y).unwrap();
    let exe = CpuBackend::default().compile(&g.finish().unwrap()).unwrap();
    let x = values(dtype, &[tokens, k], 1);
    let routes: Vec<i64> = (0..tokens * 2).map(|i| (i * 3 % 7 % 5) as i64).collect();
    let routes = HostTensor::from_vec(routes, [tokens, 2]).unwrap();
    let mut results = Vec::new();
    for &seed in seeds {
        let w = values(dtype, &w_shape, seed);
        let mut inputs = vec![("x", x.view()), ("routes", routes.view())];
        if as_weight {
            exe.set_weight("w", w.view()).unwrap();
            assert_eq!(
                exe.weight("w").unwrap(),
                w,
                "{dtype:?} transpose_b={transpose_b}"
            );
        } else {
            inputs.push(("w", w.view()));
        }
        results.push(exe.run(&inputs, &[]).unwrap()[0].to_f64_vec());
    }
    results
}

#[test]
fn packed_experts_match_products_packed_per_run() {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        for transpose_b in [false, true] {
            for dims in [(1, 7, 3), (9, 300, 37), (40, 530, 70)] {
                let seeds = [2, 3];
                let packed = gathered(dtype, transpose_b, dims, true, &seeds);
                let per_run = gathered(dtype, transpose_b, dims, false, &seeds);
                assert_eq!(
                    packed, per_run,
                    "{dtype:?} transpose_b={transpose_b} {dims:?}"
                );
                assert_ne!(packed[0], packed[1], "re-binding the weights is seen");
            }
        }
    }
}

/// On MLX, a float weight that multiplies a block of rows (leading dims of 1: a batch of one
/// sequence) is also bound as that product's operand at the rows' rank: alone, read
/// transposed, read by a gather too, also multiplying a batch of two, and joined with the
/// other weight of its left operand. The products equal the CPU's in every mode, before and
/// after the weights are bound again.
#[cfg(feature = "mlx")]
#[test]
fn mlx_products_of_a_block_of_rows_by_weights_match_the_cpu() {
    use rlx::ir::Gather;
    use rlx::mlx::{MlxBackend, MlxMode};
    let mut g = GraphBuilder::new();
    let x = g.input("x", DType::F32, [1, 3, 12]).unwrap();
    let batch = g.input("batch", DType::F32, [2, 1, 12]).unwrap();
    let ids = g.input("ids", DType::I64, [2]).unwrap();
    let w = g.param("w", DType::F32, [12, 5]).unwrap();
    let table = g.param("table", DType::F32, [7, 12]).unwrap();
    let q = g.param("q", DType::F32, [12, 4]).unwrap();
    let k = g.param("k", DType::F32, [12, 6]).unwrap();
    let by_table = Op::MatMul(MatMul {
        transpose_a: false,
        transpose_b: true,
    });
    let h = g.add(x, x).unwrap();
    let outputs = [
        ("alone", g.matmul(x, w).unwrap()),
        ("batch", g.matmul(batch, w).unwrap()),
        ("logits", g.op(by_table, &[x, table]).unwrap()),
        (
            "gathered",
            g.op(Op::Gather(Gather { axis: 0 }), &[table, ids]).unwrap(),
        ),
        ("q", g.matmul(h, q).unwrap()),
        ("k", g.matmul(h, k).unwrap()),
    ];
    for (name, y) in outputs {
        g.output(name, y).unwrap();
    }
    let graph = g.finish().unwrap();
    let inputs = [
        ("x", values(DType::F32, &[1, 3, 12], 1)),
        ("batch", values(DType::F32, &[2, 1, 12], 2)),
        ("ids", HostTensor::from_vec(vec![6i64, 1], [2]).unwrap()),
    ];
    let inputs: Vec<_> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
    let shapes = [
        ("w", [12, 5]),
        ("table", [7, 12]),
        ("q", [12, 4]),
        ("k", [12, 6]),
    ];
    let cpu = CpuBackend::default().compile(&graph).unwrap();
    for mode in [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled] {
        let mlx = MlxBackend::new(mode).compile(&graph).unwrap();
        for seed in [3, 4] {
            let weights: Vec<_> = shapes
                .iter()
                .enumerate()
                .map(|(i, (name, dims))| (*name, values(DType::F32, dims, seed + i)))
                .collect();
            let weights: Vec<_> = weights.iter().map(|(n, t)| (*n, t.view())).collect();
            cpu.set_weights(&weights).unwrap();
            mlx.set_weights(&weights).unwrap();
            let want = cpu.run(&inputs, &[]).unwrap();
            let got = mlx.run(&inputs, &[]).unwrap();
            // Sums of a dozen multiples of 1/64 below 2: exact in float32 on both.
            for ((name, _), (got, want)) in outputs.iter().zip(got.iter().zip(&want)) {
                assert_eq!(got.shape(), want.shape(), "{mode:?} seed {seed}: {name}");
                assert_eq!(
                    got.to_f64_vec(),
                    want.to_f64_vec(),
                    "{mode:?} seed {seed}: {name}"
                );
            }
        }
    }
}

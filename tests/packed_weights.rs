//! Matmuls whose `b` is a weight, and gathered products whose matrices are one, read it
//! packed once at bind time: the results must equal the same product with `b` given as an
//! input (packed on every run), for every float dtype, both layouts, several K blocks and
//! ragged N, and after the weight is re-bound.

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

//! SGEMM throughput of the CPU backend, in the output format of
//! `shared/bench/gemm_bench.py` (numpy), so the two can be compared line by line:
//!
//! ```text
//! cargo run --release --example gemm_bench [-- --threads N] [--cases MxKxN,...] [--b-input] [--transpose-b]
//! gemm m=2048 n=2048 k=2048 gflops=160.2 impl=rlx
//! ```
//!
//! Each case is one matmul graph `C[M,N] = A[M,K] @ B[K,N]` compiled once, with `A` and `B`
//! bound as weights and `C` read in place with `run_with` (as numpy's `matmul(out=)`), so a
//! run is the product and the executor's dispatch, no copies. The figure is 2·M·N·K over
//! the median time of at least 5 runs and 0.5 s, after 2 warm-up runs.
//!
//! `--b-input` passes `B` as an input instead, packed on every run as a training step packs
//! its weights; `--transpose-b` stores it `[N, K]` and multiplies by its transpose
//! (`x · Wᵀ`, a linear layer's weight layout).

use std::time::{Duration, Instant};

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{MatMul, Op};
use rlx::prelude::*;
use rlx::tensor::HostTensor;

const CASES: [(usize, usize, usize); 7] = [
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 384, 384),
    (4096, 384, 1536),
    (4096, 1536, 384),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .map(|t| t.parse())
        .transpose()?
        .unwrap_or_else(rayon::current_num_threads);
    // `--cases 1024x384x1536,16x384x384` (M x K x N) replaces the default cases.
    let cases: Vec<(usize, usize, usize)> = match args.iter().position(|a| a == "--cases") {
        Some(i) => args
            .get(i + 1)
            .ok_or("--cases needs MxKxN[,MxKxN...]")?
            .split(',')
            .map(|case| {
                let dims: Vec<usize> = case.split('x').map(str::parse).collect::<Result<_, _>>()?;
                match dims[..] {
                    [m, k, n] => Ok((m, k, n)),
                    _ => Err(format!("case {case:?} is not MxKxN").into()),
                }
            })
            .collect::<Result<_, Box<dyn std::error::Error>>>()?,
        None => CASES.to_vec(),
    };
    let b_input = args.iter().any(|a| a == "--b-input");
    let transpose_b = args.iter().any(|a| a == "--transpose-b");
    eprintln!("# rlx cpu backend, threads {threads}, b_input {b_input}, transpose_b {transpose_b}");
    let backend = CpuBackend::new(CpuOptions {
        threads,
        ..CpuOptions::default()
    });
    for (m, k, n) in cases {
        let mut b = GraphBuilder::new();
        let a = b.param("a", DType::F32, [m, k])?;
        let b_dims = if transpose_b { [n, k] } else { [k, n] };
        let w = if b_input {
            b.input("b", DType::F32, b_dims)?
        } else {
            b.param("b", DType::F32, b_dims)?
        };
        let c = if transpose_b {
            b.op(
                Op::MatMul(MatMul {
                    transpose_a: false,
                    transpose_b: true,
                }),
                &[a, w],
            )?
        } else {
            b.matmul(a, w)?
        };
        b.output("c", c)?;
        let exe = backend.compile(&b.finish()?)?;
        let fill = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7 + seed) % 13) as f32 / 13.0 - 0.5)
                .collect()
        };
        let a = HostTensor::from_vec(fill(m * k, 1), [m, k])?;
        let w = HostTensor::from_vec(fill(k * n, 2), b_dims)?;
        exe.set_weight("a", a.view())?;
        let inputs = if b_input {
            vec![("b", w.view())]
        } else {
            exe.set_weight("b", w.view())?;
            Vec::new()
        };
        let mut checksum = 0u8;
        let mut run = || exe.run_with(&inputs, &[], |out| checksum ^= out[0].bytes[0]);
        for _ in 0..2 {
            run()?;
        }
        let mut times = Vec::new();
        let started = Instant::now();
        while times.len() < 5 || started.elapsed() < Duration::from_millis(500) {
            let t = Instant::now();
            run()?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let gflops = 2.0 * (m * n * k) as f64 / median / 1e9;
        println!("gemm m={m} n={n} k={k} gflops={gflops:.1} impl=rlx");
    }
    Ok(())
}

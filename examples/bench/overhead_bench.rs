//! Per-run overhead of the CPU executor: a chain of 50 small elementwise ops on 64 elements,
//! compiled once and run many times. The ops are cheap arithmetic (neg, abs, relu, add, mul,
//! sub) so that the figure is dispatch cost, not transcendental math. Prints the median over
//! batches of runs:
//!
//! ```text
//! cargo run --release --example overhead_bench
//! overhead ns_per_run=1234
//! ```

use std::time::Instant;

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::BinaryOp;
use rlx::prelude::*;
use rlx::tensor::HostTensor;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut b = GraphBuilder::new();
    let x = b.input("x", DType::F32, [64])?;
    let y = b.input("y", DType::F32, [64])?;
    let mut h = x;
    let kinds = [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu];
    for i in 0..50 {
        h = if i % 2 == 0 {
            b.unary(kinds[(i / 2) % kinds.len()], h)?
        } else {
            b.binary(
                [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Sub][(i / 2) % 3],
                h,
                y,
            )?
        };
    }
    b.output("out", h)?;
    let graph = b.finish()?;
    let exe = CpuBackend::new(CpuOptions::default()).compile(&graph)?;
    let x = HostTensor::from_vec((0..64).map(|i| i as f32 / 64.0).collect::<Vec<_>>(), [64])?;
    let y = HostTensor::from_vec(vec![0.5f32; 64], [64])?;
    let inputs = [("x", x.view()), ("y", y.view())];
    let mut outputs = Vec::new();
    for _ in 0..1000 {
        exe.run_into(&inputs, &[], &mut outputs)?;
    }
    const PER_BATCH: u32 = 2000;
    let mut batches = Vec::new();
    for _ in 0..25 {
        let t = Instant::now();
        for _ in 0..PER_BATCH {
            exe.run_into(&inputs, &[], &mut outputs)?;
        }
        batches.push(t.elapsed().as_nanos() as f64 / f64::from(PER_BATCH));
    }
    batches.sort_by(f64::total_cmp);
    println!("overhead ns_per_run={:.0}", batches[batches.len() / 2]);
    Ok(())
}

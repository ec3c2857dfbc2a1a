//! Matrix-vector speed of `block_matmul` on the CPU: one row of activations times a weight
//! kept in a GGUF block format, at the shapes of a SmolLM2-135M decode step (hidden 576,
//! FFN 1536, vocabulary 49,152), for each format and activation precision, on 1 and 2
//! threads. Prints the median time of a run and the weight bytes read per second:
//!
//! ```text
//! cargo run --release --example block_matmul_bench -- [--runs 200] [--formats Q4_1,Q6_K]
//! block_matmul format=Q4_1 activations=int8 threads=2 n=1536 k=576 us=.. gb_s=..
//! ```
//!
//! `--formats` lists the formats to time (default `Q4_1,Q4_0,Q8_0`); `--activations`
//! (`int8` or `exact`), `--threads` and `--shapes` (`576x1536,..`: features x inputs, no
//! chain then) narrow the table; `--rows N` multiplies N rows at once (default 1; 16 and
//! more take the prompt path: dequantized tiles through the GEMM); shapes whose inputs
//! are not whole blocks of a format (576 in K-quants of 256) are left out. Single products
//! run on weights that stay in the cache between runs; the last lines (`chain`) time 128
//! products in one graph of the first format, alternately 576 (512 for K-quants) → 1,536
//! and back (70 MB of `Q4_1`), whose weights stream from memory as a decode step's do.
//!
//! Random blocks: a product's time does not depend on the values. Every byte has bit 6
//! clear and bit 2 set, so that any two bytes read as an f16 scale are a normal number.

use std::time::Instant;

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::gguf::GgmlType;
use rlx::ir::{ActivationPrecision, BlockMatMul, DType, Op};
use rlx::tensor::HostTensor;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).ok_or("--runs takes a number")?.parse()?,
        None => 200,
    };
    let formats: Vec<GgmlType> = match args.iter().position(|a| a == "--formats") {
        Some(i) => args
            .get(i + 1)
            .ok_or("--formats takes a list of GGML type names")?
            .split(',')
            .map(|name| {
                (0..64)
                    .filter_map(GgmlType::from_id)
                    .find(|t| t.name() == name && rlx::ir::block_matmul_supports(*t))
                    .ok_or_else(|| format!("{name} is not a format block_matmul takes"))
            })
            .collect::<Result<_, _>>()?,
        None => vec![GgmlType::Q4_1, GgmlType::Q4_0, GgmlType::Q8_0],
    };
    // Optional filters: `--activations int8|exact`, `--threads N`, `--shapes NxK,..` (the
    // chain runs only when no shape is chosen).
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| {
                args.get(i + 1)
                    .cloned()
                    .ok_or(format!("{name} takes a value"))
            })
            .transpose()
    };
    let precisions: Vec<ActivationPrecision> = match option("--activations")?.as_deref() {
        Some("int8") => vec![ActivationPrecision::Int8],
        Some("exact") => vec![ActivationPrecision::Exact],
        Some(other) => return Err(format!("--activations takes int8 or exact, not {other}").into()),
        None => vec![ActivationPrecision::Int8, ActivationPrecision::Exact],
    };
    let thread_counts: Vec<usize> = match option("--threads")? {
        Some(t) => vec![t.parse()?],
        None => vec![1, 2],
    };
    let all_shapes = [(576, 576), (1536, 576), (576, 1536), (49152, 576)];
    let shapes: Vec<(usize, usize)> = match option("--shapes")? {
        Some(list) => list
            .split(',')
            .map(|s| {
                let (n, k) = s
                    .split_once('x')
                    .ok_or(format!("a shape is NxK, not {s}"))?;
                Ok((n.parse()?, k.parse()?))
            })
            .collect::<Result<_, Box<dyn std::error::Error>>>()?,
        None => all_shapes.to_vec(),
    };
    let rows: usize = match option("--rows")? {
        Some(r) => r.parse()?,
        None => 1,
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut byte = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 24) as u8 & 0x3F | 0x04
    };
    for &format in &formats {
        for &activations in &precisions {
            for &threads in &thread_counts {
                for &(n, k) in &shapes {
                    if k % format.block_values() != 0 {
                        continue;
                    }
                    let row_bytes = k / format.block_values() * format.block_bytes();
                    let mut b = rlx::GraphBuilder::new();
                    let x = b.input("x", DType::F32, [rows, k])?;
                    let w = b.param("w", DType::U8, [n, row_bytes])?;
                    let op = BlockMatMul::exact(format).with_activations(activations);
                    let y = b.op(Op::BlockMatMul(op), &[x, w])?;
                    b.output("y", y)?;
                    let options = CpuOptions {
                        threads,
                        ..CpuOptions::default()
                    };
                    let exe = CpuBackend::new(options).compile(&b.finish()?)?;
                    let blocks: Vec<u8> = (0..n * row_bytes).map(|_| byte()).collect();
                    exe.set_weight("w", HostTensor::from_vec(blocks, [n, row_bytes])?.view())?;
                    let x = HostTensor::from_vec(
                        (0..rows * k)
                            .map(|i| (i as f32 * 0.37).sin())
                            .collect::<Vec<_>>(),
                        [rows, k],
                    )?;
                    let inputs = [("x", x.view())];
                    let mut outputs = Vec::new();
                    for _ in 0..runs / 10 + 1 {
                        exe.run_into(&inputs, &[], &mut outputs)?;
                    }
                    let mut times = Vec::with_capacity(runs);
                    for _ in 0..runs.max(1) {
                        let t = Instant::now();
                        exe.run_into(&inputs, &[], &mut outputs)?;
                        times.push(t.elapsed().as_secs_f64());
                    }
                    times.sort_by(f64::total_cmp);
                    let median = times[times.len() / 2];
                    println!(
                        "block_matmul format={} activations={} threads={threads} rows={rows} \
                         n={n} k={k} us={:.1} gb_s={:.2} gflop_s={:.1}",
                        format.name(),
                        activations.name(),
                        median * 1e6,
                        (n * row_bytes) as f64 / median / 1e9,
                        (2 * rows * n * k) as f64 / median / 1e9
                    );
                }
            }
        }
    }
    if option("--shapes")?.is_some() || rows > 1 {
        return Ok(());
    }
    for &activations in &precisions {
        for &threads in &thread_counts {
            chain(formats[0], activations, threads, runs / 10 + 3, &mut byte)?;
        }
    }
    Ok(())
}

/// 128 products in a row, each's output the next one's input.
fn chain(
    format: GgmlType,
    activations: ActivationPrecision,
    threads: usize,
    runs: usize,
    byte: &mut impl FnMut() -> u8,
) -> Result<(), Box<dyn std::error::Error>> {
    const LAYERS: usize = 128;
    let hidden = 576 / format.block_values() * format.block_values();
    let mut b = rlx::GraphBuilder::new();
    let mut h = b.input("x", DType::F32, [1, hidden])?;
    let mut weights = Vec::new();
    let mut bytes = 0;
    for layer in 0..LAYERS {
        let (n, k) = if layer % 2 == 0 {
            (1536, hidden)
        } else {
            (hidden, 1536)
        };
        let row_bytes = k / format.block_values() * format.block_bytes();
        let name = format!("w{layer}");
        let w = b.param(&name, DType::U8, [n, row_bytes])?;
        let op = BlockMatMul::exact(format).with_activations(activations);
        h = b.op(Op::BlockMatMul(op), &[h, w])?;
        let blocks: Vec<u8> = (0..n * row_bytes).map(|_| byte()).collect();
        bytes += blocks.len();
        weights.push((name, HostTensor::from_vec(blocks, [n, row_bytes])?));
    }
    b.output("y", h)?;
    let options = CpuOptions {
        threads,
        ..CpuOptions::default()
    };
    let exe = CpuBackend::new(options).compile(&b.finish()?)?;
    for (name, w) in &weights {
        exe.set_weight(name, w.view())?;
    }
    let x = HostTensor::from_vec(
        (0..hidden)
            .map(|i| (i as f32 * 0.37).sin())
            .collect::<Vec<_>>(),
        [1, hidden],
    )?;
    let inputs = [("x", x.view())];
    let mut outputs = Vec::new();
    exe.run_into(&inputs, &[], &mut outputs)?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        exe.run_into(&inputs, &[], &mut outputs)?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!(
        "block_matmul chain layers={LAYERS} format={} activations={} threads={threads} \
         us={:.1} gb_s={:.2}",
        format.name(),
        activations.name(),
        median * 1e6,
        bytes as f64 / median / 1e9
    );
    Ok(())
}

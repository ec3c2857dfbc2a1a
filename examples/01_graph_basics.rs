//! # Tutorial 1: building, checking and inspecting a graph
//!
//! RLX models are graphs of primitive ops. This example uses the *untyped* builder, the
//! layer everything else sits on, to build a small classifier over a batch whose size is
//! only known when the graph runs:
//!
//! ```text
//! probs = softmax(gelu(x @ w1ᵀ + b1) @ w2ᵀ + b2)
//! ```
//!
//! Run it with
//!
//! ```text
//! cargo run --example 01_graph_basics [-- graph.dot]
//! ```
//!
//! It prints the graph, shows how a shape error is reported, and writes Graphviz DOT
//! (render it with `dot -Tsvg graph.dot -o graph.svg`).

use rlx::ir::{ArgReduce, MatMul};
use rlx::prelude::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut b = GraphBuilder::new();

    // 1. Leaves. `batch` is a symbol: a named dim bound when the graph runs. Inference
    //    carries it through every op, so shapes stay exact without knowing its value.
    let batch = Dim::sym("batch");
    let x = b.input("x", DType::F32, [batch.clone(), Dim::from(16)])?;
    // Weights are named params, laid out as PyTorch stores `Linear`: [out, in].
    let w1 = b.param("fc1.weight", DType::F32, [32, 16])?;
    let b1 = b.param("fc1.bias", DType::F32, [32])?;
    let w2 = b.param("fc2.weight", DType::F32, [4, 32])?;
    let b2 = b.param("fc2.bias", DType::F32, [4])?;

    // 2. Ops. `transpose_b` reads the [out, in] weights in place: no transposed copy.
    let linear = Op::MatMul(MatMul {
        transpose_a: false,
        transpose_b: true,
    });
    let h = b.op(linear.clone(), &[x, w1])?; // [batch, 32]
    let h = b.add(h, b1)?; // [32] broadcasts over the batch
    let h = b.unary(UnaryOp::Gelu, h)?;
    let logits = b.op(linear.clone(), &[h, w2])?;
    let logits = b.add(logits, b2)?;
    let probs = b.softmax(logits, 1)?;
    let class = b.op(
        Op::ArgReduce(ArgReduce {
            op: ArgReduceOp::ArgMax,
            axis: 1,
            keep_dims: false,
        }),
        &[probs],
    )?;

    // 3. Mistakes are caught when the op is added, with the op, the operand shapes, the
    //    reason and the line that made the call. Nothing is added to the graph.
    let err = b.op(linear, &[x, w2]).unwrap_err();
    println!("a rejected op:\n  {err}\n");

    // 4. Outputs, then `finish` runs the verifier over the whole graph.
    b.output("probs", probs)?;
    b.output("class", class)?;
    let graph = b.finish()?;

    println!(
        "the graph ({} nodes, runtime dims: {:?}):",
        graph.len(),
        graph.symbols()
    );
    print!("{graph}");

    let path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rlx_01_graph_basics.dot"));
    std::fs::write(&path, graph.to_dot())?;
    println!("\nwrote Graphviz DOT to {}", path.display());
    Ok(())
}

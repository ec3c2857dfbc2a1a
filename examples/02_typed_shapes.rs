//! # Tutorial 2: typed shapes
//!
//! The untyped builder of tutorial 1 checks shapes when each op is added. Typed handles move
//! most of those checks into the type system: a handle is `Tensor<'g, S, E>` with `S` a tuple
//! of dims and `E` the element type, so `cargo check` rejects a matmul of mismatched inner
//! dims, an axis that does not exist, or a bool tensor passed to `exp`, at the expression
//! that is wrong. (The `ui-tests/fail/` folder shows each of those messages.)
//!
//! ```text
//! cargo run --example 02_typed_shapes
//! ```

use rlx::typed::{Const, Tensor, build};

// Named runtime dims: their sizes are bound when the graph runs; in the IR they are the
// symbols `batch` and `seq`.
rlx::dims!(Batch, Seq);

/// A token classifier: embeddings, a normalized hidden layer, mean pooling, logits.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let graph = build(|g| {
        // Static dims are `Const<N>`; a named dim may appear in any position.
        let ids: Tensor<(Batch, Seq), i64> = g.input("ids");
        let table: Tensor<(Const<1000>, Const<64>)> = g.param("embeddings");
        let gamma: Tensor<(Const<64>,)> = g.param("norm.weight");
        let beta: Tensor<(Const<64>,)> = g.param("norm.bias");
        let w: Tensor<(Const<5>, Const<64>)> = g.param("head.weight"); // PyTorch [out, in]
        let b: Tensor<(Const<5>,)> = g.param("head.bias");

        let h = table.embed(ids); //                         (Batch, Seq, 64)
        let h = h.layer_norm(gamma, beta, 1e-5).gelu(); //   (Batch, Seq, 64)
        let pooled = h.mean::<1>(); //                       (Batch, 64): axis 1 is `Seq`
        let logits = pooled.matmul_t(w) + b; //              (Batch, 5), bias broadcast
        g.output("probs", logits.softmax::<1>());
        g.output("label", logits.argmax::<1>());
    })?;
    println!("a typed classifier ({} nodes):\n{graph}", graph.len());

    // What rustc cannot decide is checked when the graph is built: a reshape must keep the
    // element count. Errors are collected, each with the line that made the op, and
    // returned together.
    let err = build(|g| {
        let x: Tensor<(Batch, Const<6>)> = g.input("x");
        let bad = x.reshape::<(Batch, Const<4>)>();
        g.output("y", bad.relu()); // a rejected op's handle adds no further errors
    })
    .unwrap_err();
    println!("a caught build error:\n{err}");
    Ok(())
}

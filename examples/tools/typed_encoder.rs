//! A 12-layer BERT-style encoder (hidden 384, 12 heads, FFN 1536, post-LayerNorm) written
//! with typed handles: the compile-time stress test of the typed API, and a check that it
//! builds and runs on the CPU.
//!
//! ```text
//! cargo run --release --example typed_encoder [-- SEQ]
//! ```

use std::time::Instant;

use rlx::backend::{Backend, Executable};
use rlx::cpu::CpuBackend;
use rlx::tensor::HostTensor;
use rlx::typed::{Const, Scope, Tensor, build};

rlx::dims!(Batch, Seq);

type Hidden = Const<384>;
type Heads = Const<12>;
type HeadDim = Const<32>;
type Ffn = Const<1536>;
type Act<'g> = Tensor<'g, (Batch, Seq, Hidden)>;

const LAYERS: usize = 12;

/// `x · Wᵀ + b` with PyTorch-layout weights named `{name}.weight` / `{name}.bias`.
fn linear<'g, I: rlx::typed::Dim, O: rlx::typed::Dim>(
    g: &'g Scope<'g>,
    name: &str,
    x: Tensor<'g, (Batch, Seq, I)>,
) -> Tensor<'g, (Batch, Seq, O)> {
    let w: Tensor<(O, I)> = g.param(&format!("{name}.weight"));
    let b: Tensor<(O,)> = g.param(&format!("{name}.bias"));
    x.matmul_t_shared(w) + b
}

/// LayerNorm with `{name}.weight` / `{name}.bias`.
fn norm<'g>(g: &'g Scope<'g>, name: &str, x: Act<'g>) -> Act<'g> {
    let w: Tensor<(Hidden,)> = g.param(&format!("{name}.weight"));
    let b: Tensor<(Hidden,)> = g.param(&format!("{name}.bias"));
    x.layer_norm(w, b, 1e-12)
}

/// `(Batch, Seq, Hidden)` → `(Batch, Heads, Seq, HeadDim)`.
fn split_heads(x: Act<'_>) -> Tensor<'_, (Batch, Heads, Seq, HeadDim)> {
    x.reshape::<(Batch, Seq, Heads, HeadDim)>()
        .permute::<0, 2, 1, 3>()
}

fn layer<'g>(g: &'g Scope<'g>, i: usize, x: Act<'g>) -> Act<'g> {
    let p = format!("encoder.layer.{i}");
    let q = split_heads(linear(g, &format!("{p}.attention.self.query"), x));
    let k = split_heads(linear(g, &format!("{p}.attention.self.key"), x));
    let v = split_heads(linear(g, &format!("{p}.attention.self.value"), x));
    let context = q.attention(k, v, 1.0 / 32f64.sqrt()); // (Batch, Heads, Seq, HeadDim)
    let context = context
        .permute::<0, 2, 1, 3>()
        .reshape::<(Batch, Seq, Hidden)>();
    let attended = linear(g, &format!("{p}.attention.output.dense"), context);
    let x = norm(g, &format!("{p}.attention.output.LayerNorm"), x + attended);
    let up: Tensor<(Batch, Seq, Ffn)> = linear(g, &format!("{p}.intermediate.dense"), x);
    let down = linear(g, &format!("{p}.output.dense"), up.gelu());
    norm(g, &format!("{p}.output.LayerNorm"), x + down)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seq: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(16);
    let started = Instant::now();
    let graph = build(|g| {
        let mut x: Act = g.input("hidden_states");
        for i in 0..LAYERS {
            x = layer(g, i, x);
        }
        g.output("last_hidden_state", x);
    })?;
    println!(
        "built {LAYERS} layers: {} nodes in {:.1?}",
        graph.len(),
        started.elapsed()
    );

    let exe = CpuBackend::default().compile(&graph)?;
    let mut params = 0usize;
    for (_, node) in graph.params() {
        let shape: Vec<usize> = node
            .ty
            .shape
            .dims()
            .iter()
            .filter_map(|d| d.as_static())
            .collect();
        let n: usize = shape.iter().product();
        params += n;
        let name = node.name.as_deref().unwrap_or_default();
        // Deterministic small weights; norms start at identity.
        let values: Vec<f32> = if name.ends_with("LayerNorm.weight") {
            vec![1.0; n]
        } else {
            (0..n)
                .map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.05)
                .collect()
        };
        exe.set_weight(name, HostTensor::from_vec(values, shape)?.view())?;
    }
    let x: Vec<f32> = (0..seq * 384)
        .map(|i| ((i % 17) as f32 - 8.0) / 8.0)
        .collect();
    let x = HostTensor::from_vec(x, [1, seq, 384])?;
    let started = Instant::now();
    let out = exe.run(&[("hidden_states", x.view())], &[])?;
    println!(
        "ran batch 1 x seq {seq} with {:.1}M params in {:.1?}: output {:?}, finite: {}",
        params as f64 / 1e6,
        started.elapsed(),
        out[0].shape(),
        out[0].to_f64_vec().iter().all(|v| v.is_finite())
    );
    Ok(())
}

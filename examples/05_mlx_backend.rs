//! Tutorial 05: one model on two backends. A small transformer classifier is compiled for
//! the CPU thunk executor and for MLX (in each of its three modes), given the same
//! weights, and run on the same batch; the outputs agree to f32 rounding.
//!
//! ```text
//! cargo run --example 05_mlx_backend
//! ```
//!
//! MLX comes from the pinned wheel in `vendor/mlx` (fetched on first build) or `MLX_DIR`.
//! On Linux it runs MLX's CPU backend; on macOS the same code runs on Metal.

use std::error::Error;

#[cfg(feature = "mlx")]
use rlx::backend::Backend;
use rlx::cpu::CpuBackend;
use rlx::model::Config;
use rlx::nn::{FeedForward, LayerNorm, Linear, SelfAttention};
use rlx::tensor::HostTensor;
use rlx::typed::{Sizes, Tensor};

rlx::dims!(Batch, Seq);
rlx::config_dims!(Hidden, Heads, HeadDim, Ffn, Classes);

struct ClassifierConfig {
    hidden: usize,
    heads: usize,
    classes: usize,
}

impl Config for ClassifierConfig {
    fn sizes(&self) -> Sizes {
        Sizes::new()
            .with::<Hidden>(self.hidden)
            .with::<Heads>(self.heads)
            .with::<HeadDim>(self.hidden / self.heads)
            .with::<Ffn>(4 * self.hidden)
            .with::<Classes>(self.classes)
    }
}

#[derive(rlx::Params)]
struct ClassifierParams<'g> {
    attention: SelfAttention<'g, Hidden, Heads, HeadDim>,
    norm1: LayerNorm<'g, Hidden>,
    ffn: FeedForward<'g, Hidden, Ffn>,
    norm2: LayerNorm<'g, Hidden>,
    head: Linear<'g, Hidden, Classes>,
}

/// An encoder block, mean pooling over the sequence, and class probabilities.
#[rlx::model]
fn classifier<'g>(
    #[config] _cfg: &ClassifierConfig,
    p: &ClassifierParams<'g>,
    x: Tensor<'g, (Batch, Seq, Hidden)>,
) -> Tensor<'g, (Batch, Classes)> {
    let x = p.norm1.forward(x + p.attention.forward(x), 1e-5);
    let x = p.norm2.forward(x + p.ffn.forward(x), 1e-5);
    let pooled = x.mean::<1>();
    p.head.forward(pooled).softmax::<1>()
}

fn weights(spec: &rlx::params::ParamSpec) -> HostTensor {
    let shape = spec.static_shape().expect("static weights");
    let n: usize = shape.iter().product();
    let values = if spec.name.ends_with("norm1.weight") || spec.name.ends_with("norm2.weight") {
        vec![1.0f32; n]
    } else {
        (0..n)
            .map(|i| ((i * 7919 % 997) as f32 / 997.0 - 0.5) * 0.3)
            .collect()
    };
    HostTensor::from_vec(values, shape).expect("length matches the shape")
}

fn main() -> Result<(), Box<dyn Error>> {
    let cfg = ClassifierConfig {
        hidden: 64,
        heads: 4,
        classes: 3,
    };
    let (batch, seq) = (4, 10);
    let x: Vec<f32> = (0..batch * seq * cfg.hidden)
        .map(|i| ((i % 29) as f32 - 14.0) / 14.0)
        .collect();
    let x = HostTensor::from_vec(x, [batch, seq, cfg.hidden])?;

    let cpu = Classifier::compile(&CpuBackend::default(), &cfg)?;
    cpu.init_weights(weights)?;
    let reference = cpu.run(&x)?;
    println!(
        "cpu: probabilities of batch item 0: {:?}",
        &reference.to_f64_vec()[..3]
    );
    run_on_mlx(&cpu, &cfg, &x, &reference)
}

#[cfg(feature = "mlx")]
fn run_on_mlx(
    cpu: &Classifier,
    cfg: &ClassifierConfig,
    x: &HostTensor,
    reference: &HostTensor,
) -> Result<(), Box<dyn Error>> {
    use rlx::mlx::{MlxBackend, MlxMode};
    println!(
        "MLX {} on {} (BLAS: {})",
        rlx::mlx::version(),
        rlx::mlx::device_name()?,
        rlx::mlx::blas()
    );
    for mode in [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled] {
        let backend = MlxBackend::new(mode);
        let mlx = Classifier::compile(&backend, cfg)?;
        // The same weights: read back from the CPU executable by name.
        for spec in &cpu.manifest().params {
            mlx.set_weight(&spec.name, cpu.weight(&spec.name)?.view())?;
        }
        let out = mlx.run(x)?;
        let diff = out
            .to_f64_vec()
            .iter()
            .zip(reference.to_f64_vec())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        println!("{} {mode:?}: max |cpu - mlx| = {diff:.2e}", backend.name());
        if diff > 1e-5 {
            return Err(format!("MLX {mode:?} differs from the CPU by {diff}").into());
        }
    }
    Ok(())
}

#[cfg(not(feature = "mlx"))]
fn run_on_mlx(
    _: &Classifier,
    _: &ClassifierConfig,
    _: &HostTensor,
    _: &HostTensor,
) -> Result<(), Box<dyn Error>> {
    println!("this build has no MLX backend: build with the `mlx` feature (on by default)");
    Ok(())
}

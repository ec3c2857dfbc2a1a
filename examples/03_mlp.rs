//! Tutorial 03: a typed MLP as a model — `#[derive(Params)]` for its weights,
//! `#[rlx::model]` for its forward pass, random weights saved to a safetensors file and
//! loaded back, then run on the CPU.
//!
//! ```text
//! cargo run --example 03_mlp [-- BATCH]
//! ```

use std::error::Error;

use rlx::cpu::CpuBackend;
use rlx::nn::Linear;
use rlx::tensor::HostTensor;
use rlx::typed::{Const, Tensor};

// `Batch` is a runtime dim: each run reads it from the input's shape.
rlx::dims!(Batch);

type Pixels = Const<784>;
type Hidden = Const<128>;
type Classes = Const<10>;

/// The weights. Field paths become checkpoint names: `fc1.weight`, `fc1.bias`, ...
/// `Linear` reads PyTorch's `[out, in]` layout, so a `torch.nn.Linear` checkpoint loads as is.
#[derive(rlx::Params)]
pub struct MlpParams<'g> {
    fc1: Linear<'g, Pixels, Hidden>,
    fc2: Linear<'g, Hidden, Classes>,
}

/// The forward pass: ordinary Rust over typed handles. `#[rlx::model]` keeps this fn and
/// generates the `Mlp` type with `build`, `compile` and a typed `run(x)`.
#[rlx::model(outputs(probs))]
pub fn mlp<'g>(p: &MlpParams<'g>, x: Tensor<'g, (Batch, Pixels)>) -> Tensor<'g, (Batch, Classes)> {
    let hidden = p.fc1.forward(x).relu();
    p.fc2.forward(hidden).softmax::<1>()
}

/// A small deterministic generator, so the example needs no extra crates.
struct Lcg(u64);

impl Lcg {
    fn uniform(&mut self, scale: f32) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let batch: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(4);

    // 1. The manifest: every weight with its shape in the graph and in the checkpoint.
    let manifest = Mlp::manifest()?;
    println!("weights ({} values):\n{manifest}", manifest.element_count());

    // 2. Compile for the CPU and bind random weights (uniform in ±1/sqrt(fan_in)).
    let backend = CpuBackend::default();
    let model = Mlp::compile(&backend)?;
    let mut rng = Lcg(42);
    model.init_weights(|spec| {
        let shape = spec.static_shape().expect("weights have static shapes");
        let fan_in = shape[0] as f32;
        let values = (0..shape.iter().product())
            .map(|_| rng.uniform(1.0 / fan_in.sqrt()))
            .collect();
        HostTensor::from_vec(values, shape).expect("length matches the shape")
    })?;

    // 3. Save them as a checkpoint, then load it into a second compiled copy.
    let path = std::env::temp_dir().join(format!("rlx-03-mlp-{}.safetensors", std::process::id()));
    model.save_safetensors(&path)?;
    let loaded = Mlp::compile(&backend)?;
    let report = loaded.load_safetensors(&path)?;
    println!(
        "saved {} and loaded {} weights back",
        path.display(),
        report.loaded
    );
    std::fs::remove_file(&path)?;

    // 4. Run both on a batch of inputs: the same numbers come out.
    let pixels: Vec<f32> = (0..batch * 784)
        .map(|i| ((i * 37 % 255) as f32) / 255.0)
        .collect();
    let x = HostTensor::from_vec(pixels, [batch, 784])?;
    let probs = model.run(&x)?;
    let again = loaded.run(&x)?;
    assert_eq!(probs, again, "a loaded checkpoint reproduces the model");

    let probs = probs.into_vec::<f32>()?;
    for (i, row) in probs.chunks(10).enumerate() {
        let (class, p) =
            row.iter().enumerate().fold(
                (0, f32::MIN),
                |best, (c, &p)| if p > best.1 { (c, p) } else { best },
            );
        let total: f32 = row.iter().sum();
        println!("sample {i}: class {class} (p = {p:.3}), probabilities sum to {total:.4}");
    }

    // 5. Mistakes are typed errors that name the tensor: here, a batch of 783 features.
    let wrong = HostTensor::zeros(rlx::ir::DType::F32, [batch, 783]);
    if let Err(e) = model.run(&wrong) {
        println!("wrong input: {e}");
    }
    Ok(())
}

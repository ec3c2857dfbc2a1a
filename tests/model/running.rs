//! Building, compiling and running generated models against hand-computed references.

use approx::assert_relative_eq;
use rlx::backend::RunError;
use rlx::cpu::CpuBackend;
use rlx::params::ParamSpec;
use rlx::tensor::HostTensor;

use super::models::{Classifier, Deep, DeepConfig, Mlp};

/// Deterministic values in [-1, 1) for a weight, from its name's hash and the index.
pub fn fill(spec: &ParamSpec) -> HostTensor {
    let shape = spec.static_shape().expect("static weights");
    let n: usize = shape.iter().product();
    let seed = spec
        .name
        .bytes()
        .fold(17u64, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
    let values = (0..n)
        .map(|i| {
            let v = (seed.wrapping_add(i as u64 * 2654435761) % 2000) as f32;
            v / 1000.0 - 1.0
        })
        .collect();
    HostTensor::from_vec(values, shape).unwrap()
}

/// `x [n, k] · W [k, m] + b`, in f64.
fn linear(x: &[f64], n: usize, w: &[f64], b: &[f64], k: usize, m: usize) -> Vec<f64> {
    let mut out = vec![0.0; n * m];
    for r in 0..n {
        for c in 0..m {
            out[r * m + c] = b[c] + (0..k).map(|i| x[r * k + i] * w[i * m + c]).sum::<f64>();
        }
    }
    out
}

fn weight(model: &rlx::model::Compiled, name: &str) -> Vec<f64> {
    model.weight(name).unwrap().to_f64_vec()
}

fn input(batch: usize) -> HostTensor {
    let x: Vec<f32> = (0..batch * 4).map(|i| (i as f32 * 0.37).sin()).collect();
    HostTensor::from_vec(x, [batch, 4]).unwrap()
}

fn mlp_reference(model: &rlx::model::Compiled, x: &HostTensor) -> Vec<f64> {
    let n = x.shape()[0];
    let h = linear(
        &x.to_f64_vec(),
        n,
        &weight(model, "fc1.weight"),
        &weight(model, "fc1.bias"),
        4,
        8,
    );
    let h: Vec<f64> = h.iter().map(|v| v.max(0.0)).collect();
    linear(
        &h,
        n,
        &weight(model, "fc2.weight"),
        &weight(model, "fc2.bias"),
        8,
        3,
    )
}

#[test]
fn mlp_matches_a_hand_computed_reference_for_any_batch() {
    let model = Mlp::compile(&CpuBackend::default()).unwrap();
    assert_eq!(Mlp::INPUTS, ["x"]);
    assert_eq!(Mlp::OUTPUTS, ["output"]);
    model.init_weights(fill).unwrap();
    for batch in [1, 5, 32] {
        let x = input(batch);
        let y = model.run(&x).unwrap();
        assert_eq!(y.shape(), [batch, 3]);
        let expected = mlp_reference(&model, &x);
        for (a, b) in y.to_f64_vec().iter().zip(&expected) {
            assert_relative_eq!(*a, *b, epsilon = 1e-5, max_relative = 1e-5);
        }
    }
}

#[test]
fn the_graph_and_manifest_follow_the_signature() {
    let graph = Mlp::build().unwrap();
    let text = graph.to_string();
    assert!(text.contains("f32[batch,4] = input \"x\""), "{text}");
    let manifest = Mlp::manifest().unwrap();
    let names: Vec<&str> = manifest.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
    // The graph holds `[in, out]`; the checkpoint holds PyTorch's `[out, in]`.
    let w = manifest.get("fc1.weight").unwrap();
    assert_eq!(w.static_shape(), Some(vec![4, 8]));
    assert_eq!(w.file_shape(), Some(vec![8, 4]));
    assert_eq!(manifest.element_count(), 4 * 8 + 8 + 8 * 3 + 3);
}

#[test]
fn models_compose_and_return_tuples() {
    let model = Classifier::compile(&CpuBackend::default()).unwrap();
    assert_eq!(Classifier::OUTPUTS, ["logits", "probs"]);
    model.init_weights(fill).unwrap();
    model
        .set_weight("temperature", HostTensor::scalar(2.0f32).view())
        .unwrap();
    let x = input(3);
    let (logits, probs) = model.run(&x).unwrap();
    let expected = mlp_reference(&model, &x);
    for row in 0..3 {
        let l = &expected[row * 3..row * 3 + 3];
        let z: f64 = l.iter().map(|v| (v / 2.0).exp()).sum();
        for (c, lc) in l.iter().enumerate() {
            assert_relative_eq!(logits.to_f64_vec()[row * 3 + c], *lc, epsilon = 1e-5);
            assert_relative_eq!(
                probs.to_f64_vec()[row * 3 + c],
                (lc / 2.0).exp() / z,
                epsilon = 1e-6
            );
        }
    }
}

#[test]
fn runtime_dims_are_read_from_inputs_and_conflicts_are_errors() {
    let cfg = DeepConfig {
        hidden: 4,
        layers: 2,
    };
    let model = Deep::compile(&CpuBackend::default(), &cfg).unwrap();
    model.init_weights(fill).unwrap();
    let make = |b: usize, s: usize| {
        let v: Vec<f32> = (0..b * s * 4)
            .map(|i| (i as f32 * 0.1).cos() * 0.5)
            .collect();
        HostTensor::from_vec(v, [b, s, 4]).unwrap()
    };
    let out = model.run(&make(2, 3), &make(2, 3)).unwrap();
    assert_eq!(out.shape(), [2, 3, 4]);
    let err = model.run(&make(2, 3), &make(2, 5)).unwrap_err();
    assert!(
        matches!(&err, RunError::InconsistentSymbol { symbol, .. } if symbol == "seq"),
        "{err}"
    );
    let err = model.run(
        &make(2, 3),
        &HostTensor::zeros(rlx::ir::DType::F64, [2, 3, 4]),
    );
    assert!(matches!(err, Err(RunError::DType { .. })), "{err:?}");
}

#[test]
fn config_dims_split_weights_and_vec_fields() {
    let cfg = DeepConfig {
        hidden: 4,
        layers: 2,
    };
    let manifest = Deep::manifest(&cfg).unwrap();
    let names: Vec<&str> = manifest.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "layer.0.qkv.weight[0/3]",
            "layer.0.qkv.bias[0/3]",
            "layer.0.qkv.weight[1/3]",
            "layer.0.qkv.bias[1/3]",
            "layer.0.qkv.weight[2/3]",
            "layer.0.qkv.bias[2/3]",
            "layer.1.qkv.weight[0/3]",
            "layer.1.qkv.bias[0/3]",
            "layer.1.qkv.weight[1/3]",
            "layer.1.qkv.bias[1/3]",
            "layer.1.qkv.weight[2/3]",
            "layer.1.qkv.bias[2/3]",
        ]
    );
    let files = manifest.file_tensors();
    assert_eq!(files.len(), 4);
    assert_eq!(files[0].key, "layer.0.qkv.weight");
    assert_eq!(files[0].shape, [12, 4]);
    assert_eq!(files[1].shape, [12]);
    // Another config gives another graph from the same code.
    let big = Deep::build(&DeepConfig {
        hidden: 6,
        layers: 3,
    })
    .unwrap();
    assert_eq!(big.params().count(), 18);
    assert!(big.to_string().contains("f32[batch,seq,6]"));
}

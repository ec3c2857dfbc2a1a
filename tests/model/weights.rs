//! Weight files: round trips, checkpoint layouts, and every error case as a typed error.

use std::borrow::Cow;
use std::path::PathBuf;

use half::f16;
use rlx::cpu::CpuBackend;
use rlx::tensor::HostTensor;
use rlx::weights::{LoadOptions, WeightsError};
use safetensors::{Dtype, View};

use super::models::{Deep, DeepConfig, Mlp};
use super::running::fill;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "rlx-weights-{}-{name}.safetensors",
        std::process::id()
    ))
}

struct Raw {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn f32s(shape: &[usize], offset: f32) -> Raw {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .flat_map(|i| (i as f32 + offset).to_le_bytes())
        .collect();
    Raw {
        dtype: Dtype::F32,
        shape: shape.to_vec(),
        data,
    }
}

/// A PyTorch-layout checkpoint of the MLP: `fc*.weight` is `[out, in]`.
fn mlp_checkpoint() -> Vec<(String, Raw)> {
    vec![
        ("fc1.weight".into(), f32s(&[8, 4], 0.0)),
        ("fc1.bias".into(), f32s(&[8], 100.0)),
        ("fc2.weight".into(), f32s(&[3, 8], 200.0)),
        ("fc2.bias".into(), f32s(&[3], 300.0)),
    ]
}

fn write(name: &str, tensors: &[(String, Raw)]) -> PathBuf {
    let path = temp(name);
    safetensors::serialize_to_file(tensors.iter().map(|(k, v)| (k.clone(), v)), None, &path)
        .unwrap();
    path
}

fn mlp() -> Mlp {
    Mlp::compile(&CpuBackend::default()).unwrap()
}

#[test]
fn pytorch_layout_loads_transposed_and_saves_back_identically() {
    let path = write("torch", &mlp_checkpoint());
    let model = mlp();
    let report = model.load_safetensors(&path).unwrap();
    assert_eq!(report.loaded, 4);
    // fc1.weight[out=1, in=2] in the file is element 1 * 4 + 2 = 6.
    let w = model.weight("fc1.weight").unwrap();
    assert_eq!(w.shape(), [4, 8]);
    assert_eq!(w.as_slice::<f32>().unwrap()[2 * 8 + 1], 6.0);

    let saved = temp("saved");
    model.save_safetensors(&saved).unwrap();
    let original = std::fs::read(&path).unwrap();
    let again = std::fs::read(&saved).unwrap();
    let a = safetensors::SafeTensors::deserialize(&original).unwrap();
    let b = safetensors::SafeTensors::deserialize(&again).unwrap();
    for (name, view) in a.tensors() {
        let other = b.tensor(&name).unwrap();
        assert_eq!(view.shape(), other.shape(), "{name}");
        assert_eq!(view.data(), other.data(), "{name}");
    }
    std::fs::remove_file(path).ok();
    std::fs::remove_file(saved).ok();
}

#[test]
fn split_weights_round_trip_through_a_fused_checkpoint() {
    let cfg = DeepConfig {
        hidden: 4,
        layers: 2,
    };
    let model = Deep::compile(&CpuBackend::default(), &cfg).unwrap();
    model.init_weights(fill).unwrap();
    let path = temp("fused");
    model.save_safetensors(&path).unwrap();

    let bytes = std::fs::read(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut keys = file.names();
    keys.sort();
    assert_eq!(
        keys,
        [
            "layer.0.qkv.bias",
            "layer.0.qkv.weight",
            "layer.1.qkv.bias",
            "layer.1.qkv.weight"
        ]
    );
    // Rows 4..8 of the fused PyTorch weight are k's `[out, in]` matrix.
    let fused = file.tensor("layer.1.qkv.weight").unwrap();
    assert_eq!(fused.shape(), [12, 4]);
    let k = model.weight("layer.1.qkv.weight[1/3]").unwrap();
    let k = k.as_slice::<f32>().unwrap();
    let row = |r: usize, c: usize| {
        let at = (r * 4 + c) * 4;
        f32::from_le_bytes(fused.data()[at..at + 4].try_into().unwrap())
    };
    for out in 0..4 {
        for inp in 0..4 {
            assert_eq!(row(4 + out, inp), k[inp * 4 + out]);
        }
    }

    let fresh = Deep::compile(&CpuBackend::default(), &cfg).unwrap();
    fresh.load_safetensors(&path).unwrap();
    for spec in &model.manifest().params {
        assert_eq!(
            fresh.weight(&spec.name).unwrap(),
            model.weight(&spec.name).unwrap()
        );
    }
    std::fs::remove_file(path).ok();
}

#[test]
fn every_mismatch_is_reported_at_once() {
    let mut tensors = mlp_checkpoint();
    tensors.retain(|(k, _)| k != "fc1.bias"); // missing
    tensors.push(("pooler.dense.weight".into(), f32s(&[2], 0.0))); // unexpected
    tensors[0].1 = f32s(&[4, 8], 0.0); // fc1.weight not transposed: wrong shape
    let bias = &mut tensors[2].1; // fc2.bias as f64: wrong dtype
    bias.dtype = Dtype::F64;
    bias.data = (0..3).flat_map(|i| f64::from(i).to_le_bytes()).collect();
    let path = write("mismatch", &tensors);
    let model = mlp();
    model.init_weights(fill).unwrap();
    let before = model.weight("fc2.weight").unwrap();
    let err = model.load_safetensors(&path).unwrap_err();
    let WeightsError::Mismatch {
        missing,
        unexpected,
        mismatched,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(missing, &["fc1.bias"]);
    assert_eq!(unexpected, &["pooler.dense.weight"]);
    let keys: Vec<&str> = mismatched.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, ["fc1.weight", "fc2.bias"]);
    assert_eq!(mismatched[0].expected, "f32[8,4]");
    assert_eq!(mismatched[0].found, "f32[4,8]");
    assert_eq!(mismatched[1].found, "f64[3]");
    let text = err.to_string();
    for needle in [
        "missing: fc1.bias",
        "unexpected: pooler.dense.weight",
        "mismatched: fc1.weight is f32[4,8], expected f32[8,4]",
    ] {
        assert!(text.contains(needle), "{text}");
    }
    // Nothing was bound by the failed load.
    assert_eq!(model.weight("fc2.weight").unwrap(), before);
    std::fs::remove_file(path).ok();
}

#[test]
fn conversion_and_extra_tensors_only_when_asked() {
    let mut tensors: Vec<(String, Raw)> = mlp_checkpoint()
        .into_iter()
        .map(|(k, raw)| {
            let data = raw
                .data
                .chunks_exact(4)
                .flat_map(|c| {
                    f16::from_f32(f32::from_le_bytes(c.try_into().unwrap())).to_le_bytes()
                })
                .collect();
            (
                k,
                Raw {
                    dtype: Dtype::F16,
                    shape: raw.shape,
                    data,
                },
            )
        })
        .collect();
    tensors.push(("pooler.dense.bias".into(), f32s(&[2], 0.0)));
    let path = write("f16", &tensors);
    let model = mlp();
    let err = model.load_safetensors(&path).unwrap_err();
    assert!(
        matches!(&err, WeightsError::Mismatch { mismatched, .. } if mismatched.len() == 4),
        "{err}"
    );
    let options = LoadOptions {
        convert_floats: true,
        allow_unexpected: true,
    };
    let report = model.load_safetensors_with(&path, &options).unwrap();
    assert_eq!(report.converted.len(), 4);
    assert_eq!(report.ignored, ["pooler.dense.bias"]);
    let b = model.weight("fc2.bias").unwrap();
    assert_eq!(b.as_slice::<f32>().unwrap(), &[300.0, 301.0, 302.0]);
    std::fs::remove_file(path).ok();
}

#[test]
fn corrupt_truncated_and_absent_files_are_typed_errors() {
    let good = write("good", &mlp_checkpoint());
    let bytes = std::fs::read(&good).unwrap();
    let model = mlp();

    let truncated = temp("truncated");
    std::fs::write(&truncated, &bytes[..bytes.len() - 10]).unwrap();
    let err = model.load_safetensors(&truncated).unwrap_err();
    assert!(matches!(err, WeightsError::Format { .. }), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");

    let corrupt = temp("corrupt");
    let mut bad = bytes.clone();
    bad[8..16].copy_from_slice(b"garbage!");
    std::fs::write(&corrupt, &bad).unwrap();
    assert!(matches!(
        model.load_safetensors(&corrupt),
        Err(WeightsError::Format { .. })
    ));

    let empty = temp("empty");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        model.load_safetensors(&empty),
        Err(WeightsError::Format { .. } | WeightsError::Io { .. })
    ));

    let err = model.load_safetensors(temp("does-not-exist")).unwrap_err();
    assert!(matches!(err, WeightsError::Io { .. }), "{err}");
    assert!(err.to_string().contains("does-not-exist"), "{err}");

    // Saving before every weight is bound names the first unbound one.
    let err = mlp().save_safetensors(temp("unbound")).unwrap_err();
    assert!(err.to_string().contains("fc1.weight"), "{err}");
    for p in [good, truncated, corrupt, empty] {
        std::fs::remove_file(p).ok();
    }
}

#[test]
fn weights_can_also_be_bound_one_by_one() {
    let model = mlp();
    let err = model
        .set_weight(
            "fc1.weight",
            HostTensor::zeros(rlx::ir::DType::F32, [8, 4]).view(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("fc1.weight"), "{err}");
    let err = model
        .set_weight("nope", HostTensor::scalar(1.0f32).view())
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

//! A real model's gradients: all-MiniLM-L6-v2 differentiated by `rlx::autodiff` against
//! PyTorch autograd (`tests/data/minilm_grads.json`, written by
//! `scripts/minilm_grad_reference.py`): the gradient of `Σ embeddings · R` over a padded
//! batch of four sentences with respect to every one of the 101 weights.

use rlx::autodiff::{Wrt, gradients};
use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::cpu::CpuBackend;
use rlx::ir::{DType, ReduceOp};
use rlx::models::bert::{Bert, BertConfig};
use rlx::models::minilm::ModelFiles;
use rlx::tensor::HostTensor;
use rlx::weights::{LoadOptions, load_safetensors};
use rlx_testkit::testing::data_dir;
use safetensors::SafeTensors;
use serde_json::Value;

/// Runs the gradient graph on `backend` and compares every weight's gradient with
/// PyTorch's: each norm within `1e-5` relative plus `1e-6`, each sampled entry within
/// `1e-5` of the tensor's largest magnitude plus `1e-6`. Both sides compute in f32 through
/// six layers forward and back, summing in different orders, so agreement is bounded
/// relative to each tensor's scale (measured: norms within 1.5e-6 relative, entries within
/// 5e-6 absolute). The absolute `1e-6` covers the key biases, whose exact gradient is zero
/// (softmax ignores a shift shared by all keys): both sides return f32 noise of ~1e-8
/// there. `RLX_GRAD_REPORT=1` prints every weight's figures instead of asserting.
fn check<B: Backend>(backend: &B, label: &str)
where
    B::Executable: 'static,
{
    let files = ModelFiles::locate(None).unwrap_or_else(|e| panic!("{e}"));
    let config = BertConfig::from_file(files.config()).unwrap();
    let (graph, manifest) = Bert::build_with_manifest(&config).unwrap();
    let emb = graph
        .outputs()
        .iter()
        .find(|o| o.name == "embeddings")
        .expect("the model returns embeddings")
        .node;
    let mut b = GraphBuilder::from_graph(graph);
    let ty = b.ty(emb).unwrap().clone();
    let r = b.input("r", DType::F32, ty.shape.clone()).unwrap();
    let weighted = b.mul(emb, r).unwrap();
    let loss = b.reduce(ReduceOp::Sum, weighted, &[0, 1], false).unwrap();
    b.output("loss", loss).unwrap();
    let forward = b.finish().unwrap();
    let training = gradients(&forward, "loss", &Wrt::Params).unwrap();

    let exe = backend.compile(&training).unwrap();
    let options = LoadOptions {
        allow_unexpected: true,
        ..LoadOptions::default()
    };
    load_safetensors(&exe, &manifest, &files.weights(), &options).unwrap();

    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir().join("minilm_grads.json")).unwrap(),
    )
    .unwrap();
    let bytes = std::fs::read(data_dir().join("minilm/public_reference.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let i64s = |name: &str| -> Vec<i64> {
        st.tensor(name)
            .unwrap()
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let full_seq = st.tensor("input_ids").unwrap().shape()[1];
    let (ids_all, lengths) = (i64s("input_ids"), i64s("lengths"));
    let seq = reference["seq"].as_u64().unwrap() as usize;
    let rows = 4;
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    for row in 0..rows {
        ids.extend_from_slice(&ids_all[row * full_seq..row * full_seq + seq]);
        mask.extend((0..seq).map(|j| i64::from((j as i64) < lengths[row])));
    }
    let hidden = 384;
    let r: Vec<f32> = (0..rows * hidden)
        .map(|k| (0.1 * k as f64 + 0.3).sin() as f32)
        .collect();
    let t = |v: Vec<i64>| HostTensor::from_vec(v, [rows, seq]).unwrap();
    let (ids, mask, types) = (t(ids), t(mask), t(vec![0; rows * seq]));
    let r = HostTensor::from_vec(r, [rows, hidden]).unwrap();
    let outputs = exe
        .run(
            &[
                ("input_ids", ids.view()),
                ("attention_mask", mask.view()),
                ("token_type_ids", types.view()),
                ("r", r.view()),
            ],
            &[],
        )
        .unwrap();
    let names: Vec<&str> = training.outputs().iter().map(|o| o.name.as_str()).collect();
    let loss = outputs[names.iter().position(|n| *n == "loss").unwrap()].to_f64_vec()[0];
    let expected_loss = reference["loss"].as_f64().unwrap();
    assert!(
        (loss - expected_loss).abs() < 1e-5,
        "{label}: loss {loss} vs {expected_loss}"
    );

    let grads = reference["grads"].as_object().unwrap();
    let mut checked = 0;
    let mut worst = 0.0f64;
    for spec in &manifest.params {
        let want = &grads[&spec.key];
        let index = names
            .iter()
            .position(|n| *n == format!("grad/{}", spec.name))
            .unwrap_or_else(|| panic!("no gradient for {}", spec.name));
        let got = &outputs[index];
        let mut values = got.to_f64_vec();
        if spec.transpose {
            let (r, c) = (got.shape()[0], got.shape()[1]);
            values = (0..r * c).map(|k| values[(k % r) * c + k / r]).collect();
        }
        let norm = values.iter().map(|v| v * v).sum::<f64>().sqrt();
        let want_norm = want["norm"].as_f64().unwrap();
        let scale = want["max_abs"].as_f64().unwrap().max(1e-30);
        if std::env::var_os("RLX_GRAD_REPORT").is_some() {
            let mut worst_here = 0.0f64;
            for sample in want["samples"].as_array().unwrap() {
                let k = sample[0].as_u64().unwrap() as usize;
                let v = sample[1].as_f64().unwrap();
                worst_here = worst_here.max((values[k] - v).abs());
            }
            println!(
                "{:55} norm {norm:.3e} vs {want_norm:.3e} (rel {:.1e}) max_abs {scale:.2e} worst abs {worst_here:.2e}",
                spec.key,
                (norm - want_norm).abs() / want_norm
            );
            continue;
        }
        assert!(
            (norm - want_norm).abs() <= 1e-5 * want_norm + 1e-6,
            "{label}: {} norm {norm} vs {want_norm}",
            spec.key
        );
        for sample in want["samples"].as_array().unwrap() {
            let k = sample[0].as_u64().unwrap() as usize;
            let v = sample[1].as_f64().unwrap();
            let err = (values[k] - v).abs();
            worst = worst.max(err);
            assert!(
                err <= 1e-5 * scale + 1e-6,
                "{label}: {}[{k}] = {}, PyTorch {v} (scale {scale})",
                spec.key,
                values[k]
            );
        }
        checked += 1;
    }
    assert_eq!(checked, grads.len(), "{label}: every weight compared");
    println!("{label}: {checked} weights, worst sampled absolute error {worst:.2e}");
}

#[test]
fn minilm_gradients_match_pytorch_on_the_cpu() {
    check(&CpuBackend::default(), "cpu");
}

#[cfg(feature = "mlx")]
#[test]
fn minilm_gradients_match_pytorch_on_mlx() {
    check(
        &rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled),
        "mlx",
    );
}

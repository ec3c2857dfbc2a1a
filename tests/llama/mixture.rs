//! Mixtures of experts in the family beyond inference (which `variants.rs` checks against
//! transformers): their config keys, the load-balancing loss against its definition, and
//! training a tiny Qwen2-MoE whose router and experts learn.

use rlx::backend::{Backend, Executable};
use rlx::models::llama::{LlamaConfig, LlamaLoss, Mixture};
use rlx::tensor::HostTensor;
use rlx_testkit::llm::{ids, reference};

/// transformers' keys and defaults for each family's mixture; what RLX cannot build is an
/// error naming its key.
#[test]
fn mixture_configs_follow_transformers() {
    let base = r#""hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 96, "vocab_size": 128"#;
    let read = |extra: &str| LlamaConfig::from_hf_json(&format!("{{{base}, {extra}}}"));
    let qwen2 = read(
        r#""model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
            "output_router_logits": true"#,
    )
    .unwrap();
    let m = qwen2.mixture.as_ref().unwrap();
    assert_eq!(
        (m.experts, m.experts_per_token, m.expert_intermediate_size),
        (8, 2, 32)
    );
    assert_eq!(m.shared_expert_intermediate_size, Some(48));
    assert!(!m.normalize_weights && qwen2.qkv_bias);
    assert_eq!(m.balance_loss_weight, 0.001);

    let qwen3 = read(
        r#""model_type": "qwen3_moe", "num_local_experts": 16, "moe_intermediate_size": 24,
            "norm_topk_prob": true"#,
    )
    .unwrap();
    let m = qwen3.mixture.as_ref().unwrap();
    assert_eq!((m.experts, m.experts_per_token), (16, 8));
    assert!(m.normalize_weights && qwen3.qk_norm && m.shared_expert_intermediate_size.is_none());
    assert_eq!(m.balance_loss_weight, 0.0);

    let mixtral = read(r#""model_type": "mixtral", "sliding_window": 32"#).unwrap();
    let m = mixtral.mixture.as_ref().unwrap();
    assert_eq!(
        (m.experts, m.experts_per_token, m.expert_intermediate_size),
        (8, 2, 96)
    );
    assert!(m.normalize_weights);
    assert_eq!(mixtral.sliding_window.as_ref().unwrap().local, [true, true]);
    assert!(read(r#""model_type": "qwen2""#).unwrap().mixture.is_none());

    let error = |extra: &str| read(extra).unwrap_err().to_string();
    let moe = r#""model_type": "qwen2_moe", "moe_intermediate_size": 32"#;
    assert!(error(&format!(r#"{moe}, "mlp_only_layers": [1]"#)).starts_with("mlp_only_layers"));
    assert!(
        error(&format!(r#"{moe}, "decoder_sparse_step": 2"#)).starts_with("decoder_sparse_step")
    );
    assert!(
        error(&format!(
            r#"{moe}, "num_experts": 4, "num_experts_per_tok": 5"#
        ))
        .starts_with("expert_used_count")
    );
    assert!(error(r#""model_type": "qwen3_moe""#).contains("moe_intermediate_size"));
    assert!(
        error(&format!(r#"{moe}, "num_experts": 1000000"#)).starts_with("expert_count"),
        "a mixture too large to build is refused before anything is allocated"
    );
}

/// transformers' `load_balancing_loss_func` in float64: `E · Σ_e f_e P_e` over the tokens,
/// `f_e` the routes to `e` per token and `P_e` the mean probability of `e`.
fn balance_reference(logits: &[f64], experts: usize, per_token: usize) -> f64 {
    let tokens = logits.len() / experts;
    let (mut routed, mut mean) = (vec![0.0; experts], vec![0.0; experts]);
    for row in logits.chunks(experts) {
        let top = row.iter().cloned().fold(f64::MIN, f64::max);
        let exp: Vec<f64> = row.iter().map(|v| (v - top).exp()).collect();
        let sum: f64 = exp.iter().sum();
        let mut order: Vec<usize> = (0..experts).collect();
        order.sort_by(|&a, &b| exp[b].total_cmp(&exp[a]));
        for &e in &order[..per_token] {
            routed[e] += 1.0 / tokens as f64;
        }
        for (m, v) in mean.iter_mut().zip(&exp) {
            *m += v / sum / tokens as f64;
        }
    }
    experts as f64 * routed.iter().zip(&mean).map(|(f, p)| f * p).sum::<f64>()
}

#[test]
fn load_balancing_loss_matches_its_definition() {
    use rlx::nn::{load_balancing_loss, route};
    use rlx::typed::{Const, Tensor, build};
    rlx::dims!(Batch, Seq);
    let graph = build(|g| {
        let logits: Tensor<(Batch, Seq, Const<6>)> = g.input("logits");
        let routes = route::<_, _, _, Const<2>, _>(logits, true);
        g.output("balance", load_balancing_loss(logits, routes.experts));
    })
    .unwrap();
    let values: Vec<f32> = (0..2 * 5 * 6)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 4.0)
        .collect();
    let want = balance_reference(
        &values.iter().map(|v| f64::from(*v)).collect::<Vec<_>>(),
        6,
        2,
    );
    let logits = HostTensor::from_vec(values, [2, 5, 6]).unwrap();
    let cpu = rlx::cpu::CpuBackend::default();
    let exe = cpu.compile(&graph).unwrap();
    let got = exe.run(&[("logits", logits.view())], &[]).unwrap()[0].to_f64_vec()[0];
    assert!((got - want).abs() < 1e-5, "{got} against {want}");
    // Uniform routing gives 1, its least value.
    assert!(want > 1.0);
}

/// A tiny Qwen2-MoE (shared expert, unnormalized weights) learns a batch through
/// `llama_loss` and `Trainer`, the load-balancing loss included: the router, the experts
/// and the shared expert all move.
fn mixture_trains<B: Backend>(label: &str, backend: &B) {
    use rlx::train::{Optimizer, TrainConfig, Trainer};
    let data = reference("tiny_decoders");
    let case = &data["cases"]["qwen2_moe"];
    let mut config = LlamaConfig::from_hf_json(case["config_json"].as_str().unwrap()).unwrap();
    let mixture: &mut Mixture = config.mixture.as_mut().unwrap();
    mixture.balance_loss_weight = 0.01;
    let graph = LlamaLoss::build(&config).unwrap();
    let manifest = LlamaLoss::manifest(&config).unwrap();
    let prompt = ids(&data["prompt"]);
    let n = prompt.len();
    let input = HostTensor::from_vec(prompt.clone(), [1, n]).unwrap();
    let labels: Vec<i64> = (0..n).map(|i| prompt[(i + 1) % n]).collect();
    let labels = HostTensor::from_vec(labels, [1, n]).unwrap();
    let batch = [("input_ids", input.view()), ("labels", labels.view())];
    let mut trainer = Trainer::new(
        backend,
        &graph,
        "loss",
        TrainConfig::new(Optimizer::adamw(1e-2)),
    )
    .unwrap();
    for spec in &manifest.params {
        let shape = spec.static_shape().unwrap();
        let values = rlx_testkit::llm::formula(&spec.name, shape.iter().product(), false);
        let value = HostTensor::from_vec(values, shape).unwrap();
        trainer.set_weight(&spec.name, value.view()).unwrap();
    }
    let watched = [
        "blk.0.ffn_gate_inp.weight",
        "blk.1.ffn_down_exps.weight",
        "blk.0.ffn_up_shexp.weight",
        "blk.1.ffn_gate_inp_shexp.weight",
    ];
    let before: Vec<HostTensor> = watched.iter().map(|w| trainer.weight(w).unwrap()).collect();
    let losses: Vec<f64> = (0..25).map(|_| trainer.step(&batch).unwrap()).collect();
    println!("{label}: loss {:.4} -> {:.4}", losses[0], losses[24]);
    assert!(losses.iter().all(|l| l.is_finite()), "{label}: {losses:?}");
    assert!(losses[24] < 0.3 * losses[0], "{label}: {losses:?}");
    for (name, old) in watched.iter().zip(before) {
        let new = trainer.weight(name).unwrap();
        let moved = old
            .to_f64_vec()
            .iter()
            .zip(new.to_f64_vec())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(moved > 1e-4, "{label}: {name} did not learn ({moved})");
    }
}

#[test]
fn mixture_trains_on_the_cpu() {
    mixture_trains("cpu", &rlx::cpu::CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn mixture_trains_on_mlx() {
    mixture_trains("mlx", &rlx::mlx::MlxBackend::default());
}

/// Mixtral is a `llama` GGUF file with `expert_count`; Qwen2-MoE's weights are not
/// renormalized (llama.cpp's rule), unless the file says.
#[test]
fn gguf_mixture_configs_follow_llama_cpp() {
    use rlx_testkit::gguf::{Meta, write};
    let read = |arch: &str, extra: &[(&str, Meta)]| {
        let key = |k: &str| format!("{arch}.{k}");
        let mut metadata: Vec<(String, Meta)> = vec![
            ("general.architecture".into(), Meta::string(arch)),
            (key("embedding_length"), Meta::u32(64)),
            (key("block_count"), Meta::u32(2)),
            (key("attention.head_count"), Meta::u32(4)),
            (key("feed_forward_length"), Meta::u32(96)),
            (key("context_length"), Meta::u32(128)),
            (key("vocab_size"), Meta::u32(128)),
            (key("attention.layer_norm_rms_epsilon"), Meta::f32(1e-5)),
            (key("expert_count"), Meta::u32(8)),
            (key("expert_used_count"), Meta::u32(2)),
        ];
        metadata.extend(extra.iter().map(|(k, m)| (key(k), m.clone())));
        let metadata: Vec<(&str, Meta)> = metadata
            .iter()
            .map(|(k, m)| (k.as_str(), m.clone()))
            .collect();
        let (bytes, _) = write(&metadata, &[], 32);
        LlamaConfig::from_gguf(&rlx::gguf::Gguf::from_bytes(bytes).unwrap()).unwrap()
    };
    let mixtral = read("llama", &[]);
    let m = mixtral.mixture.as_ref().unwrap();
    assert_eq!(
        (m.experts, m.experts_per_token, m.expert_intermediate_size),
        (8, 2, 96)
    );
    assert!(m.normalize_weights && mixtral.rope_traditional);
    let qwen = read(
        "qwen2moe",
        &[
            ("expert_feed_forward_length", Meta::u32(32)),
            ("expert_shared_feed_forward_length", Meta::u32(48)),
        ],
    );
    let m = qwen.mixture.as_ref().unwrap();
    assert_eq!(m.expert_intermediate_size, 32);
    assert_eq!(m.shared_expert_intermediate_size, Some(48));
    assert!(!m.normalize_weights && qwen.qkv_bias);
    let told = read("qwen2moe", &[("expert_weights_norm", Meta::bool(true))]);
    assert!(told.mixture.unwrap().normalize_weights);
}

/// Adapters on a mixture go on its attention: feed-forward targets are a typed error for
/// an adapter, and left out of the params a fine-tuning step trains.
#[test]
fn adapters_on_a_mixture_target_attention() {
    use rlx::models::llama::{LoraAdapter, LoraConfig, LoraTarget};
    let data = reference("tiny_decoders");
    let json = data["cases"]["qwen3_moe"]["config_json"].as_str().unwrap();
    let mut config = LlamaConfig::from_hf_json(json).unwrap();
    let every = LoraConfig::new(4, 8.0, &LoraTarget::ALL);
    let message = LoraAdapter::init(&config, every.clone(), 1)
        .unwrap_err()
        .to_string();
    assert!(message.contains("gate_proj"), "{message}");
    let attention = [LoraTarget::Query, LoraTarget::Value];
    assert!(LoraAdapter::init(&config, LoraConfig::new(4, 8.0, &attention), 1).is_ok());
    config.lora = Some(every);
    let params = config.adapter_params();
    assert_eq!(params.len(), 2 * 4 * 2, "{params:?}");
    let manifest = LlamaLoss::manifest(&config).unwrap();
    for name in &params {
        assert!(manifest.get(name).is_some(), "{name} is not declared");
    }
}

//! Loading a Hugging Face checkpoint into a decoder just compiled holds no copy of the
//! checkpoint beside the model: the shards stay mapped and each tensor is converted and
//! bound as it is read. Proven with a global allocator that keeps the peak of the heap (one
//! test in this binary, so nothing else allocates meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use half::bf16;
use rlx::cpu::CpuBackend;
use rlx::ir::DType;
use rlx::models::llama::LlamaDecoder;
use rlx::tensor::HostTensor;
use rlx_testkit::llm::Scratch;

struct Peak;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator unchanged; only counts the bytes.
unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        grew(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Peak = Peak;

const HIDDEN: usize = 512;
const FFN: usize = 1024;
const LAYERS: usize = 8;
const VOCAB: usize = 4096;
const KV_WIDTH: usize = 256;

/// A Llama checkpoint of `LAYERS` blocks in bfloat16, small values that vary.
fn checkpoint() -> Vec<(String, HostTensor)> {
    let mut shapes = vec![
        ("model.embed_tokens.weight".to_string(), vec![VOCAB, HIDDEN]),
        ("lm_head.weight".to_string(), vec![VOCAB, HIDDEN]),
        ("model.norm.weight".to_string(), vec![HIDDEN]),
    ];
    for l in 0..LAYERS {
        let at = |part: &str| format!("model.layers.{l}.{part}.weight");
        shapes.extend([
            (at("self_attn.q_proj"), vec![HIDDEN, HIDDEN]),
            (at("self_attn.k_proj"), vec![KV_WIDTH, HIDDEN]),
            (at("self_attn.v_proj"), vec![KV_WIDTH, HIDDEN]),
            (at("self_attn.o_proj"), vec![HIDDEN, HIDDEN]),
            (at("mlp.gate_proj"), vec![FFN, HIDDEN]),
            (at("mlp.up_proj"), vec![FFN, HIDDEN]),
            (at("mlp.down_proj"), vec![HIDDEN, FFN]),
            (at("input_layernorm"), vec![HIDDEN]),
            (at("post_attention_layernorm"), vec![HIDDEN]),
        ]);
    }
    shapes
        .into_iter()
        .enumerate()
        .map(|(k, (name, shape))| {
            let n: usize = shape.iter().product();
            let values: Vec<bf16> = (0..n)
                .map(|i| bf16::from_f32(((i * 7 + k * 13) % 101) as f32 / 1000.0 - 0.05))
                .collect();
            (name, HostTensor::from_vec(values, shape).unwrap())
        })
        .collect()
}

const CONFIG: &str = r#"{
  "model_type": "llama",
  "hidden_size": 512,
  "intermediate_size": 1024,
  "num_hidden_layers": 8,
  "num_attention_heads": 8,
  "num_key_value_heads": 4,
  "head_dim": 64,
  "vocab_size": 4096,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "max_position_embeddings": 256,
  "tie_word_embeddings": false,
  "hidden_act": "silu"
}"#;

#[test]
fn a_hugging_face_checkpoint_loads_without_a_copy_beside_the_model() {
    let dir = Scratch::new("load-memory");
    let tensors = checkpoint();
    let file_bytes: usize = tensors.iter().map(|(_, t)| t.data().bytes().len()).sum();
    let largest = tensors.iter().map(|(_, t)| t.len()).max().unwrap() * 4;
    std::fs::write(dir.path().join("config.json"), CONFIG).unwrap();
    rlx::weights::save_tensors(&dir.path().join("model.safetensors"), &tensors).unwrap();
    assert!(tensors.iter().all(|(_, t)| t.dtype() == DType::BF16));
    drop(tensors);
    let model_bytes = 2 * file_bytes;

    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let decoder = LlamaDecoder::from_hf_dir(&CpuBackend::default(), dir.path(), 16).unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    let kept = LIVE.load(Ordering::Relaxed) - before;
    let mb = |bytes: usize| bytes as f64 / 1e6;
    println!(
        "file {:.1} MB, model in f32 {:.1} MB, largest tensor in f32 {:.1} MB: \
         heap at its peak {:.1} MB over the start, {:.1} MB kept",
        mb(file_bytes),
        mb(model_bytes),
        mb(largest),
        mb(peak),
        mb(kept)
    );
    // The model's weights (packed or not, about their f32 size), one tensor being
    // converted, and the compiled graph's own structures (9 MB measured); a host copy of
    // every tensor of the file beside them would not fit (156 MB measured, before the
    // shards stayed mapped).
    let allowed = model_bytes + largest + file_bytes / 2;
    assert!(
        peak < allowed,
        "the load's heap peaked {:.1} MB over the start, {:.1} MB allowed",
        mb(peak),
        mb(allowed)
    );
    drop(decoder);
}

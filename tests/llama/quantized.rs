//! Quantized weights and caches on the tiny variants of `tiny_decoders.json`, on every
//! backend: float checkpoints quantized into GGUF block formats as they load
//! ([`LlamaDecoder::from_hf_dir_quantized`]) give the logits of the float model whose
//! weights are those blocks' values ([`rlx::gguf::quantize`] then [`rlx::gguf::dequantize`],
//! written as a second checkpoint); int8 key/value caches stay near float32 ones.

use rlx::backend::Backend;
use rlx::generate::Decoder;
use rlx::gguf::{GgmlType, dequantize, quantize};
use rlx::ir::ActivationPrecision;
use rlx::models::llama::{KvCacheFormat, LlamaDecoder, Quantization};
use rlx::tensor::HostTensor;
use rlx_testkit::llm::{Scratch, checkpoint_tensors, ids, reference, write_tensors};

use super::argmax;

/// Both sides multiply the same values in float32, in different orders (measured: about
/// 1e-6 on logits of at most a few units).
const BOUND: f64 = 1e-4;

/// Whether the checkpoint tensor `name` is one the decoder keeps in blocks.
fn kept_in_blocks(name: &str) -> bool {
    name.ends_with("proj.weight")
        || name.ends_with("embed_tokens.weight")
        || name == "lm_head.weight"
}

/// `tensor`'s values as `format` holds them.
fn through_blocks(format: GgmlType, tensor: &HostTensor) -> HostTensor {
    let values = tensor.as_slice::<f32>().unwrap();
    let mut blocks = Vec::new();
    quantize(format, values, &mut blocks).unwrap();
    let mut back = vec![0f32; values.len()];
    dequantize(format, &blocks, &mut back).unwrap();
    HostTensor::from_vec(back, tensor.shape().to_vec()).unwrap()
}

/// The last logits of each step: the prompt, then 6 greedy tokens one at a time.
fn steps(decoder: &LlamaDecoder, prompt: &[i64]) -> Vec<Vec<f32>> {
    let mut context = decoder.new_context().unwrap();
    let mut fed = prompt.to_vec();
    let mut rows = Vec::new();
    let mut pos = 0;
    for _ in 0..7 {
        let logits = decoder
            .step(&mut context, &fed[pos..], pos, fed.len() - pos - 1)
            .unwrap();
        let row = logits.as_slice::<f32>().unwrap().to_vec();
        pos = fed.len();
        fed.push(argmax(&row));
        rows.push(row);
    }
    rows
}

fn largest_difference(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0f64, f64::max)
}

fn quantized_at_load<B: Backend<Executable: 'static>>(label: &str, backend: &B) {
    let data = reference("tiny_decoders");
    let prompt = ids(&data["prompt"]);
    for name in ["llama", "qwen2", "qwen3", "gemma3"] {
        let case = &data["cases"][name];
        let tensors = checkpoint_tensors(case, name == "gemma3");
        let float_dir = Scratch::new(&format!("quantize-{name}-{label}"));
        write_tensors(case, &tensors, float_dir.path(), false);
        let float = steps(
            &LlamaDecoder::from_hf_dir(backend, float_dir.path(), 32).unwrap(),
            &prompt,
        );
        for format in [GgmlType::Q8_0, GgmlType::Q4_0] {
            let quantization = Quantization::from(ActivationPrecision::Exact).quantizing(format);
            let decoder =
                LlamaDecoder::from_hf_dir_quantized(backend, float_dir.path(), 32, quantization)
                    .unwrap();
            let kept = &decoder.config().model.block_formats;
            assert!(
                kept.len() > 7 && kept.iter().all(|(_, f)| *f == format),
                "{name} {format}: {kept:?}"
            );
            let got = steps(&decoder, &prompt);

            // The float model of the blocks' values.
            let blocks_dir = Scratch::new(&format!("quantize-{name}-{format}-{label}"));
            let as_blocks: Vec<(String, HostTensor)> = tensors
                .iter()
                .map(|(n, t)| {
                    let t = if kept_in_blocks(n) {
                        through_blocks(format, t)
                    } else {
                        t.clone()
                    };
                    (n.clone(), t)
                })
                .collect();
            write_tensors(case, &as_blocks, blocks_dir.path(), false);
            let expected = steps(
                &LlamaDecoder::from_hf_dir(backend, blocks_dir.path(), 32).unwrap(),
                &prompt,
            );
            let error = largest_difference(&got, &expected);
            let moved = largest_difference(&got, &float);
            println!(
                "{name} {format} {label}: within {error:.1e} of the blocks' float model, \
                 {moved:.1e} from the float checkpoint"
            );
            assert!(error < BOUND, "{name} {format} {label}: off by {error}");
            // The weights did change (and with them, here, the greedy tokens).
            assert!(
                moved > 10.0 * BOUND,
                "{name} {format} {label}: nothing quantized?"
            );
        }
    }
}

/// A batch decoder quantized as it loads gives each row the logits of the single-sequence
/// decoder quantized alike (int8 activations: both run the same kernels), with float32 or
/// int8 caches, rows at positions of their own: a prompt of four and one of two tokens
/// (padded), then one new token each at positions 4 and 2.
/// Each row's new tokens (padded to the step's length), the step's length, each row's
/// position and last token.
type BatchStep = ([&'static [i64]; 2], usize, [usize; 2], [usize; 2]);

fn batch_rows_match_single<B: Backend<Executable: 'static>>(
    label: &str,
    backend: &B,
    q: Quantization,
) {
    use rlx::generate::BatchDecoder;
    use rlx::models::llama::LlamaBatchDecoder;
    let data = reference("tiny_decoders");
    let case = &data["cases"]["qwen2"];
    let dir = Scratch::new(&format!("quantize-batch-{label}"));
    write_tensors(case, &checkpoint_tensors(case, false), dir.path(), false);
    let single = LlamaDecoder::from_hf_dir_quantized(backend, dir.path(), 16, q).unwrap();
    let batch = LlamaBatchDecoder::from_hf_dir_quantized(backend, dir.path(), 16, 2, q).unwrap();
    let vocab = single.vocab_size();
    let mut context = batch.new_context().unwrap();
    let mut alone = [single.new_context().unwrap(), single.new_context().unwrap()];
    let steps: [BatchStep; 2] = [
        ([&[5, 9, 14, 3], &[77, 2, 0, 0]], 4, [0, 0], [3, 1]),
        ([&[42], &[17]], 1, [4, 2], [0, 0]),
    ];
    for (step, (tokens, seq, pos, last)) in steps.into_iter().enumerate() {
        let logits = batch
            .step(&mut context, &tokens.concat(), seq, &pos, &last)
            .unwrap();
        let rows = logits.as_slice::<f32>().unwrap();
        for b in 0..2 {
            let new = &tokens[b][..=last[b]];
            let expected = single.step(&mut alone[b], new, pos[b], last[b]).unwrap();
            let error = largest_difference(
                &[rows[b * vocab..(b + 1) * vocab].to_vec()],
                &[expected.as_slice::<f32>().unwrap().to_vec()],
            );
            assert!(error < BOUND, "{label} step {step} row {b}: off by {error}");
        }
    }
}

#[test]
fn batch_rows_quantized_at_load_match_single_sequences() {
    let blocks = Quantization::from(ActivationPrecision::Int8).quantizing(GgmlType::Q4_1);
    for q in [blocks, blocks.with_kv_cache(KvCacheFormat::Int8)] {
        batch_rows_match_single("cpu", &rlx::cpu::CpuBackend::default(), q);
        #[cfg(feature = "mlx")]
        batch_rows_match_single("mlx", &rlx::mlx::MlxBackend::default(), q);
    }
}

/// Logits through int8 caches within this of those through float32 caches (the tiny
/// models' logits are at most about 3.5; measured: up to 4.8e-2, Llama's).
const INT8_CACHE_BOUND: f64 = 0.15;

/// Each variant decoding through int8 key/value caches (the prompt, then one token a step,
/// the greedy tokens of the float32 caches fed to both) stays within
/// [`INT8_CACHE_BOUND`] of the float32 caches; returns the logits per variant.
fn int8_caches<B: Backend<Executable: 'static>>(label: &str, backend: &B) -> Vec<Vec<Vec<f32>>> {
    let data = reference("tiny_decoders");
    let prompt = ids(&data["prompt"]);
    let mut all = Vec::new();
    for name in ["llama", "qwen2", "qwen3", "gemma3"] {
        let case = &data["cases"][name];
        let dir = Scratch::new(&format!("int8-cache-{name}-{label}"));
        write_tensors(
            case,
            &checkpoint_tensors(case, name == "gemma3"),
            dir.path(),
            false,
        );
        let float = LlamaDecoder::from_hf_dir(backend, dir.path(), 32).unwrap();
        let int8 =
            Quantization::from(ActivationPrecision::Exact).with_kv_cache(KvCacheFormat::Int8);
        let int8 = LlamaDecoder::from_hf_dir_quantized(backend, dir.path(), 32, int8).unwrap();
        let expected = steps(&float, &prompt);
        // The same tokens through both: the float32 caches' greedy choices.
        let mut fed = prompt.clone();
        fed.extend(expected.iter().take(6).map(|row| argmax(row)));
        let mut context = int8.new_context().unwrap();
        let mut got = Vec::new();
        let mut pos = 0;
        for end in std::iter::once(prompt.len()).chain(prompt.len() + 1..=fed.len()) {
            let logits = int8
                .step(&mut context, &fed[pos..end], pos, end - pos - 1)
                .unwrap();
            got.push(logits.as_slice::<f32>().unwrap().to_vec());
            pos = end;
        }
        let error = largest_difference(&got, &expected);
        println!("{name} {label}: int8 caches within {error:.1e} of float32 caches");
        assert!(error < INT8_CACHE_BOUND, "{name} {label}: off by {error}");
        assert!(error > 0.0, "{name} {label}: int8 caches change nothing?");
        all.push(got);
    }
    all
}

#[test]
fn int8_caches_stay_near_float_caches() {
    #[cfg_attr(not(feature = "mlx"), allow(unused_variables))]
    let cpu = int8_caches("cpu", &rlx::cpu::CpuBackend::default());
    #[cfg(feature = "mlx")]
    {
        // Both backends round the same rows to the same integers.
        let mlx = int8_caches("mlx", &rlx::mlx::MlxBackend::default());
        for (c, m) in cpu.iter().zip(&mlx) {
            let error = largest_difference(c, m);
            assert!(error < BOUND, "int8 caches: CPU and MLX differ by {error}");
        }
    }
}

#[test]
fn float_checkpoints_quantize_at_load_on_the_cpu() {
    quantized_at_load("cpu", &rlx::cpu::CpuBackend::default());
}

/// A value blocks cannot hold is an error naming the tensor, and a format with no
/// quantizer is refused before anything loads.
#[test]
fn values_blocks_cannot_hold_are_errors() {
    let data = reference("tiny_decoders");
    let case = &data["cases"]["llama"];
    let mut tensors = checkpoint_tensors(case, false);
    let (name, tensor) = tensors
        .iter_mut()
        .find(|(n, _)| n.ends_with("layers.1.mlp.up_proj.weight"))
        .unwrap();
    tensor.as_mut_slice::<f32>().unwrap()[40] = f32::NAN;
    let name = name.clone();
    let dir = Scratch::new("quantize-nan");
    write_tensors(case, &tensors, dir.path(), false);
    let cpu = rlx::cpu::CpuBackend::default();
    let q8 = Quantization::from(ActivationPrecision::Int8).quantizing(GgmlType::Q8_0);
    let message = LlamaDecoder::from_hf_dir_quantized(&cpu, dir.path(), 16, q8)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("blk.1.ffn_up.weight") && message.contains("NaN"),
        "{message} ({name})"
    );
    let q4k = Quantization::from(ActivationPrecision::Int8).quantizing(GgmlType::Q4K);
    let message = LlamaDecoder::from_hf_dir_quantized(&cpu, dir.path(), 16, q4k)
        .unwrap_err()
        .to_string();
    assert!(message.contains("Q4_K"), "{message}");
}

#[cfg(feature = "mlx")]
#[test]
fn float_checkpoints_quantize_at_load_on_mlx() {
    quantized_at_load("mlx", &rlx::mlx::MlxBackend::default());
}

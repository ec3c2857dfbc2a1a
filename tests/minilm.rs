//! all-MiniLM-L6-v2 against PyTorch: the pinned checkpoint (fetched on first use, see
//! `rlx::models::minilm::ModelFiles`), the reference token ids, and embeddings and hidden
//! states of 16 sentences, run one by one and as one padded batch.

use rlx::backend::Backend;
use rlx::cpu::CpuBackend;
use rlx::models::minilm::{ModelFiles, SentenceEmbedder};
use rlx_testkit::testing::data_dir;
use safetensors::SafeTensors;

struct Reference {
    sentences: Vec<String>,
    input_ids: Vec<i64>,
    lengths: Vec<usize>,
    seq: usize,
    hidden: Vec<f32>,
    embeddings: Vec<f32>,
}

fn reference() -> Reference {
    let text = std::fs::read_to_string(data_dir().join("minilm/public_sentences.json")).unwrap();
    let sentences: Vec<String> = serde_json::from_str(&text).unwrap();
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
    let f32s = |name: &str| -> Vec<f32> {
        st.tensor(name)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let seq = st.tensor("input_ids").unwrap().shape()[1];
    Reference {
        sentences,
        input_ids: i64s("input_ids"),
        lengths: i64s("lengths").iter().map(|&l| l as usize).collect(),
        seq,
        hidden: f32s("last_hidden_state"),
        embeddings: f32s("embeddings"),
    }
}

fn embedder<B: Backend<Executable: 'static>>(backend: &B) -> SentenceEmbedder {
    let files = ModelFiles::locate(None).unwrap_or_else(|e| panic!("{e}"));
    SentenceEmbedder::new(backend, &files).unwrap_or_else(|e| panic!("{e}"))
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Compares sentence `i`'s real-token rows of `hidden` (`[seq, 384]` rows of one batch
/// entry) and its embedding with the reference; returns the two max |Δ|.
fn compare(r: &Reference, i: usize, hidden: &[f32], embedding: &[f32]) -> (f32, f32) {
    let len = r.lengths[i];
    let expected = &r.hidden[i * r.seq * 384..(i * r.seq + len) * 384];
    let h = max_diff(&hidden[..len * 384], expected);
    let e = max_diff(embedding, &r.embeddings[i * 384..(i + 1) * 384]);
    (h, e)
}

#[test]
fn minilm_matches_pytorch_on_cpu() {
    matches_pytorch("cpu", &CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn minilm_matches_pytorch_on_mlx() {
    matches_pytorch("mlx", &rlx::mlx::MlxBackend::default());
}

fn matches_pytorch<B: Backend<Executable: 'static>>(label: &str, backend: &B) {
    let r = reference();
    let mut model = embedder(backend);

    // Token ids equal the reference's for every sentence.
    for (i, s) in r.sentences.iter().enumerate() {
        let ids = model.tokenizer().ids(s).unwrap();
        let expected = &r.input_ids[i * r.seq..i * r.seq + r.lengths[i]];
        let ids: Vec<i64> = ids.iter().map(|&t| i64::from(t)).collect();
        assert_eq!(ids, expected, "token ids of sentence {i}: {s:?}");
    }

    // One by one.
    let (mut worst_h, mut worst_e) = (0.0f32, 0.0f32);
    for (i, s) in r.sentences.iter().enumerate() {
        let batch = model.tokenizer().encode(&[s]).unwrap();
        let (hidden, emb) = model.run(&batch).unwrap();
        let (h, e) = compare(
            &r,
            i,
            hidden.as_slice::<f32>().unwrap(),
            emb.as_slice::<f32>().unwrap(),
        );
        worst_h = worst_h.max(h);
        worst_e = worst_e.max(e);
    }
    println!("{label} one by one: max |Δ| hidden {worst_h:.2e}, embeddings {worst_e:.2e}");
    assert!(worst_h <= 1e-4, "hidden states differ by {worst_h}");
    assert!(worst_e <= 1e-5, "embeddings differ by {worst_e}");

    // As one right-padded batch.
    let texts: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    let batch = model.tokenizer().encode(&texts).unwrap();
    assert_eq!(batch.lengths, r.lengths);
    let (hidden, emb) = model.run(&batch).unwrap();
    let seq = batch.input_ids.shape()[1];
    let (hidden, emb) = (
        hidden.as_slice::<f32>().unwrap(),
        emb.as_slice::<f32>().unwrap(),
    );
    let (mut worst_h, mut worst_e) = (0.0f32, 0.0f32);
    for i in 0..texts.len() {
        let (h, e) = compare(
            &r,
            i,
            &hidden[i * seq * 384..(i + 1) * seq * 384],
            &emb[i * 384..(i + 1) * 384],
        );
        worst_h = worst_h.max(h);
        worst_e = worst_e.max(e);
    }
    println!("{label} padded batch: max |Δ| hidden {worst_h:.2e}, embeddings {worst_e:.2e}");
    assert!(worst_h <= 1e-4, "hidden states differ by {worst_h}");
    assert!(worst_e <= 1e-5, "embeddings differ by {worst_e}");

    // `embed` gives the same vectors, in the input order, whatever the batching: sorted by
    // length into batches of 3 (each padded to a multiple of 8 tokens) and of the default
    // size, over a mix where the longest and shortest sentences alternate.
    let mut mixed: Vec<usize> = (0..texts.len()).collect();
    mixed.sort_by_key(|&i| (r.lengths[i], i));
    let mixed: Vec<usize> = (0..mixed.len())
        .map(|k| {
            if k % 2 == 0 {
                mixed[k / 2]
            } else {
                mixed[mixed.len() - 1 - k / 2]
            }
        })
        .collect();
    let mixed_texts: Vec<&str> = mixed.iter().map(|&i| texts[i]).collect();
    for batch_size in [3, 32] {
        model.set_batch_size(batch_size).unwrap();
        let vectors = model.embed(&mixed_texts).unwrap();
        assert_eq!(vectors.len(), mixed.len());
        for (vector, &i) in vectors.iter().zip(&mixed) {
            let d = max_diff(vector, &r.embeddings[i * 384..(i + 1) * 384]);
            assert!(
                d <= 1e-5,
                "embed, batches of {batch_size}: sentence {i} differs by {d}"
            );
        }
    }
    assert!(model.set_batch_size(0).is_err());
    assert!(model.embed(&[]).unwrap().is_empty());

    // Long inputs are cut at the max length, which can be changed.
    let long = "word ".repeat(600);
    assert_eq!(model.tokenizer().ids(&long).unwrap().len(), 256);
    model.set_max_length(64).unwrap();
    assert_eq!(model.tokenizer().encode(&[&long]).unwrap().lengths, [64]);
    assert!(model.set_max_length(513).is_err());
}

#[test]
fn damaged_model_folders_name_the_file_and_the_fix() {
    let dir = std::env::temp_dir().join(format!("rlx-minilm-broken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = ModelFiles::locate(Some(&dir)).unwrap_err().to_string();
    assert!(
        err.contains("config.json is missing") && err.contains("--model-dir"),
        "{err}"
    );

    let good = ModelFiles::locate(None).unwrap();
    for name in ["config.json", "tokenizer.json"] {
        std::fs::copy(good.dir().join(name), dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("model.safetensors"), b"not a checkpoint").unwrap();
    let err = ModelFiles::locate(Some(&dir)).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors is corrupt or not the pinned file"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

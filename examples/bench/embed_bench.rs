//! Sentences per second of `SentenceEmbedder::embed` on a realistic mix of lengths: the 16
//! public reference sentences repeated to 512, in batches of 32.
//!
//! ```text
//! cargo run --release --example embed_bench -- [--backend cpu|mlx] [--model-dir DIR]
//! ```
//!
//! Prints two lines, each the median of at least 5 passes over all 512 sentences:
//! `embed_mix backend=cpu mode=bucketed ...` for `embed` (sorted by length, batches padded
//! to a multiple of 8 tokens) and `mode=padded` for the same sentences in their given order,
//! each batch of 32 padded to its longest sentence (what a plain padded pipeline computes).
//! Compare with `scripts/embed_mix_ort.py`, which runs ONNX Runtime on the padded batches.

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rlx::models::minilm::{ModelFiles, SentenceEmbedder};

const SENTENCES: &str = include_str!("../../tests/data/minilm/public_sentences.json");
const TOTAL: usize = 512;
const BATCH: usize = 32;

fn main() -> Result<(), Box<dyn Error>> {
    let mut backend = "cpu".to_string();
    let mut model_dir: Option<PathBuf> = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--backend" => backend = it.next().ok_or("--backend needs cpu or mlx")?,
            "--model-dir" => {
                model_dir = Some(it.next().ok_or("--model-dir needs a folder")?.into())
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let public: Vec<String> = serde_json::from_str(SENTENCES)?;
    let mix: Vec<&str> = public
        .iter()
        .map(String::as_str)
        .cycle()
        .take(TOTAL)
        .collect();
    let files = ModelFiles::locate(model_dir.as_deref())?;
    let mut model = SentenceEmbedder::on_backend(&backend, &files)?;
    model.set_batch_size(BATCH)?;

    let lengths: Vec<usize> = mix
        .iter()
        .map(|s| model.tokenizer().ids(s).map(|ids| ids.len()))
        .collect::<Result<_, _>>()?;
    let tokens: usize = lengths.iter().sum();
    let padded_tokens: usize = lengths
        .chunks(BATCH)
        .map(|batch| batch.iter().max().unwrap_or(&0) * batch.len())
        .sum();
    eprintln!(
        "# {TOTAL} sentences, {tokens} tokens, {padded_tokens} when padded per batch of {BATCH}"
    );

    let time = |mode: &str, pass: &mut dyn FnMut() -> Result<(), Box<dyn Error>>| {
        pass()?;
        let mut times = Vec::new();
        let started = Instant::now();
        while times.len() < 5 || started.elapsed() < Duration::from_secs(3) {
            let t = Instant::now();
            pass()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        println!(
            "embed_mix backend={backend} mode={mode} sentences={TOTAL} batch={BATCH} ms={ms:.1} sent_per_s={:.1}",
            TOTAL as f64 * 1e3 / ms
        );
        Ok::<(), Box<dyn Error>>(())
    };
    time("padded", &mut || {
        for batch in mix.chunks(BATCH) {
            let inputs = model.tokenizer().encode(batch)?;
            model.run(&inputs)?;
        }
        Ok(())
    })?;
    time("bucketed", &mut || {
        model.embed(&mix)?;
        Ok(())
    })?;
    Ok(())
}

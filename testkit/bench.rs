//! What the benchmarks share: command-line flags (numbers and lists of them), medians, the greedy token of a row of
//! logits, and for the MiniLM benchmarks their `--shapes` argument and the dense batches
//! they time.

use rlx::models::minilm::Batch;
use rlx::tensor::{HostTensor, TensorError};

/// The value after `name` on the command line `args`, if given.
///
/// ```
/// let args = ["bench", "--reps", "3"].map(String::from);
/// assert_eq!(rlx_testkit::bench::flag(&args, "--reps"), Some("3"));
/// assert_eq!(rlx_testkit::bench::flag(&args, "--model"), None);
/// ```
pub fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

/// The number after `name` on the command line `args`, `default` when it is not given.
///
/// ```
/// let args = ["bench", "--reps", "3"].map(String::from);
/// assert_eq!(rlx_testkit::bench::count(&args, "--reps", 5), Ok(3));
/// assert_eq!(rlx_testkit::bench::count(&args, "--new", 32), Ok(32));
/// ```
pub fn count(args: &[String], name: &str, default: usize) -> Result<usize, String> {
    match flag(args, name) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|e| format!("{name} {v:?}: {e}")),
    }
}

/// The positive numbers listed after `name` (`128,512`), `default` when it is not given.
///
/// ```
/// let args = ["bench", "--steps", "128,2048"].map(String::from);
/// assert_eq!(rlx_testkit::bench::counts(&args, "--steps", &[64]), Ok(vec![128, 2048]));
/// assert_eq!(rlx_testkit::bench::counts(&args, "--tokens", &[1, 16]), Ok(vec![1, 16]));
/// let zero = ["bench", "--steps", "0"].map(String::from);
/// assert!(rlx_testkit::bench::counts(&zero, "--steps", &[64]).is_err());
/// ```
pub fn counts(args: &[String], name: &str, default: &[usize]) -> Result<Vec<usize>, String> {
    let Some(list) = flag(args, name) else {
        return Ok(default.to_vec());
    };
    list.split(',')
        .map(|c| match c.parse::<usize>() {
            Ok(0) => Err(format!("{name}: {c:?} is not positive")),
            Ok(n) => Ok(n),
            Err(e) => Err(format!("{name} {c:?}: {e}")),
        })
        .collect()
}

/// The median of `samples` (the upper one of an even count).
///
/// ```
/// assert_eq!(rlx_testkit::bench::median(vec![3.0, 1.0, 2.0]), 2.0);
/// ```
///
/// # Panics
/// When `samples` is empty.
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The token of the largest f32 logit (of equal ones, the last), or an error for logits
/// that are not f32 or empty.
///
/// ```
/// let logits = rlx::tensor::HostTensor::from_vec(vec![0.5f32, 2.0, -1.0], [1, 3]).unwrap();
/// assert_eq!(rlx_testkit::bench::argmax(&logits).unwrap(), 1);
/// ```
pub fn argmax(logits: &HostTensor) -> Result<i64, Box<dyn std::error::Error>> {
    let row = logits.as_slice::<f32>()?;
    crate::llm::argmax(row).ok_or_else(|| "empty logits".into())
}

/// Parses `8x128,1x16` into `(batch, seq)` pairs.
///
/// ```
/// assert_eq!(rlx_testkit::bench::parse_shapes("8x128,1x16").unwrap(), [(8, 128), (1, 16)]);
/// assert!(rlx_testkit::bench::parse_shapes("8by128").is_err());
/// ```
pub fn parse_shapes(list: &str) -> Result<Vec<(usize, usize)>, String> {
    list.split(',')
        .map(|s| {
            let (b, q) = s.split_once('x').ok_or("shapes look like 8x128")?;
            let number = |t: &str| t.parse().map_err(|e| format!("{t:?} in {s:?}: {e}"));
            Ok((number(b)?, number(q)?))
        })
        .collect()
}

/// Pseudo-random token ids for benchmarks: `batch × seq` ids in `1000..30000`, every
/// position attended, one segment. `state` carries on from batch to batch (xorshift64).
pub fn dense_batch(batch: usize, seq: usize, state: &mut u64) -> Result<Batch, TensorError> {
    let n = batch * seq;
    let ids: Vec<i64> = (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            1000 + (*state % 29000) as i64
        })
        .collect();
    let tensor = |values: Vec<i64>| HostTensor::from_vec(values, [batch, seq]);
    Ok(Batch {
        input_ids: tensor(ids)?,
        attention_mask: tensor(vec![1; n])?,
        token_type_ids: tensor(vec![0; n])?,
        lengths: vec![seq; batch],
    })
}

/// The first state of [`dense_batch`]'s generator in every benchmark.
pub const SEED: u64 = 0x2545_f491_4f6c_dd1d;

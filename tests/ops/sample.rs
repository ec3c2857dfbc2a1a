//! Token sampling: each filter's draws against a naive float64 implementation on chosen
//! rows, and thousands of draws per filter against the distribution it should leave (a
//! chi-square bound), on every backend, kept whole and decomposed.

use rlx::backend::{Backend, Executable};
use rlx::ir::{DType, Graph, Op, SampleToken};
use rlx::tensor::HostTensor;

use crate::harness::{check, declared, graph_of};
use crate::reference::{Nd, Rng, random, to_tensor};

/// One row's settings.
#[derive(Clone, Copy, Debug)]
struct Settings {
    uniform: f64,
    temperature: f64,
    top_k: i64,
    top_p: f64,
    min_p: f64,
}

/// The distribution a row's settings leave: `(token, probability)` of each kept token, or
/// the single most likely token when greedy. Written the obvious way: a full sort.
fn kept(logits: &[f64], s: Settings) -> Vec<(usize, f64)> {
    let v = logits.len();
    let mut order: Vec<usize> = (0..v).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if s.temperature <= 0.0 {
        return vec![(order[0], 1.0)];
    }
    let max = logits[order[0]];
    let w: Vec<f64> = logits
        .iter()
        .map(|l| ((l - max) / s.temperature).exp())
        .collect();
    let k = if s.top_k > 0 && s.top_k as usize <= v {
        s.top_k as usize
    } else {
        v
    };
    let mass: f64 = order[..k].iter().map(|&i| w[i]).sum();
    let mut keep = 0;
    let mut before = 0.0;
    for &i in &order[..k] {
        if keep > 0 && before >= s.top_p * mass {
            break;
        }
        if keep > 0 && w[i] < s.min_p {
            break;
        }
        keep += 1;
        before += w[i];
    }
    let mut set: Vec<usize> = order[..keep].to_vec();
    set.sort();
    let total: f64 = set.iter().map(|&i| w[i]).sum();
    set.iter().map(|&i| (i, w[i] / total)).collect()
}

/// The draw: kept tokens in index order splitting `[0, 1)`.
fn draw(logits: &[f64], s: Settings) -> i64 {
    let set = kept(logits, s);
    let mut running = 0.0;
    for &(i, p) in &set {
        running += p;
        if running > s.uniform {
            return i as i64;
        }
    }
    // Past the last share: the most likely token, the first of equal maxima.
    let mut best = 0;
    for (i, l) in logits.iter().enumerate() {
        if *l > logits[best] {
            best = i;
        }
    }
    best as i64
}

/// A graph `token = sample_token(logits, settings…)` over `rows` rows of `vocab`, the
/// rows a runtime dim.
fn sampling_graph(dtype: DType, rows: usize, vocab: usize) -> Graph {
    let row = declared(&[rows], &[(0, "rows")]);
    let inputs = [
        ("logits", dtype, declared(&[rows, vocab], &[(0, "rows")])),
        ("uniform", dtype, row.clone()),
        ("temperature", dtype, row.clone()),
        ("top_k", DType::I64, row.clone()),
        ("top_p", dtype, row.clone()),
        ("min_p", dtype, row),
    ];
    graph_of(&inputs, |b, i| {
        b.op(Op::SampleToken(SampleToken), i).unwrap()
    })
}

fn settings_tensors(dtype: DType, settings: &[Settings]) -> [HostTensor; 5] {
    let n = settings.len();
    let float = |f: &dyn Fn(&Settings) -> f64| {
        let values: Vec<f64> = settings.iter().map(f).collect();
        to_tensor(&Nd::new(&[n], values), dtype)
    };
    [
        float(&|s| s.uniform),
        float(&|s| s.temperature),
        HostTensor::from_vec(settings.iter().map(|s| s.top_k).collect(), [n]).unwrap(),
        float(&|s| s.top_p),
        float(&|s| s.min_p),
    ]
}

fn run_inputs<'a>(
    logits: &'a HostTensor,
    s: &'a [HostTensor; 5],
) -> Vec<(&'static str, &'a HostTensor)> {
    vec![
        ("logits", logits),
        ("uniform", &s[0]),
        ("temperature", &s[1]),
        ("top_k", &s[2]),
        ("top_p", &s[3]),
        ("min_p", &s[4]),
    ]
}

/// Every filter alone and together, at draws spread over `[0, 1)` and past it, on rows
/// with ties: the same token as the naive implementation, on every backend.
#[test]
fn sample_token_filters_match_a_naive_draw() {
    let (rows, vocab) = (40, 13);
    let mut rng = Rng(71);
    for dtype in [DType::F32, DType::F64] {
        let logits = random(&mut rng, dtype, &[rows, vocab], -3.0, 3.0);
        let mut values = logits.to_f64_vec();
        // Ties, which rank by index.
        values[5] = values[2];
        values[vocab + 7] = values[vocab + 1];
        let logits = to_tensor(&Nd::new(&[rows, vocab], values), dtype);
        let values = logits.to_f64_vec();
        let kinds = [
            (0.0, 0, 1.0, 0.0),
            (-1.0, 3, 0.5, 0.2),
            (1.0, 0, 1.0, 0.0),
            (0.7, 3, 1.0, 0.0),
            (1.3, 0, 0.6, 0.0),
            (1.0, 0, 1.0, 0.3),
            (0.9, 5, 0.8, 0.1),
            (2.0, 20, 0.0, 0.0),
        ];
        let mut settings = Vec::new();
        for r in 0..rows {
            let (temperature, top_k, top_p, min_p) = kinds[r % kinds.len()];
            let row = &values[r * vocab..(r + 1) * vocab];
            // A draw well inside one token's share: the backends round near boundaries.
            let mut uniform = [0.0, 0.31, 0.77, 0.999, 1.5, -0.2][r % 6];
            let s = |uniform| Settings {
                uniform,
                temperature,
                top_k,
                top_p,
                min_p,
            };
            while (0.0..1.0).contains(&uniform) && near_boundary(row, s(uniform)) {
                uniform = (uniform + 0.013) % 1.0;
            }
            settings.push(s(uniform));
        }
        let expected: Vec<i64> = settings
            .iter()
            .enumerate()
            .map(|(r, s)| draw(&values[r * vocab..(r + 1) * vocab], *s))
            .collect();
        let expected = HostTensor::from_vec(expected, [rows]).unwrap();
        let s = settings_tensors(dtype, &settings);
        let graph = sampling_graph(dtype, rows, vocab);
        check(&graph, &run_inputs(&logits, &s), &[], &[expected], 1.0);
    }
}

/// Whether `uniform` lies within 1e-4 of a boundary between the kept tokens' shares.
fn near_boundary(logits: &[f64], s: Settings) -> bool {
    let mut running = 0.0;
    kept(logits, s).iter().any(|(_, p)| {
        running += p;
        (running - s.uniform).abs() < 1e-4
    })
}

/// Pearson's statistic of `counts` against `probabilities` over `n` draws, and the number
/// of draws outside the support.
fn chi_square(counts: &[u64], probabilities: &[f64], n: u64) -> (f64, u64) {
    let mut stray = 0;
    let mut statistic = 0.0;
    for (c, p) in counts.iter().zip(probabilities) {
        if *p == 0.0 {
            stray += c;
        } else {
            let e = p * n as f64;
            statistic += (*c as f64 - e).powi(2) / e;
        }
    }
    (statistic, stray)
}

/// The chi-square quantile at 0.9999 for `df` degrees of freedom (Wilson–Hilferty), so a
/// correct sampler fails one seed in ten thousand.
fn chi_square_bound(df: usize) -> f64 {
    let df = df.max(1) as f64;
    let z = 3.719; // the standard normal's 0.9999 quantile
    let a = 2.0 / (9.0 * df);
    df * (1.0 - a + z * a.sqrt()).powi(3)
}

fn chi_square_on<B: Backend>(label: &str, backend: &B) {
    let vocab = 12;
    let draws = 6000;
    let logits_row: Vec<f64> = (0..vocab)
        .map(|i| ((i * 7 % 12) as f64 - 4.0) * 0.35)
        .collect();
    let filters = [
        ("temperature", 1.0, 0, 1.0, 0.0),
        ("hot", 2.5, 0, 1.0, 0.0),
        ("top_k", 1.0, 4, 1.0, 0.0),
        ("top_p", 0.8, 0, 0.7, 0.0),
        ("min_p", 1.0, 0, 1.0, 0.25),
        ("all", 1.2, 6, 0.9, 0.1),
    ];
    let graph = sampling_graph(DType::F32, draws, vocab);
    let exe = backend.compile(&graph).unwrap();
    let mut rng = Rng(0x5eed);
    for (name, temperature, top_k, top_p, min_p) in filters {
        let settings: Vec<Settings> = (0..draws)
            .map(|_| Settings {
                uniform: rng.uniform(0.0, 1.0) as f32 as f64,
                temperature,
                top_k,
                top_p,
                min_p,
            })
            .collect();
        let logits = to_tensor(
            &Nd::new(&[draws, vocab], logits_row.repeat(draws)),
            DType::F32,
        );
        let s = settings_tensors(DType::F32, &settings);
        let inputs = run_inputs(&logits, &s);
        let views: Vec<_> = inputs.iter().map(|(n, t)| (*n, t.view())).collect();
        let tokens = exe.run(&views, &[]).unwrap().remove(0);
        let mut counts = vec![0u64; vocab];
        for t in tokens.as_slice::<i64>().unwrap() {
            counts[*t as usize] += 1;
        }
        let mut probabilities = vec![0.0; vocab];
        let set = kept(&logits.to_f64_vec()[..vocab], settings[0]);
        for (i, p) in &set {
            probabilities[*i] = *p;
        }
        let (statistic, stray) = chi_square(&counts, &probabilities, draws as u64);
        let bound = chi_square_bound(set.len() - 1);
        assert_eq!(
            stray, 0,
            "{label} {name}: draws outside the kept set {counts:?}"
        );
        assert!(
            statistic < bound,
            "{label} {name}: chi-square {statistic:.1} >= {bound:.1} for {} kept; counts {counts:?}",
            set.len()
        );
    }
}

#[test]
fn sample_token_draws_follow_each_filters_distribution() {
    crate::on_every_backend!(label, backend => {
        chi_square_on(label, &backend);
    });
}

//! Speed of one mixture-of-experts feed-forward (router, `--per-token` of `--experts`
//! SwiGLU experts) routed as RLX runs it — each expert on the tokens sent to it, through
//! `gather_matmul` — beside the same layer run densely, every expert on every token with
//! the unchosen experts weighted 0 (what a mixture costs without a gathered product). The
//! default sizes are Qwen3-30B-A3B's expert layer at half its width (1,024 wide, 128
//! experts of 384, 8 per token), seeded weights:
//!
//! ```text
//! cargo run --release --example moe_bench -- [--backend cpu|mlx] [--tokens 1,16,256]
//!     [--experts 128] [--per-token 8] [--hidden 1024] [--width 384] [--reps 5]
//! moe_bench engine=rlx backend=cpu tokens=1 path=routed ms=.. tok_s=..
//! moe_bench engine=rlx backend=cpu tokens=1 path=dense ms=.. tok_s=..
//! ```
//!
//! Medians of `--reps` runs after one warm-up. Both paths read the same weights; their
//! outputs are compared once per size (`largest_difference=`).

use std::error::Error;
use std::time::Instant;

use rlx::backend::{Backend, Executable};
use rlx::nn::{Experts, Projection, combine_experts, route};
use rlx::tensor::HostTensor;
use rlx::typed::{Const, Dyn, Scope, Sizes, Tensor, build_model};
use rlx_testkit::bench::{count, counts, flag, median};
use rlx_testkit::rng::Rng;

rlx::dims!(Tokens);
rlx::config_dims!(Hidden, ExpertCount, PerToken, Width);

type One = Const<1>;
type Hiddens<'g> = Tensor<'g, (One, Tokens, Hidden)>;

/// The layer's weights.
#[derive(rlx::Params)]
struct Layer<'g> {
    router: Projection<'g, Hidden, ExpertCount>,
    gate: Experts<'g, ExpertCount, Hidden, Width>,
    up: Experts<'g, ExpertCount, Hidden, Width>,
    down: Experts<'g, ExpertCount, Width, Hidden>,
}

/// Each token through its chosen experts only.
fn routed<'g>(p: &Layer<'g>, x: Hiddens<'g>) -> Hiddens<'g> {
    let routes = route::<_, _, _, PerToken, _>(p.router.forward(x), true);
    let hidden = p.gate.forward(x, routes.experts).silu() * p.up.forward(x, routes.experts);
    combine_experts(p.down.forward_pairs(hidden, routes.experts), routes.weights)
}

/// Every expert on every token (one product over all experts' rows per projection), mixed
/// by the routing weights spread over all experts, 0 where an expert was not chosen.
fn dense<'g>(g: &'g Scope<'g>, p: &Layer<'g>, x: Hiddens<'g>) -> Hiddens<'g> {
    type All = (One, Tokens, ExpertCount);
    let probs = p.router.forward(x).softmax::<2>();
    let kth = probs.topk::<2, PerToken>().min::<2>();
    let kth = kth.reshape::<(One, Tokens, One)>().broadcast::<All>();
    let chosen = probs.ge(kth).select(probs, g.full::<All, f32>(0.0));
    let weights = chosen / chosen.sum_keepdim::<2>().broadcast::<All>();
    let rows = x.reshape::<(Tokens, Hidden)>();
    let all = |w: &Experts<'g, ExpertCount, Hidden, Width>| {
        let stacked: Tensor<'g, (Dyn, Hidden)> = w.weight.reshape();
        rows.matmul_t(stacked)
            .reshape::<(One, Tokens, ExpertCount, Width)>()
    };
    let hidden = all(&p.gate).silu() * all(&p.up);
    let down = p.down.weight.reshape::<(One, ExpertCount, Hidden, Width)>();
    let per_expert = hidden.swap_axes::<1, 2>().matmul_t(down);
    weights
        .reshape::<(One, Tokens, One, ExpertCount)>()
        .matmul(per_expert.swap_axes::<1, 2>())
        .reshape::<(One, Tokens, Hidden)>()
}

struct Options {
    tokens: Vec<usize>,
    sizes: Sizes,
    reps: usize,
}

/// Seeded weights `±1/√fan_in`.
fn weights(manifest: &rlx::params::Manifest) -> Vec<(String, HostTensor)> {
    let mut rng = Rng(7);
    manifest
        .params
        .iter()
        .map(|spec| {
            let shape = spec.static_shape().expect("static weights");
            let scale = 1.0 / (*shape.last().unwrap_or(&1) as f64).sqrt();
            let values: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|_| (rng.uniform(-1.0, 1.0) * scale) as f32)
                .collect();
            (
                spec.name.clone(),
                HostTensor::from_vec(values, shape).unwrap(),
            )
        })
        .collect()
}

fn bench<B: Backend>(label: &str, backend: &B, o: &Options) -> Result<(), Box<dyn Error>> {
    let mut paths = Vec::new();
    let mut values = None;
    for path in ["routed", "dense"] {
        let (graph, manifest) = build_model(&o.sizes, |g| {
            let p: Layer = g.params();
            let x: Hiddens = g.input("x");
            let y = if path == "routed" {
                routed(&p, x)
            } else {
                dense(g, &p, x)
            };
            g.output("y", y);
        })?;
        let exe = backend.compile(&graph)?;
        let values = values.get_or_insert_with(|| weights(&manifest));
        let named: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
            values.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        exe.set_weights(&named)?;
        paths.push((path, exe));
    }
    let hidden = o.sizes.get::<Hidden>().unwrap_or(0);
    let mut rng = Rng(11);
    for &tokens in &o.tokens {
        let x: Vec<f32> = (0..tokens * hidden)
            .map(|_| rng.uniform(-1.0, 1.0) as f32)
            .collect();
        let x = HostTensor::from_vec(x, [1, tokens, hidden])?;
        let mut outputs = Vec::new();
        for (path, exe) in &paths {
            let run = || exe.run(&[("x", x.view())], &[]);
            outputs.push(run()?.remove(0));
            let times: Vec<f64> = (0..o.reps)
                .map(|_| {
                    let start = Instant::now();
                    run().map(|_| start.elapsed().as_secs_f64())
                })
                .collect::<Result<_, _>>()?;
            let seconds = median(times);
            println!(
                "moe_bench engine=rlx backend={label} tokens={tokens} path={path} ms={:.3} tok_s={:.1}",
                seconds * 1e3,
                tokens as f64 / seconds
            );
        }
        let (a, b) = (outputs[0].to_f64_vec(), outputs[1].to_f64_vec());
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        println!(
            "moe_bench engine=rlx backend={label} tokens={tokens} largest_difference={worst:.2e}"
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let number = |name: &str, default: usize| count(&args, name, default);
    let tokens = counts(&args, "--tokens", &[1, 16, 256])?;
    let options = Options {
        tokens,
        sizes: Sizes::new()
            .with::<Hidden>(number("--hidden", 1024)?)
            .with::<ExpertCount>(number("--experts", 128)?)
            .with::<PerToken>(number("--per-token", 8)?)
            .with::<Width>(number("--width", 384)?),
        reps: number("--reps", 5)?.max(1),
    };
    match flag(&args, "--backend").unwrap_or("cpu") {
        "cpu" => bench("cpu", &rlx::cpu::CpuBackend::default(), &options),
        #[cfg(feature = "mlx")]
        "mlx" => bench("mlx", &rlx::mlx::MlxBackend::default(), &options),
        other => Err(format!("unknown backend {other:?}").into()),
    }
}

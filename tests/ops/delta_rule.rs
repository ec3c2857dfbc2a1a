//! The gated delta rule (`delta_rule`, its gradient `delta_rule_grad`) against a float64
//! loop written here in the textbook form, on every float dtype and shape class; its
//! gradients against finite differences; and Gated DeltaNet's recurrence
//! (`nn::gated_delta_net`) against transformers' (`scripts/gated_delta.py`).

use rlx::backend::{Backend, Executable};
use rlx::ir::{DType, Op};
use rlx::tensor::HostTensor;
use rlx::typed::{Const, Sizes, Tensor, build_with};

use crate::gradient::{Input, grad_check, op};
use crate::harness::{check, declared, graph_of};
use crate::reference::{FLOATS, Nd, Rng, random, to_tensor};

/// `S ← α (I − β k kᵀ) S + β k vᵀ` and `o = Sᵀ q` per line, in float64, with `α = exp(g)`:
/// the outputs `[.., T, V]` then the final state `[.., K, V]` per line.
fn rule_ref(x: &[&Nd], started: bool) -> Nd {
    let (q, k, v, g, beta) = (x[0], x[1], x[2], x[3], x[4]);
    let rank = q.shape.len();
    let (t_len, kw) = (q.shape[rank - 2], q.shape[rank - 1]);
    let vw = v.shape[rank - 1];
    let lines: usize = q.shape[..rank - 2].iter().product();
    let mut data = Vec::new();
    for l in 0..lines {
        let mut s: Vec<Vec<f64>> = (0..kw)
            .map(|i| {
                (0..vw)
                    .map(|j| {
                        if started {
                            x[5].data[(l * kw + i) * vw + j]
                        } else {
                            0.0
                        }
                    })
                    .collect()
            })
            .collect();
        for t in 0..t_len {
            let at = l * t_len + t;
            let key = &k.data[at * kw..][..kw];
            let (alpha, b) = (g.data[at].exp(), beta.data[at]);
            // (I − β k kᵀ) S, then decayed, then β k vᵀ added.
            let projected: Vec<Vec<f64>> = (0..kw)
                .map(|i| {
                    (0..vw)
                        .map(|j| {
                            let ks: f64 = (0..kw).map(|m| key[m] * s[m][j]).sum();
                            s[i][j] - b * key[i] * ks
                        })
                        .collect()
                })
                .collect();
            let value = &v.data[at * vw..][..vw];
            for ((row, projected), ki) in s.iter_mut().zip(&projected).zip(key) {
                for ((x, p), vj) in row.iter_mut().zip(projected).zip(value) {
                    *x = alpha * p + b * ki * vj;
                }
            }
            let query = &q.data[at * kw..][..kw];
            for j in 0..vw {
                data.push(s.iter().zip(query).map(|(row, qi)| row[j] * qi).sum());
            }
        }
        for row in &s {
            data.extend_from_slice(row);
        }
    }
    let mut shape = q.shape[..rank - 2].to_vec();
    shape.extend([t_len + kw, vw]);
    Nd::new(&shape, data)
}

/// Unit keys, log decays in `[-1, 0]` and steps in `[0, 1]` (as Gated DeltaNet makes them),
/// queries, values and starting states in `[-1, 1]`, rounded to `dtype`.
fn operands(
    rng: &mut Rng,
    dtype: DType,
    lead: &[usize],
    t: usize,
    k: usize,
    v: usize,
) -> Vec<HostTensor> {
    let with = |extra: &[usize]| [lead, extra].concat();
    let lines: usize = lead.iter().product();
    let mut keys = Vec::with_capacity(lines * t * k);
    for _ in 0..lines * t {
        let row: Vec<f64> = (0..k).map(|_| rng.uniform(-1.0, 1.0)).collect();
        let norm = row.iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-3);
        keys.extend(row.iter().map(|a| a / norm));
    }
    vec![
        random(rng, dtype, &with(&[t, k]), -1.0, 1.0),
        to_tensor(&Nd::new(&with(&[t, k]), keys), dtype),
        random(rng, dtype, &with(&[t, v]), -1.0, 1.0),
        random(rng, dtype, &with(&[t]), -1.0, 0.0),
        random(rng, dtype, &with(&[t]), 0.0, 1.0),
        random(rng, dtype, &with(&[k, v]), -1.0, 1.0),
    ]
}

/// Every float dtype on a small rule; in f32 the shapes each backend splits differently
/// (the CPU's 64-column blocks, MLX's 64-step chunks with a padded last one, several
/// chunks), one step (decoding), no steps, with a runtime number of steps; each from zeros
/// and from a given state.
#[test]
fn delta_rule_variants() {
    let mut rng = Rng(47);
    let mut cases: Vec<(DType, Vec<usize>, usize, usize, usize)> = FLOATS
        .iter()
        .map(|&dtype| (dtype, vec![2, 3], 5, 4, 6))
        .collect();
    cases.extend([
        (DType::F32, vec![1, 2], 70, 16, 70),
        (DType::F32, vec![1], 130, 8, 5),
        (DType::F32, vec![2], 1, 8, 8),
        (DType::F32, vec![1, 2], 0, 3, 4),
    ]);
    const NAMES: [&str; 6] = ["q", "k", "v", "g", "beta", "s0"];
    for (dtype, lead, t, k, v) in cases {
        for started in [false, true] {
            let x = operands(&mut rng, dtype, &lead, t, k, v);
            let used = if started { 6 } else { 5 };
            // The steps as a runtime dim (axis `rank - 2` of q, k, v; the last of g, beta).
            let rank = lead.len() + 2;
            let declared_inputs: Vec<(&str, DType, rlx::ir::Shape)> = x[..used]
                .iter()
                .zip(NAMES)
                .map(|(tensor, name)| {
                    let step_axis = match name {
                        "q" | "k" | "v" => vec![(rank - 2, "t")],
                        "g" | "beta" => vec![(rank - 2, "t")],
                        _ => vec![],
                    };
                    (name, dtype, declared(tensor.shape(), &step_axis))
                })
                .collect();
            let g = graph_of(&declared_inputs, |b, ids| b.op(Op::DeltaRule, ids).unwrap());
            let nds: Vec<Nd> = x.iter().map(Nd::of).collect();
            let refs: Vec<&Nd> = nds.iter().collect();
            let want = rule_ref(&refs, started);
            let values: Vec<(&str, &HostTensor)> =
                NAMES.iter().copied().zip(&x).take(used).collect();
            let scale = if t > 64 { 64.0 } else { 16.0 };
            check(&g, &values, &[("t", t)], &[to_tensor(&want, dtype)], scale);
        }
    }
}

/// Operands that do not fit together, integers and the wrong count are build errors.
#[test]
fn delta_rule_rejects_mismatched_operands() {
    use rlx::builder::GraphBuilder;
    let mut g = GraphBuilder::new();
    let q = g.input("q", DType::F32, [2, 5, 4]).unwrap();
    let v = g.input("v", DType::F32, [2, 5, 3]).unwrap();
    let gates = g.input("g", DType::F32, [2, 5]).unwrap();
    let s0 = g.input("s0", DType::F32, [2, 4, 3]).unwrap();
    let short = g.input("short", DType::F32, [2, 4, 4]).unwrap();
    let half = g.input("half", DType::F16, [2, 5, 4]).unwrap();
    let ints = g.input("ints", DType::I32, [2, 5, 4]).unwrap();
    let wrong_state = g.input("wrong_state", DType::F32, [2, 3, 4]).unwrap();
    let rule = |g: &mut GraphBuilder, x: &[rlx::ir::NodeId]| g.op(Op::DeltaRule, x);
    assert!(rule(&mut g, &[q, q, v, gates, gates]).is_ok());
    assert!(rule(&mut g, &[q, q, v, gates, gates, s0]).is_ok());
    assert!(rule(&mut g, &[q, short, v, gates, gates]).is_err());
    assert!(rule(&mut g, &[q, half, v, gates, gates]).is_err());
    assert!(rule(&mut g, &[ints, ints, ints, gates, gates]).is_err());
    assert!(rule(&mut g, &[q, q, v, v, gates]).is_err());
    assert!(rule(&mut g, &[q, q, v, gates, gates, wrong_state]).is_err());
    assert!(rule(&mut g, &[q, q, v, gates]).is_err());
    let out = rule(&mut g, &[q, q, v, gates, gates]).unwrap();
    assert_eq!(g.ty(out).unwrap().to_string(), "f32[2,9,3]");
}

/// Every operand's gradient, through the outputs and the final state, against central
/// differences; a case long enough that the CPU's backward pass recomputes its states in
/// several chunks, and one short enough that MLX steps instead of chunking.
#[test]
fn gradient_delta_rule() {
    for (seed, (lead, t, k, v, started)) in [
        (vec![2], 5, 3, 4, false),
        (vec![2], 5, 3, 4, true),
        (vec![1, 2], 11, 2, 3, true),
        // Few enough steps that MLX runs them one by one.
        (vec![2], 3, 3, 2, true),
    ]
    .into_iter()
    .enumerate()
    {
        let with = |extra: &[usize]| [lead.as_slice(), extra].concat();
        let mut inputs = vec![
            Input::float("q", &with(&[t, k])),
            Input::float("k", &with(&[t, k])).range(-0.6, 0.6),
            Input::float("v", &with(&[t, v])),
            Input::float("g", &with(&[t])).range(-1.0, 0.0),
            Input::float("beta", &with(&[t])).range(0.0, 1.0),
        ];
        if started {
            inputs.push(Input::float("s0", &with(&[k, v])));
        }
        let label = format!("delta_rule lead={lead:?} t={t} k={k} v={v} started={started}");
        grad_check(&label, 700 + seed as u64, &inputs, &|g, i| {
            op(g, Op::DeltaRule, i)
        });
    }
}

rlx::config_dims!(KeyHeads, Group, Heads, KeyWidth, ValueWidth);
rlx::dims!(Batch, Steps);

/// Transformers' layout `[B, T, heads, width]` as the rule's `[B, heads, T, width]`, each
/// key head repeated over its `Group` consecutive value heads.
fn value_heads<'g, W: rlx::typed::Dim>(
    x: Tensor<'g, (Batch, Steps, KeyHeads, W)>,
) -> Tensor<'g, (Batch, Heads, Steps, W)> {
    let x: Tensor<'g, (Batch, KeyHeads, Steps, W)> = x.permute::<0, 2, 1, 3>();
    x.reshape::<(Batch, KeyHeads, Const<1>, Steps, W)>()
        .broadcast::<(Batch, KeyHeads, Group, Steps, W)>()
        .reshape()
}

fn gated_delta_matches<B: Backend>(label: &str, backend: &B) {
    let data = rlx_testkit::llm::reference("gated_delta");
    for (name, case) in data["cases"].as_object().unwrap() {
        let size = |key: &str| case[key].as_u64().unwrap() as usize;
        let (batch, steps, key_heads, heads) = (
            size("batch"),
            size("steps"),
            size("key_heads"),
            size("value_heads"),
        );
        let (k, v) = (size("k"), size("v"));
        let started = case["started"].as_bool().unwrap();
        let sizes = Sizes::new()
            .with::<KeyHeads>(key_heads)
            .with::<Group>(heads / key_heads)
            .with::<Heads>(heads)
            .with::<KeyWidth>(k)
            .with::<ValueWidth>(v);
        let graph = build_with(&sizes, |g| {
            let q: Tensor<(Batch, Steps, KeyHeads, KeyWidth)> = g.input("q");
            let key: Tensor<(Batch, Steps, KeyHeads, KeyWidth)> = g.input("k");
            let value: Tensor<(Batch, Steps, Heads, ValueWidth)> = g.input("v");
            let a: Tensor<(Batch, Steps, Heads)> = g.input("a");
            let b: Tensor<(Batch, Steps, Heads)> = g.input("b");
            let a_log: Tensor<(Heads,)> = g.input("A_log");
            let dt_bias: Tensor<(Heads,)> = g.input("dt_bias");
            let start = started.then(|| g.input::<(Batch, Heads, KeyWidth, ValueWidth), f32>("s0"));
            let (out, state) = rlx::nn::gated_delta_net(
                value_heads(q),
                value_heads(key),
                value.permute::<0, 2, 1, 3>(),
                a.permute::<0, 2, 1>(),
                b.permute::<0, 2, 1>(),
                a_log,
                dt_bias,
                start,
            );
            g.output("out", out.permute::<0, 2, 1, 3>());
            g.output("state", state);
        })
        .unwrap();
        let scales = &data["scales"];
        let shapes: Vec<(&str, Vec<usize>)> = vec![
            ("q", vec![batch, steps, key_heads, k]),
            ("k", vec![batch, steps, key_heads, k]),
            ("v", vec![batch, steps, heads, v]),
            ("a", vec![batch, steps, heads]),
            ("b", vec![batch, steps, heads]),
            ("A_log", vec![heads]),
            ("dt_bias", vec![heads]),
            ("s0", vec![batch, heads, k, v]),
        ];
        let given: Vec<(&str, HostTensor)> = shapes
            .into_iter()
            .filter(|(input, _)| started || *input != "s0")
            .map(|(input, shape)| {
                let len = shape.iter().product();
                let factor = scales[input].as_f64().unwrap() as f32;
                let values: Vec<f32> =
                    rlx_testkit::llm::formula(&format!("{name}.{input}"), len, false)
                        .into_iter()
                        .map(|x| x * factor)
                        .collect();
                (input, HostTensor::from_vec(values, shape).unwrap())
            })
            .collect();
        let views: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
            given.iter().map(|(n, t)| (*n, t.view())).collect();
        let exe = backend.compile(&graph).unwrap();
        let outputs = exe.run(&views, &[]).unwrap();
        for (i, key) in ["out", "state"].into_iter().enumerate() {
            let expected: Vec<f64> = case[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            let worst = rlx_testkit::llm::largest_difference(
                outputs[i].as_slice::<f32>().unwrap(),
                &expected,
            );
            println!("gated_delta {name} {label}: largest {key} error {worst:.2e}");
            assert!(worst < 2e-6, "{name} {label}: {key} off by {worst}");
        }
    }
}

/// Transformers' chunked prompt (a padded chunk, grouped key heads, a starting state),
/// a short prompt and a decoding step, reproduced through `nn::gated_delta_net`.
#[test]
fn gated_delta_net_matches_transformers() {
    for (label, backend) in crate::harness::cpu_backends() {
        gated_delta_matches(label, &backend);
    }
    #[cfg(feature = "mlx")]
    for (label, backend) in crate::harness::mlx_backends() {
        gated_delta_matches(label, &backend);
    }
}

/// Steps `from..to` of `x` (`[1, heads, T, width]` row-major, `width` 1 for per-step
/// values) as a tensor of their own.
fn steps_of(x: &[f32], heads: usize, t: usize, width: usize, from: usize, to: usize) -> HostTensor {
    let mut values = Vec::new();
    for h in 0..heads {
        values.extend_from_slice(&x[(h * t + from) * width..(h * t + to) * width]);
    }
    let mut shape = vec![1, heads, to - from];
    if width > 1 {
        shape.push(width);
    }
    HostTensor::from_vec(values, shape).unwrap()
}

rlx::dims!(NewSteps);

/// Decoding through a context: the recurrent state lives in the context between runs
/// (read as the rule's start, written with its final state), so a prompt of 5 steps and
/// then one step per run give what one run over all 12 gives, on every backend.
fn decodes_through_state<B: Backend>(label: &str, backend: &B) {
    const H: usize = 2;
    type Heads = Const<2>;
    type Width = Const<8>;
    type Values = Const<4>;
    let graph = rlx::typed::build(|g| {
        let state: rlx::typed::State<(Const<1>, Heads, Width, Values)> = g.state("recurrent");
        let q: Tensor<(Const<1>, Heads, NewSteps, Width)> = g.input("q");
        let k: Tensor<(Const<1>, Heads, NewSteps, Width)> = g.input("k");
        let v: Tensor<(Const<1>, Heads, NewSteps, Values)> = g.input("v");
        let a: Tensor<(Const<1>, Heads, NewSteps)> = g.input("a");
        let b: Tensor<(Const<1>, Heads, NewSteps)> = g.input("b");
        let (a_log, dt_bias): (Tensor<(Heads,)>, Tensor<(Heads,)>) =
            (g.input("A_log"), g.input("dt_bias"));
        let (out, last) =
            rlx::nn::gated_delta_net(q, k, v, a, b, a_log, dt_bias, Some(state.read()));
        state.write(last);
        g.output("out", out);
    })
    .unwrap();
    let exe = backend.compile(&graph).unwrap();
    let t = 12;
    let formula = |name: &str, len: usize, scale: f32| -> Vec<f32> {
        rlx_testkit::llm::formula(&format!("decode.{name}"), len, false)
            .into_iter()
            .map(|x| x * scale)
            .collect()
    };
    let (q, k, v) = (
        formula("q", H * t * 8, 5.0),
        formula("k", H * t * 8, 5.0),
        formula("v", H * t * 4, 5.0),
    );
    let (a, b) = (formula("a", H * t, 10.0), formula("b", H * t, 10.0));
    let a_log = HostTensor::from_vec(formula("A_log", H, 5.0), [H]).unwrap();
    let dt_bias = HostTensor::from_vec(formula("dt_bias", H, 5.0), [H]).unwrap();
    let run = |context: &mut rlx::backend::Context, from: usize, to: usize| -> Vec<f32> {
        let given = [
            ("q", steps_of(&q, H, t, 8, from, to)),
            ("k", steps_of(&k, H, t, 8, from, to)),
            ("v", steps_of(&v, H, t, 4, from, to)),
            ("a", steps_of(&a, H, t, 1, from, to)),
            ("b", steps_of(&b, H, t, 1, from, to)),
            ("A_log", a_log.clone()),
            ("dt_bias", dt_bias.clone()),
        ];
        let views: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
            given.iter().map(|(n, x)| (*n, x.view())).collect();
        let out = exe.run_in(context, &views, &[]).unwrap();
        out[0].as_slice::<f32>().unwrap().to_vec()
    };
    let whole = run(&mut exe.new_context().unwrap(), 0, t);
    let mut context = exe.new_context().unwrap();
    let mut pieces: Vec<Vec<f32>> = vec![run(&mut context, 0, 5)];
    for step in 5..t {
        pieces.push(run(&mut context, step, step + 1));
    }
    // Reassemble [1, H, T, 4] from the pieces, each [1, H, len, 4].
    let mut stepped = vec![0.0f32; whole.len()];
    let mut from = 0;
    for piece in &pieces {
        let len = piece.len() / (H * 4);
        for h in 0..H {
            let dst = (h * t + from) * 4;
            stepped[dst..dst + len * 4].copy_from_slice(&piece[h * len * 4..(h + 1) * len * 4]);
        }
        from += len;
    }
    let worst = whole
        .iter()
        .zip(&stepped)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        worst < 1e-6,
        "{label}: stepping differs from one run by {worst}"
    );
}

#[test]
fn gated_delta_net_decodes_through_a_context_state() {
    for (label, backend) in crate::harness::cpu_backends() {
        decodes_through_state(label, &backend);
    }
    #[cfg(feature = "mlx")]
    for (label, backend) in crate::harness::mlx_backends() {
        decodes_through_state(label, &backend);
    }
}

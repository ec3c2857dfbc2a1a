//! Differential testing on random graphs (issue 17).
//!
//! [`generate`] makes a random well-typed graph whose every computed node is an output. Each
//! [`Config`] (the CPU with one and two threads, MLX in each mode) compiles and runs it, and
//! every node's value is checked *locally*: the op's own float64 reference
//! ([`Op::reference`]), with its attributes bound to the run's sizes, computes it from the
//! operand values that configuration itself produced, and the two must agree within a
//! tolerance derived from the op, the output dtype and the operands (each op's own,
//! [`Op::tolerance`]). The reference is written from the op's definition, apart from every
//! backend, so a kernel bug that holds in float64 too still shows. Checking node by node
//! keeps the bounds tight (no error propagates from one op to the next, and a comparison or a `floor` sees exactly
//! the operands the backend saw), and a mismatch comes already minimised: one op, its
//! operand values and the one-node graph that reproduces it.
//!
//! Each case's gradient (see [`gradient_case`]) is checked the same way, node by node.
//!
//! Configurations must also agree on whether a case runs at all: one refusing a graph
//! another runs, or any panic, is a failure. A refusal a backend documents (MLX on a GPU
//! refuses float64 graphs at compile time) leaves that configuration out of the case.

mod generate;

pub use generate::{Case, generate, tensor};

use crate::rng::Rng;
use rlx::ir::Reduce;

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

use rlx::backend::{Backend, CompileError, Executable};
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{DType, Graph, Judgement, NodeId, Op};
use rlx::prelude::GraphBuilder;
use rlx::tensor::HostTensor;

/// A backend configuration a case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// The CPU executor with this many worker threads.
    Cpu {
        /// Worker threads.
        threads: usize,
    },
    /// MLX in this mode on its default device.
    #[cfg(feature = "mlx")]
    Mlx(rlx::mlx::MlxMode),
}

impl Config {
    /// Every configuration this build has: the CPU with 1 and 2 threads, and with the `mlx`
    /// feature MLX eager, lazy and compiled.
    pub fn all() -> Vec<Config> {
        let cpu = [Config::Cpu { threads: 1 }, Config::Cpu { threads: 2 }];
        #[cfg(feature = "mlx")]
        {
            use rlx::mlx::MlxMode;
            let mlx = [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled].map(Config::Mlx);
            cpu.into_iter().chain(mlx).collect()
        }
        #[cfg(not(feature = "mlx"))]
        cpu.to_vec()
    }

    /// A short name for reports (`cpu-1`, `mlx-lazy`).
    pub fn label(&self) -> String {
        match self {
            Config::Cpu { threads } => format!("cpu-{threads}"),
            #[cfg(feature = "mlx")]
            Config::Mlx(mode) => format!("mlx-{}", format!("{mode:?}").to_lowercase()),
        }
    }

    fn compile(&self, graph: &Graph) -> Result<Box<dyn Executable>, CompileError> {
        match self {
            Config::Cpu { threads } => CpuBackend::new(CpuOptions {
                threads: *threads,
                ..CpuOptions::default()
            })
            .compile(graph)
            .map(|e| Box::new(e) as Box<dyn Executable>),
            #[cfg(feature = "mlx")]
            Config::Mlx(mode) => rlx::mlx::MlxBackend::new(*mode)
                .compile(graph)
                .map(|e| Box::new(e) as Box<dyn Executable>),
        }
    }
}

/// A node whose value fell outside its tolerance, minimised to that one op.
#[derive(Clone, Debug)]
pub struct Mismatch {
    /// The case's seed.
    pub seed: u64,
    /// The configuration that computed it.
    pub config: String,
    /// What differed, where, and the one-node reproduction (the op, its operands' types
    /// and values).
    pub detail: String,
}

/// What a run of many cases found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Cases generated.
    pub cases: usize,
    /// Node values checked against float64.
    pub checked: usize,
    /// Node values not judged numerically: their operands hold infinities or NaNs, or their
    /// sizes approach the dtype's range, so no bound applies (their NaN-ness still must
    /// match).
    pub unjudged: usize,
    /// Cases whose gradient graph was checked too (see [`gradient_case`]).
    pub gradients: usize,
    /// Sink values compared, to the bit, between a CPU run with the CPU's fusions and one
    /// without (see `check_fused`); part of `checked`.
    pub fused: usize,
    /// Cases that every configuration refused with a typed error (a slice past a symbolic
    /// bound, say): consistent, and not compared.
    pub refused: usize,
    /// Values outside their tolerance.
    pub mismatches: Vec<Mismatch>,
    /// Panics, and configurations that disagree on whether a case runs.
    pub failures: Vec<String>,
}

/// Runs `case` on every configuration, checks each node of each run locally, and adds
/// what it found to `report`.
pub fn check(case: &Case, configs: &[Config], report: &mut Report) {
    let mut outcomes = Vec::new();
    for config in configs {
        let outcome = catch_unwind(AssertUnwindSafe(|| run(case, config)));
        match outcome {
            Ok(Err(NoValues::Refused)) => {}
            Ok(result) => outcomes.push((config, result)),
            Err(_) => report.failures.push(format!(
                "seed {}: {} panicked on\n{}",
                case.seed,
                config.label(),
                case.graph
            )),
        }
    }
    let ran = outcomes.iter().filter(|(_, r)| r.is_ok()).count();
    if ran > 0 && ran < outcomes.len() {
        let each: Vec<String> = outcomes
            .iter()
            .map(|(c, r)| match r {
                Ok(_) => format!("{}: ran", c.label()),
                Err(e) => format!("{}: {e}", c.label()),
            })
            .collect();
        report.failures.push(format!(
            "seed {}: configurations disagree ({})\n{}",
            case.seed,
            each.join("; "),
            case.graph
        ));
        return;
    }
    if ran == 0 {
        report.refused += 1;
        return;
    }
    for (config, result) in &outcomes {
        let Ok(values) = result else { continue };
        if matches!(config, Config::Cpu { .. }) {
            check_fused(case, config, values, report);
        }
        check_writes(case, config, values, report);
        for (output, got) in case.graph.outputs().iter().zip(values) {
            let checked = catch_unwind(AssertUnwindSafe(|| {
                check_node(case, values, output.node, got)
            }));
            match checked {
                Ok(Ok(Verdict::Agrees)) => report.checked += 1,
                Ok(Ok(Verdict::Unjudged)) => report.unjudged += 1,
                Ok(Ok(Verdict::Differs(detail))) => report.mismatches.push(Mismatch {
                    seed: case.seed,
                    config: config.label(),
                    detail,
                }),
                Ok(Err(e)) => report.failures.push(format!(
                    "seed {}: the float64 reference of {} failed: {e}",
                    case.seed, case.graph[output.node].op
                )),
                Err(_) => report.failures.push(format!(
                    "seed {}: checking {} panicked",
                    case.seed, case.graph[output.node].op
                )),
            }
        }
    }
}

/// The CPU's fusions, which `case` itself never makes (every computed node is returned, and
/// a returned value ends a chain): the same graph returning only its sinks must give each
/// sink the value it had with every node returned, to the bit in float32 and float64
/// (fusing changes no rounding there). Sinks downstream of a half-precision matmul are left
/// out: its fused epilogue rounds once where the ops round twice.
fn check_fused(case: &Case, config: &Config, values: &[HostTensor], report: &mut Report) {
    let users = case.graph.users();
    let outputs = case.graph.outputs();
    let sinks: Vec<usize> = (0..outputs.len())
        .filter(|&i| users[outputs[i].node.index()].is_empty())
        .collect();
    if sinks.len() == outputs.len() {
        return;
    }
    let graph = Graph::from_parts(
        case.graph.nodes().to_vec(),
        sinks.iter().map(|&i| outputs[i].clone()).collect(),
    )
    .expect("a graph with fewer outputs is valid");
    let sunk = Case {
        seed: case.seed,
        graph,
        inputs: case.inputs.clone(),
        params: case.params.clone(),
        states: case.states.clone(),
        dims: case.dims.clone(),
    };
    // Per node: whether a half-precision matmul feeds it.
    let mut after_half_matmul = vec![false; case.graph.len()];
    for (id, node) in case.graph.iter() {
        let half = matches!(node.ty.dtype, DType::F16 | DType::BF16);
        after_half_matmul[id.index()] = (half && matches!(node.op, Op::MatMul(_)))
            || node.inputs.iter().any(|i| after_half_matmul[i.index()]);
    }
    let label = format!("{}-fused", config.label());
    let got = match catch_unwind(AssertUnwindSafe(|| run(&sunk, config))) {
        Ok(Ok(got)) => got,
        Ok(Err(e)) => {
            report
                .failures
                .push(format!("seed {}: {label}: {e}", case.seed));
            return;
        }
        Err(_) => {
            report
                .failures
                .push(format!("seed {}: {label} panicked", case.seed));
            return;
        }
    };
    for (&i, got) in sinks.iter().zip(&got) {
        let want = &values[i];
        let exact = matches!(want.dtype(), DType::F32 | DType::F64)
            && !after_half_matmul[outputs[i].node.index()];
        if !exact {
            continue;
        }
        let (w, g) = (want.to_f64_vec(), got.to_f64_vec());
        let same = want.shape() == got.shape()
            && w.iter()
                .zip(&g)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        if same {
            report.checked += 1;
            report.fused += 1;
        } else {
            let at = w
                .iter()
                .zip(&g)
                .position(|(a, b)| a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan()));
            report.mismatches.push(Mismatch {
                seed: case.seed,
                config: label.clone(),
                detail: format!(
                    "{}: fused, element {at:?} is {:?} where unfused gave {:?}\n{}",
                    case.graph[outputs[i].node].op,
                    at.map(|k| g[k]),
                    at.map(|k| w[k]),
                    sunk.graph
                ),
            });
        }
    }
}

/// Why a configuration gave no values.
enum NoValues {
    /// A refusal the backend documents for this graph (float64 on a GPU): the
    /// configuration sits this case out.
    Refused,
    /// Any other error, as text.
    Error(String),
}

impl std::fmt::Display for NoValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoValues::Refused => write!(f, "refused by design"),
            NoValues::Error(e) => write!(f, "{e}"),
        }
    }
}

/// Compiles and runs `case` on `config`: every output, or why not.
fn run(case: &Case, config: &Config) -> Result<Vec<HostTensor>, NoValues> {
    let exe = config.compile(&case.graph).map_err(|e| match e {
        CompileError::DeviceDType { .. } => NoValues::Refused,
        e => NoValues::Error(e.to_string()),
    })?;
    run_compiled(case, exe.as_ref()).map_err(NoValues::Error)
}

fn run_compiled(case: &Case, exe: &dyn Executable) -> Result<Vec<HostTensor>, String> {
    let weights: Vec<(&str, _)> = case
        .params
        .iter()
        .map(|(n, t)| (n.as_str(), t.view()))
        .collect();
    exe.set_weights(&weights).map_err(|e| e.to_string())?;
    let inputs: Vec<(&str, _)> = case
        .inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t.view()))
        .collect();
    let dims: Vec<(&str, usize)> = case.dims.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    if case.states.is_empty() {
        return exe.run(&inputs, &dims).map_err(|e| e.to_string());
    }
    // In a context holding the case's states; the states after the run follow the outputs.
    let mut context = exe.new_context().map_err(|e| e.to_string())?;
    for (name, value) in &case.states {
        context.set(name, value.view()).map_err(|e| e.to_string())?;
    }
    let mut values = exe
        .run_in(&mut context, &inputs, &dims)
        .map_err(|e| e.to_string())?;
    for (name, _) in &case.states {
        values.push(context.get(name).map_err(|e| e.to_string())?);
    }
    Ok(values)
}

/// Each state after the run (the values after the outputs) holds exactly what the graph
/// wrote to it, or its value from before when nothing was written.
fn check_writes(case: &Case, config: &Config, values: &[HostTensor], report: &mut Report) {
    let count = case.graph.outputs().len();
    for (k, (name, before)) in case.states.iter().enumerate() {
        let Some(after) = values.get(count + k) else {
            continue;
        };
        let want = match case.graph.writes().iter().find(|w| &w.name == name) {
            Some(write) => value_of(case, values, write.node),
            None => before.clone(),
        };
        let (w, g) = (want.to_f64_vec(), after.to_f64_vec());
        let same = want.shape() == after.shape()
            && w.iter()
                .zip(&g)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        if same {
            report.checked += 1;
        } else {
            report.mismatches.push(Mismatch {
                seed: case.seed,
                config: config.label(),
                detail: format!(
                    "state {name:?} holds {g:?} after the run, its write gave {w:?}\n{}",
                    case.graph
                ),
            });
        }
    }
}

enum Verdict {
    Agrees,
    Unjudged,
    Differs(String),
}

/// The value of `id` in the run that produced `values`: an input, a param, a constant, or
/// an output of the run.
fn value_of(case: &Case, values: &[HostTensor], id: NodeId) -> HostTensor {
    let node = &case.graph[id];
    let name = node.name.as_deref().unwrap_or_default();
    match &node.op {
        Op::Input => case
            .inputs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
            .clone(),
        Op::Param => case
            .params
            .iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
            .clone(),
        Op::State => case
            .states
            .iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
            .clone(),
        Op::Constant(data) => {
            let v: Vec<f64> = (0..data.len())
                .map(|i| data.get(i).unwrap().as_f64())
                .collect();
            let dims = data.ty().shape.static_dims().unwrap();
            tensor(data.ty().dtype, &dims, &v)
        }
        _ => {
            let at = case
                .graph
                .outputs()
                .iter()
                .position(|o| o.node == id)
                .expect("every computed node is an output");
            values[at].clone()
        }
    }
}

/// Checks node `id`'s value `got` against its op run in float64 on the same operands.
fn check_node(
    case: &Case,
    values: &[HostTensor],
    id: NodeId,
    got: &HostTensor,
) -> Result<Verdict, String> {
    let node = &case.graph[id];
    if node.op.is_leaf() {
        // A leaf returned as is (a gradient that is a constant, say): exactly its value.
        let want = value_of(case, values, id);
        let same = want.shape() == got.shape()
            && want
                .to_f64_vec()
                .iter()
                .zip(got.to_f64_vec())
                .all(|(w, g)| *w == g || (w.is_nan() && g.is_nan()));
        return Ok(if same {
            Verdict::Agrees
        } else {
            Verdict::Differs(format!("{} returned as {:?}", node.op, got.to_f64_vec()))
        });
    }
    let operands: Vec<HostTensor> = node
        .inputs
        .iter()
        .map(|&i| value_of(case, values, i))
        .collect();
    let op = node.op.bind_dims(got.shape());
    let reference = op.reference(&operands).map_err(|e| e.to_string())?;
    if reference.shape() != got.shape() {
        return Ok(Verdict::Differs(format!(
            "{op}: dims {:?}, float64 gives {:?}",
            got.shape(),
            reference.shape()
        )));
    }
    let bound = node.op.tolerance(&operands, got.dtype());
    let (want, have) = (reference.to_f64_vec(), got.to_f64_vec());
    let mut unjudged = false;
    for (k, (&w, &h)) in want.iter().zip(&have).enumerate() {
        match bound.accepts(w, h) {
            Judgement::Agrees => {}
            Judgement::Unjudged => unjudged = true,
            Judgement::Differs => {
                let repro: Vec<String> = operands
                    .iter()
                    .zip(&node.inputs)
                    .map(|(t, i)| {
                        format!(
                            "  {} {:?} = {:?}",
                            case.graph[*i].ty.dtype,
                            t.shape(),
                            t.to_f64_vec()
                        )
                    })
                    .collect();
                return Ok(Verdict::Differs(format!(
                    "{op} -> {}{:?}: element {k} is {h}, float64 gives {w} ({bound})\n\
                     operands:\n{}",
                    got.dtype(),
                    got.shape(),
                    repro.join("\n")
                )));
            }
        }
    }
    Ok(if unjudged {
        Verdict::Unjudged
    } else {
        Verdict::Agrees
    })
}

/// The gradient of `case`: a scalar loss (the sum of every float output, in f32) is
/// differentiated with respect to every float input and param (`autodiff::gradients`), and
/// every computed node of the resulting graph becomes an output, so the backward pass is
/// checked node by node like any graph. `None` when the case has no float output or input,
/// or its loss depends on an op without a derivative.
pub fn gradient_case(case: &Case) -> Option<Case> {
    use rlx::autodiff::{Wrt, gradients};
    let mut b = GraphBuilder::from_graph(case.graph.clone());
    let mut loss = None;
    for output in case.graph.outputs() {
        let ty = &case.graph[output.node].ty;
        if !ty.dtype.is_float() {
            continue;
        }
        let mut x = output.node;
        if ty.rank() > 0 {
            let op = Op::Reduce(Reduce {
                op: rlx::ir::ReduceOp::Sum,
                axes: (0..ty.rank()).collect(),
                keep_dims: false,
            });
            x = b.op(op, &[x]).ok()?;
        }
        if ty.dtype != DType::F32 {
            x = b.cast(x, DType::F32).ok()?;
        }
        loss = Some(match loss {
            None => x,
            Some(total) => b.add(total, x).ok()?,
        });
    }
    b.output("fuzz_loss", loss?).ok()?;
    let graph = b.finish().ok()?;
    let wrt: Vec<String> = graph
        .nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Input | Op::Param) && n.ty.dtype.is_float())
        .filter_map(|n| n.name.clone())
        .collect();
    if wrt.is_empty() {
        return None;
    }
    let grad = gradients(&graph, "fuzz_loss", &Wrt::Named(wrt)).ok()?;
    let outputs: Vec<NodeId> = grad.outputs().iter().map(|o| o.node).collect();
    let mut b = GraphBuilder::from_graph(grad.clone());
    for (id, node) in grad.iter() {
        let computed = !node.op.is_leaf();
        if computed && !outputs.contains(&id) {
            b.output(&format!("g{}", id.index()), id).ok()?;
        }
    }
    Some(Case {
        seed: case.seed,
        graph: b.finish().ok()?,
        inputs: case.inputs.clone(),
        params: case.params.clone(),
        states: case.states.clone(),
        dims: case.dims.clone(),
    })
}

/// Generates and checks the cases numbered `cases` of `seed`'s sequence (case `i`'s seed is
/// [`case_seed`]`(seed, i)`) with graphs of up to `steps` ops, calling `progress` after each.
/// Cases `0..n` in one run check what `0..k` and `k..n` check in two, so a long run can be
/// split over several time-limited calls. With `RLX_FUZZ_TRACE` set, each case's seed goes
/// to stderr before it runs (to name a case that crashes the process rather than fail).
pub fn run_cases(
    seed: u64,
    cases: Range<usize>,
    steps: usize,
    configs: &[Config],
    mut progress: impl FnMut(&Report),
) -> Report {
    let mut report = Report::default();
    let mut seeds = seeds_from(seed, cases.start);
    let trace = std::env::var_os("RLX_FUZZ_TRACE").is_some();
    for index in cases {
        let case_seed = seeds.next_u64();
        if trace {
            eprintln!("case {index} seed {case_seed}");
        }
        check_seed(case_seed, steps, configs, &mut report);
        progress(&report);
    }
    report
}

/// The seed of case `index` of `seed`'s sequence: the seed a report names for it.
pub fn case_seed(seed: u64, index: usize) -> u64 {
    seeds_from(seed, index).next_u64()
}

/// `seed`'s sequence of case seeds, positioned at case `first`.
fn seeds_from(seed: u64, first: usize) -> Rng {
    let mut seeds = Rng(seed);
    for _ in 0..first {
        seeds.next_u64();
    }
    seeds
}

/// Generates the case of `case_seed` (the seed a report names) and checks it and its
/// gradient graph, as [`run_cases`] does each case: how one reported case is run again.
pub fn check_seed(case_seed: u64, steps: usize, configs: &[Config], report: &mut Report) {
    let case = generate(case_seed, steps);
    check(&case, configs, report);
    if let Some(backward) = gradient_case(&case) {
        report.gradients += 1;
        check(&backward, configs, report);
    }
    report.cases += 1;
}

//! Checks a gradient graph against central finite differences in f64 (both evaluated by
//! the ops' float64 reference), the CPU configurations against the reference, and every
//! MLX mode against the CPU.

use rlx::autodiff::{Wrt, gradients};
use rlx::backend::{Backend, Executable};
use rlx::builder::GraphBuilder;
use rlx::cpu::{CpuBackend, CpuOptions};
use rlx::ir::{DType, Dim, Graph, NodeId, Op, ReduceOp, Shape};
use rlx::tensor::HostTensor;

use crate::reference::Rng;

/// How one input of a case is declared and filled.
pub struct Input {
    pub name: &'static str,
    /// Concrete dims at run time.
    pub dims: Vec<usize>,
    /// Axes declared as named runtime dims.
    pub symbols: Vec<(usize, &'static str)>,
    pub values: Values,
}

pub enum Values {
    /// f64, uniform in `[lo, hi)`; differentiated.
    Uniform(f64, f64),
    /// f64 given exactly; differentiated.
    Exact(Vec<f64>),
    /// i64 indices; not differentiated.
    Indices(Vec<i64>),
    /// f64 given exactly; not differentiated (the scales of a quantized weight).
    Fixed(Vec<f64>),
    /// u8 (packed weights); not differentiated.
    Bytes(Vec<u8>),
}

impl Input {
    pub fn float(name: &'static str, dims: &[usize]) -> Input {
        Input {
            name,
            dims: dims.to_vec(),
            symbols: Vec::new(),
            values: Values::Uniform(-1.0, 1.0),
        }
    }

    pub fn range(mut self, lo: f64, hi: f64) -> Input {
        self.values = Values::Uniform(lo, hi);
        self
    }

    /// Declares axis `axis` as the runtime dim `name`.
    pub fn symbolic(mut self, axis: usize, name: &'static str) -> Input {
        self.symbols.push((axis, name));
        self
    }

    pub fn exact(name: &'static str, dims: &[usize], values: Vec<f64>) -> Input {
        Input {
            name,
            dims: dims.to_vec(),
            symbols: Vec::new(),
            values: Values::Exact(values),
        }
    }

    pub fn indices(name: &'static str, dims: &[usize], values: Vec<i64>) -> Input {
        Input {
            name,
            dims: dims.to_vec(),
            symbols: Vec::new(),
            values: Values::Indices(values),
        }
    }

    pub fn fixed(name: &'static str, dims: &[usize], values: Vec<f64>) -> Input {
        Input {
            name,
            dims: dims.to_vec(),
            symbols: Vec::new(),
            values: Values::Fixed(values),
        }
    }

    pub fn bytes(name: &'static str, dims: &[usize], values: Vec<u8>) -> Input {
        Input {
            name,
            dims: dims.to_vec(),
            symbols: Vec::new(),
            values: Values::Bytes(values),
        }
    }

    /// Whether the case takes this input's gradient.
    fn differentiated(&self) -> bool {
        matches!(self.values, Values::Uniform(..) | Values::Exact(_))
    }

    fn shape(&self) -> Shape {
        Shape::new(self.dims.iter().enumerate().map(|(i, d)| {
            self.symbols
                .iter()
                .find(|(a, _)| *a == i)
                .map_or(Dim::Static(*d), |(_, s)| Dim::sym(s))
        }))
    }

    fn dtype(&self) -> DType {
        match self.values {
            Values::Indices(_) => DType::I64,
            Values::Bytes(_) => DType::U8,
            _ => DType::F64,
        }
    }
}

/// `loss = Σ y·r` for `y = build(inputs)` and a random `r` of `y`'s shape (an input, so
/// symbolic dims stay symbolic), and its gradient graph with respect to the float inputs.
fn graphs(
    inputs: &[Input],
    build: &dyn Fn(&mut GraphBuilder, &[NodeId]) -> NodeId,
) -> (Graph, Graph, Vec<&'static str>) {
    let mut b = GraphBuilder::new();
    let ids: Vec<NodeId> = inputs
        .iter()
        .map(|i| b.input(i.name, i.dtype(), i.shape()).unwrap())
        .collect();
    let y = build(&mut b, &ids);
    let ty = b.ty(y).unwrap().clone();
    assert_eq!(ty.dtype, DType::F64, "cases compute in f64");
    let r = b.input("r", DType::F64, ty.shape.clone()).unwrap();
    let weighted = b.mul(y, r).unwrap();
    let loss = if ty.rank() == 0 {
        weighted
    } else {
        let axes: Vec<usize> = (0..ty.rank()).collect();
        b.reduce(ReduceOp::Sum, weighted, &axes, false).unwrap()
    };
    b.output("loss", loss).unwrap();
    let forward = b.finish().unwrap();
    let wrt: Vec<&'static str> = inputs
        .iter()
        .filter(|i| i.differentiated())
        .map(|i| i.name)
        .collect();
    let names = wrt.iter().map(|s| s.to_string()).collect();
    let backward = gradients(&forward, "loss", &Wrt::Named(names))
        .unwrap_or_else(|e| panic!("gradients failed: {e}\n{forward}"));
    (forward, backward, wrt)
}

fn run(exe: &dyn Executable, given: &[(&str, HostTensor)]) -> Vec<HostTensor> {
    let views: Vec<(&str, rlx::tensor::TensorRef<'_>)> =
        given.iter().map(|(n, t)| (*n, t.view())).collect();
    exe.run(&views, &[])
        .unwrap_or_else(|e| panic!("run failed: {e}"))
}

/// Checks the gradient of `Σ build(inputs)·r` against central differences (the float64
/// reference), the CPU against the reference, then every MLX mode against the CPU.
#[track_caller]
pub fn grad_check(
    label: &str,
    seed: u64,
    inputs: &[Input],
    build: &dyn Fn(&mut GraphBuilder, &[NodeId]) -> NodeId,
) {
    let (forward, backward, wrt) = graphs(inputs, build);
    let mut rng = Rng(seed);
    let mut given: Vec<(&str, HostTensor)> = inputs
        .iter()
        .map(|i| {
            let n: usize = i.dims.iter().product();
            let t = match &i.values {
                Values::Uniform(lo, hi) => {
                    let v: Vec<f64> = (0..n).map(|_| rng.uniform(*lo, *hi)).collect();
                    HostTensor::from_vec(v, i.dims.clone())
                }
                Values::Exact(v) | Values::Fixed(v) => {
                    HostTensor::from_vec(v.clone(), i.dims.clone())
                }
                Values::Indices(v) => HostTensor::from_vec(v.clone(), i.dims.clone()),
                Values::Bytes(v) => HostTensor::from_vec(v.clone(), i.dims.clone()),
            };
            (i.name, t.unwrap())
        })
        .collect();
    // r's concrete shape: run the forward graph's y once through a probe of its shape.
    let y_dims = output_dims(&forward, &given);
    let n: usize = y_dims.iter().product();
    let r: Vec<f64> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    given.push(("r", HostTensor::from_vec(r, y_dims).unwrap()));

    // The rule itself: the gradient graph evaluated by the ops' float64 reference against
    // central differences of the forward graph's reference value.
    let reference = |graph: &Graph, given: &[(&str, HostTensor)]| {
        let named: Vec<(&str, &HostTensor)> = given.iter().map(|(n, t)| (*n, t)).collect();
        rlx::ir::evaluate_reference(graph, &named, &[], &[])
            .unwrap_or_else(|e| panic!("{label}: reference failed: {e}\n{graph}"))
    };
    let exact = reference(&backward, &given);
    let loss_at = |given: &[(&str, HostTensor)]| reference(&forward, given)[0].to_f64_vec()[0];
    for (k, name) in wrt.iter().enumerate() {
        let grad = exact[1 + k].to_f64_vec();
        let slot = given.iter().position(|(n, _)| n == name).unwrap();
        let base = given[slot].1.clone();
        let values = base.to_f64_vec();
        assert_eq!(grad.len(), values.len(), "{label}: grad/{name} size");
        for i in 0..values.len() {
            let h = 1e-6 * values[i].abs().max(1.0);
            let mut at = |delta: f64| {
                let mut v = values.clone();
                v[i] += delta;
                given[slot].1 = HostTensor::from_vec(v, base.shape().to_vec()).unwrap();
                loss_at(&given)
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            let tol = 1e-6 + 1e-6 * fd.abs();
            assert!(
                (grad[i] - fd).abs() <= tol,
                "{label}: grad/{name}[{i}] = {}, finite difference {fd}\n{backward}",
                grad[i]
            );
        }
        given[slot].1 = base;
    }

    // A composite's own rule agrees with the gradient of its decomposition.
    let expanded = rlx::passes::decompose(&forward, &|_| false).unwrap();
    if expanded.len() != forward.len() {
        let names = wrt.iter().map(|s| s.to_string()).collect();
        let through = gradients(&expanded, "loss", &Wrt::Named(names))
            .unwrap_or_else(|e| panic!("{label}: gradients of the decomposition: {e}"));
        let via = reference(&through, &given);
        for name in &wrt {
            let at = |g: &Graph| {
                g.outputs()
                    .iter()
                    .position(|o| o.name == format!("grad/{name}"))
            };
            let (a, b) = (&exact[at(&backward).unwrap()], &via[at(&through).unwrap()]);
            for (i, (r, d)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
                assert!(
                    (r - d).abs() <= 1e-9 * d.abs().max(1.0),
                    "{label}: grad/{name}[{i}] = {r} by the rule, {d} through the decomposition"
                );
            }
        }
    }

    // The CPU runs the gradient graph to the reference's values.
    let cpu = CpuBackend::default();
    let grad_exe = cpu
        .compile(&backward)
        .unwrap_or_else(|e| panic!("{label}: compile failed: {e}\n{backward}"));
    let analytic = run(&grad_exe, &given);
    for (k, (g, c)) in analytic.iter().zip(&exact).enumerate() {
        for (i, (a, b)) in g.to_f64_vec().iter().zip(c.to_f64_vec()).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                "{label}: CPU output {k}[{i}] = {a}, reference {b}\n{backward}"
            );
        }
    }

    // The other CPU configurations (unoptimized with NaN-poisoned memory; no buffer reuse)
    // give the same gradients.
    for options in [
        CpuOptions {
            optimize: false,
            poison: true,
            ..CpuOptions::default()
        },
        CpuOptions {
            reuse_memory: false,
            threads: 1,
            ..CpuOptions::default()
        },
    ] {
        let exe = CpuBackend::new(options.clone())
            .compile(&backward)
            .unwrap_or_else(|e| panic!("{label}: compile failed with {options:?}: {e}"));
        let got = run(&exe, &given);
        for (k, (g, c)) in got.iter().zip(&analytic).enumerate() {
            for (i, (a, b)) in g.to_f64_vec().iter().zip(c.to_f64_vec()).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                    "{label}: {options:?} output {k}[{i}] = {a}, default CPU {b}"
                );
            }
        }
    }

    #[cfg(feature = "mlx")]
    mlx_agrees(label, &backward, &given, &analytic);
}

/// The concrete dims of the forward graph's `y` (the operand of the loss's product).
fn output_dims(forward: &Graph, given: &[(&str, HostTensor)]) -> Vec<usize> {
    let r = forward.input("r").unwrap();
    let ty = &forward[r].ty;
    let mut bound = std::collections::HashMap::new();
    for (name, t) in given {
        if let Some(id) = forward.input(name) {
            for (axis, d) in forward[id].ty.shape.dims().iter().enumerate() {
                if let Dim::Sym(s) = d {
                    bound.insert(s.name().to_string(), t.shape()[axis]);
                }
            }
        }
    }
    ty.shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Static(n) => *n,
            other => {
                let env: Vec<(&str, usize)> = bound.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                eval(other, &env)
            }
        })
        .collect()
}

fn eval(d: &Dim, env: &[(&str, usize)]) -> usize {
    let mut lookup =
        |s: &rlx::ir::Symbol| env.iter().find(|(n, _)| *n == s.name()).map(|(_, v)| *v);
    d.eval(&mut lookup).unwrap()
}

#[cfg(feature = "mlx")]
fn mlx_agrees(label: &str, backward: &Graph, given: &[(&str, HostTensor)], cpu: &[HostTensor]) {
    use rlx::mlx::{Device, MlxBackend, MlxMode};
    rlx::mlx::set_kernel_fusion(false).unwrap();
    for mode in [MlxMode::Eager, MlxMode::Lazy, MlxMode::Compiled] {
        // The gradient graphs are float64, which MLX runs on its CPU only (a GPU refuses
        // it at compile time); the random graphs check gradients on a GPU in the narrower
        // float types.
        let exe = MlxBackend::new(mode)
            .with_device(Device::Cpu)
            .compile(backward)
            .unwrap_or_else(|e| panic!("{label}: MLX {mode:?} compile failed: {e}"));
        let got = run(&exe, given);
        for (k, (g, c)) in got.iter().zip(cpu).enumerate() {
            let scale = c.to_f64_vec().iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (i, (a, b)) in g.to_f64_vec().iter().zip(c.to_f64_vec()).enumerate() {
                // MLX computes transcendentals and norms of f64 data in f32.
                assert!(
                    (a - b).abs() <= 1e-4 * scale,
                    "{label}: MLX {mode:?} output {k}[{i}] = {a}, CPU {b}"
                );
            }
        }
    }
}

/// `op` applied to `inputs` (a case built by hand).
pub fn op(b: &mut GraphBuilder, op: Op, inputs: &[NodeId]) -> NodeId {
    b.op(op, inputs).unwrap()
}

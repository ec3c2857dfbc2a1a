//! The contract between graphs and the engines that run them.
//!
//! A [`Backend`] compiles a whole [`Graph`] once, failing up front if it lacks an op. The
//! [`Executable`] it returns binds named weights once and then runs many times, each run
//! with input tensors and the values of the graph's runtime dims.

mod context;
mod error;
mod profile;
pub(crate) mod shared;
pub(crate) mod signature;
mod value;

pub(crate) use context::StateStore;
pub use context::{Context, ContextError, StateSpec};
pub use error::{BindingFailure, CompileError, NodeSite, RunError, TensorRole};
pub use profile::{Profile, ProfileStep};
pub use shared::DEFAULT_PLAN_CACHE;
#[cfg(feature = "mlx")]
pub(crate) use value::DeviceValue;
pub use value::Value;
pub(crate) use value::run_on_host;

use crate::ir::{Graph, Op};
use crate::tensor::{HostTensor, TensorRef};

/// An engine that compiles graphs.
///
/// ```
/// use rlx::prelude::*;
/// use rlx::backend::{Backend, Executable};
/// use rlx::cpu::CpuBackend;
/// use rlx::tensor::HostTensor;
///
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("n")])?;
/// let y = b.unary(UnaryOp::Relu, x)?;
/// b.output("y", y)?;
/// let graph = b.finish()?;
///
/// let exe = CpuBackend::default().compile(&graph)?;
/// let x = HostTensor::from_vec(vec![-1.0f32, 2.0, -3.0], [3])?;
/// let out = exe.run(&[("x", x.view())], &[])?;   // `n` = 3 is read from `x`
/// assert_eq!(out[0].as_slice::<f32>()?, &[0.0, 2.0, 0.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Backend {
    /// What `compile` produces.
    type Executable: Executable;

    /// A short name for messages (`cpu`, `mlx`).
    fn name(&self) -> &'static str;

    /// True if the backend has a kernel for `op` (its kind and attributes).
    fn supports(&self, op: &Op) -> bool;

    /// Compiles the graph, or fails listing every unsupported op.
    fn compile(&self, graph: &Graph) -> Result<Self::Executable, CompileError>;
}

/// What every backend checks before compiling `graph`: each op has a kernel (all missing
/// ones listed once), and every param has a static shape.
pub(crate) fn check_compilable<B: Backend + ?Sized>(
    backend: &B,
    graph: &Graph,
) -> Result<(), CompileError> {
    let mut unsupported: Vec<String> = Vec::new();
    for node in graph.nodes() {
        let text = node.op.to_string();
        if !backend.supports(&node.op) && !unsupported.contains(&text) {
            unsupported.push(text);
        }
    }
    if !unsupported.is_empty() {
        return Err(CompileError::Unsupported {
            backend: backend.name(),
            ops: unsupported,
        });
    }
    for (_, node) in graph.params() {
        if !node.ty.shape.is_static() {
            return Err(CompileError::SymbolicParam {
                name: node.name.clone().unwrap_or_default(),
                shape: node.ty.shape.clone(),
            });
        }
    }
    for (_, node) in graph.states() {
        if !node.ty.shape.is_static() {
            return Err(CompileError::SymbolicState {
                name: node.name.clone().unwrap_or_default(),
                shape: node.ty.shape.clone(),
            });
        }
    }
    Ok(())
}

/// The error of running a graph with states outside a context (`None` without states).
pub(crate) fn needs_context(states: &[StateSpec]) -> Result<(), RunError> {
    if states.is_empty() {
        Ok(())
    } else {
        Err(RunError::NeedsContext {
            states: states.iter().map(|s| s.name.clone()).collect(),
        })
    }
}

/// Checks that every index of `which` names one of `count` outputs.
pub(crate) fn check_output_indices(which: &[usize], count: usize) -> Result<(), RunError> {
    match which.iter().find(|&&i| i >= count) {
        Some(&index) => Err(RunError::UnknownOutput { index, count }),
        None => Ok(()),
    }
}

/// Moves the outputs at `which` out of `all` (the indices checked first).
pub(crate) fn pick_outputs(
    all: &mut [HostTensor],
    which: &[usize],
) -> Result<Vec<HostTensor>, RunError> {
    check_output_indices(which, all.len())?;
    let mut picked: Vec<HostTensor> = Vec::with_capacity(which.len());
    for (k, &i) in which.iter().enumerate() {
        match which[..k].iter().position(|&j| j == i) {
            Some(earlier) => {
                let again = picked[earlier].clone();
                picked.push(again);
            }
            None => picked.push(std::mem::replace(
                &mut all[i],
                HostTensor::zeros(crate::ir::DType::F32, [0]),
            )),
        }
    }
    Ok(picked)
}

/// A compiled graph: weights bound once, then run many times, from any number of threads
/// at once.
///
/// Every method takes `&self`: runs share the weights and the per-binding plans, and each
/// call takes its own working memory (on the CPU, an arena from a pool that grows to the
/// number of runs in flight). Weights may be replaced while other threads run: a run sees
/// the weights bound when it started, all of them old or all new.
///
/// The trait is `Any`, so code holding a `dyn Executable` can reach its backend's own API
/// (see [`Compiled::executable_as`](crate::model::Compiled::executable_as)).
///
/// ```
/// use std::sync::Arc;
/// use rlx::backend::{Backend, Executable};
/// use rlx::cpu::CpuBackend;
/// use rlx::prelude::*;
/// use rlx::tensor::HostTensor;
///
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("n")])?;
/// let w = b.param("w", DType::F32, [1])?;
/// let y = b.binary(BinaryOp::Mul, x, w)?;
/// b.output("y", y)?;
/// let exe = Arc::new(CpuBackend::default().compile(&b.finish()?)?);
/// exe.set_weight("w", HostTensor::from_vec(vec![2.0f32], [1])?.view())?;
/// let workers: Vec<_> = (1..=4usize)
///     .map(|n| {
///         let exe = Arc::clone(&exe);
///         std::thread::spawn(move || {
///             let x = HostTensor::from_vec(vec![1.0f32; n], [n]).unwrap();
///             exe.run(&[("x", x.view())], &[]).unwrap()
///         })
///     })
///     .collect();
/// for (n, worker) in (1..=4usize).zip(workers) {
///     assert_eq!(worker.join().unwrap()[0].as_slice::<f32>()?, vec![2.0; n]);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Executable: std::any::Any + Send + Sync {
    /// Binds the params named in `weights`, all of them or none: each value's dtype and
    /// shape must match its declaration, and on any error nothing changes. Runs in flight
    /// finish with the weights they started with.
    fn set_weights(&self, weights: &[(&str, TensorRef<'_>)]) -> Result<(), RunError>;

    /// Binds the param `name`, as [`Executable::set_weights`] does.
    fn set_weight(&self, name: &str, value: TensorRef<'_>) -> Result<(), RunError> {
        self.set_weights(&[(name, value)])
    }

    /// A copy of the weight bound as `name`.
    fn weight(&self, name: &str) -> Result<HostTensor, RunError>;

    /// Runs the graph.
    ///
    /// `inputs` are matched to graph inputs by name. `dims` gives values of runtime dims by
    /// symbol name; dims that appear as a whole axis of some input are read from it and
    /// need not be given. Outputs come back in the graph's output order.
    fn run(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
    ) -> Result<Vec<HostTensor>, RunError> {
        let mut outputs = Vec::new();
        self.run_into(inputs, dims, &mut outputs)?;
        Ok(outputs)
    }

    /// Runs the graph and returns only the outputs at `which` (indices in the graph's
    /// output order), in that order. Backends that keep results off the host (MLX on a GPU)
    /// then copy only those.
    ///
    /// ```
    /// use rlx::backend::{Backend, Executable};
    /// use rlx::cpu::CpuBackend;
    /// use rlx::prelude::*;
    /// use rlx::tensor::HostTensor;
    ///
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [2])?;
    /// let y = b.unary(UnaryOp::Neg, x)?;
    /// b.output("x_again", x)?;
    /// b.output("y", y)?;
    /// let exe = CpuBackend::default().compile(&b.finish()?)?;
    /// let x = HostTensor::from_vec(vec![1.0f32, -2.0], [2])?;
    /// let only_y = exe.run_outputs(&[("x", x.view())], &[], &[1])?;
    /// assert_eq!(only_y[0].as_slice::<f32>()?, &[-1.0, 2.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn run_outputs(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        which: &[usize],
    ) -> Result<Vec<HostTensor>, RunError> {
        let mut all = self.run(inputs, dims)?;
        pick_outputs(&mut all, which)
    }

    /// How many per-binding plans the executable holds now. Each distinct binding of the
    /// runtime dims gets a plan on its first run; the cache keeps the most recently used
    /// ones, up to the backend's limit ([`CpuOptions::plan_cache`](crate::cpu::CpuOptions),
    /// `MlxBackend::with_plan_cache`; [`DEFAULT_PLAN_CACHE`] unless set).
    ///
    /// ```
    /// use rlx::backend::{Backend, Executable};
    /// use rlx::cpu::{CpuBackend, CpuOptions};
    /// use rlx::prelude::*;
    /// use rlx::tensor::HostTensor;
    ///
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [Dim::sym("n")])?;
    /// let y = b.unary(UnaryOp::Exp, x)?;
    /// b.output("y", y)?;
    /// let options = CpuOptions { plan_cache: 2, ..CpuOptions::default() };
    /// let exe = CpuBackend::new(options).compile(&b.finish()?)?;
    /// for n in 1..=5 {
    ///     exe.run(&[("x", HostTensor::zeros(DType::F32, [n]).view())], &[])?;
    /// }
    /// assert_eq!(exe.cached_plans(), 2); // the plans of n = 4 and n = 5
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn cached_plans(&self) -> usize;

    /// Like [`Executable::run`], writing into `outputs` and reusing their storage when the
    /// dtypes and sizes already match, so repeated runs need no allocation.
    fn run_into(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError>;

    /// A new context for runs of this executable (see [`Context`]): each of the graph's
    /// states, zero.
    fn new_context(&self) -> Result<Context, RunError>;

    /// Runs the graph in `context`, as [`Executable::run`] does: the graph's state nodes
    /// read the context's states, and its writes replace them when the run completes. A
    /// graph with states runs only so. After a failed run the states it writes hold
    /// unspecified values (reset or load them).
    fn run_in(
        &self,
        context: &mut Context,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
    ) -> Result<Vec<HostTensor>, RunError> {
        let mut outputs = Vec::new();
        self.run_in_into(context, inputs, dims, &mut outputs)?;
        Ok(outputs)
    }

    /// [`Executable::run_in`] writing into `outputs` as [`Executable::run_into`] does, so
    /// that a loop of runs (a decode loop) needs no allocation.
    fn run_in_into(
        &self,
        context: &mut Context,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError>;

    /// Runs the graph on [`Value`]s, as [`Executable::run`] does, and returns its outputs
    /// as values where the backend keeps them: on MLX, device arrays that never cross host
    /// memory; on the CPU, host tensors, read in place when passed back. Feeding one run's
    /// outputs to the next (a pipeline, a training loop's gradients) costs no copy.
    fn run_values(
        &self,
        inputs: &[(&str, &Value)],
        dims: &[(&str, usize)],
    ) -> Result<Vec<Value>, RunError> {
        run_on_host(inputs, |views| self.run(views, dims))
    }

    /// [`Executable::run_values`] in `context`, as [`Executable::run_in`] runs.
    ///
    /// ```
    /// use rlx::prelude::*;
    /// use rlx::backend::{Backend, Executable, Value};
    /// use rlx::cpu::CpuBackend;
    /// use rlx::tensor::HostTensor;
    ///
    /// let mut b = GraphBuilder::new();
    /// let count = b.state("count", DType::F32, Shape::scalar())?;
    /// let x = b.input("x", DType::F32, Shape::scalar())?;
    /// let next = b.add(count, x)?;
    /// b.write("count", next)?;
    /// b.output("next", next)?;
    /// let exe = CpuBackend::default().compile(&b.finish()?)?;
    /// let mut ctx = exe.new_context()?;
    /// let one = Value::from(HostTensor::scalar(1.0f32));
    /// exe.run_values_in(&mut ctx, &[("x", &one)], &[])?;
    /// let out = exe.run_values_in(&mut ctx, &[("x", &one)], &[])?;
    /// assert_eq!(out[0].to_host()?.as_slice::<f32>()?, &[2.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn run_values_in(
        &self,
        context: &mut Context,
        inputs: &[(&str, &Value)],
        dims: &[(&str, usize)],
    ) -> Result<Vec<Value>, RunError> {
        run_on_host(inputs, |views| self.run_in(context, views, dims))
    }

    /// Runs the graph `runs` times (at least once) as [`Executable::run`] does and reports
    /// where the time went. Backends that can time their steps (the CPU executor times each
    /// kernel) list them; others report each whole run as one `run` step. A graph with
    /// states runs in a new context, its states zero at first.
    fn profile(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        runs: usize,
    ) -> Result<Profile, RunError> {
        let runs = runs.max(1);
        let mut outputs = Vec::new();
        let mut context = self.new_context()?;
        let started = std::time::Instant::now();
        for _ in 0..runs {
            self.run_in_into(&mut context, inputs, dims, &mut outputs)?;
        }
        let total = started.elapsed();
        Ok(Profile {
            runs,
            total,
            steps: vec![ProfileStep {
                op: "run",
                node: None,
                time: total,
            }],
        })
    }
}

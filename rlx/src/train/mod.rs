//! Training: one compiled graph per step that runs the forward pass, the backward pass
//! ([`crate::autodiff`]) and the optimizer's update, and a [`Trainer`] that feeds it.
//!
//! [`training_graph`] extends a model graph whose scalar output is the loss: it adds the
//! gradients of every float param, optional clipping by global norm, and the optimizer's
//! update, whose results are outputs `update/<name>` for every weight and every piece of
//! optimizer state. Optimizer state is made of params named like the weights
//! (`optimizer.<weight>.exp_avg`, PyTorch's suffixes), so it is bound, read and saved the
//! way weights are. The per-step scalars (the scheduled learning rate, Adam's bias
//! corrections) are inputs (f64 when a weight is f64, else f32), so the schedule costs no
//! recompilation.
//!
//! ```
//! use rlx::cpu::CpuBackend;
//! use rlx::prelude::*;
//! use rlx::tensor::HostTensor;
//! use rlx::train::{Optimizer, TrainConfig, Trainer};
//!
//! // Fit w in y = x·w to data made with w = 3.
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", DType::F32, [Dim::sym("batch")])?;
//! let y = b.input("y", DType::F32, [Dim::sym("batch")])?;
//! let w = b.param("w", DType::F32, Shape::scalar())?;
//! let pred = b.mul(x, w)?;
//! let err = b.binary(BinaryOp::Sub, pred, y)?;
//! let sq = b.mul(err, err)?;
//! let loss = b.reduce(ReduceOp::Mean, sq, &[0], false)?;
//! b.output("loss", loss)?;
//! let graph = b.finish()?;
//!
//! let config = TrainConfig::new(Optimizer::sgd(0.1));
//! let mut trainer = Trainer::new(&CpuBackend::default(), &graph, "loss", config)?;
//! trainer.set_weight("w", HostTensor::scalar(0.0f32).view())?;
//! let xs = HostTensor::from_vec(vec![1.0f32, 2.0, -1.0], [3])?;
//! let ys = HostTensor::from_vec(vec![3.0f32, 6.0, -3.0], [3])?;
//! for _ in 0..50 {
//!     trainer.step(&[("x", xs.view()), ("y", ys.view())])?;
//! }
//! let w = trainer.weight("w")?.to_f64_vec()[0];
//! assert!((w - 3.0).abs() < 1e-4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "mlx")]
mod data_parallel;
mod optimizer;
mod schedule;

use std::path::Path;

use crate::autodiff::{GradError, Wrt, gradients};
use crate::backend::{Backend, CompileError, Executable, RunError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, Graph, NodeId, Shape};
use crate::tensor::{HostTensor, TensorRef};
use crate::weights::{WeightsError, read_tensors, save_tensors};
#[cfg(feature = "mlx")]
pub use data_parallel::{DEFAULT_BUCKET_BYTES, DataParallelTrainer};
pub use optimizer::{AdamSettings, Optimizer};
use optimizer::{StepInputs, clip_by_global_norm, update};
pub use schedule::Schedule;

/// The graph input holding the scheduled learning rate.
pub const LR_INPUT: &str = "optimizer.lr";
/// The graph inputs holding Adam's bias corrections `1 − β1^t` and `1 − β2^t`.
pub const BIAS_CORRECTION_INPUTS: [&str; 2] =
    ["optimizer.bias_correction1", "optimizer.bias_correction2"];
/// The key of the step count in a saved training state.
pub const STEP_KEY: &str = "optimizer.step";

/// How a model is trained: optimizer, schedule, clipping.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// The optimizer and its base learning rate.
    pub optimizer: Optimizer,
    /// How the learning rate changes with the step.
    pub schedule: Schedule,
    /// Clip gradients to this global L2 norm.
    pub clip_grad_norm: Option<f64>,
}

impl TrainConfig {
    /// `optimizer` at a constant rate, without clipping.
    pub fn new(optimizer: Optimizer) -> TrainConfig {
        TrainConfig {
            optimizer,
            schedule: Schedule::Constant,
            clip_grad_norm: None,
        }
    }

    /// With a learning-rate schedule.
    pub fn schedule(mut self, schedule: Schedule) -> TrainConfig {
        self.schedule = schedule;
        self
    }

    /// The learning rate of the step after `steps` steps.
    fn lr_at(&self, steps: u64) -> f64 {
        self.optimizer.lr() * self.schedule.factor(steps)
    }

    /// With gradient clipping by global norm.
    pub fn clip_grad_norm(mut self, max_norm: f64) -> TrainConfig {
        self.clip_grad_norm = Some(max_norm);
        self
    }
}

/// Why training could not be set up or a step failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The gradient transform failed.
    #[error(transparent)]
    Grad(#[from] GradError),
    /// Building the update failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The backend could not compile the training step.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// A step failed to run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Saving or loading the training state failed.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The settings are invalid.
    #[error("invalid training settings: {0}")]
    Config(String),
    /// A collective of data-parallel training failed.
    #[cfg(feature = "mlx")]
    #[error(transparent)]
    Distributed(#[from] crate::distributed::DistributedError),
    /// Ranks of a data-parallel run hold different weights.
    #[error("ranks {ranks:?} hold weights that differ from rank 0's")]
    OutOfSync {
        /// The ranks that differ from rank 0.
        ranks: Vec<usize>,
    },
}

/// A training step's graph and what its outputs update.
#[derive(Clone, Debug)]
pub struct TrainingGraph {
    /// Forward, backward and update in one graph.
    pub graph: Graph,
    /// `(output index, param name)`: after a step, each param takes that output's value.
    pub updates: Vec<(usize, String)>,
    /// The optimizer-state params, with their dtypes and (static) dims.
    pub state: Vec<(String, DType, Vec<usize>)>,
    /// The loss output's index.
    pub loss: usize,
    /// The dtype of the per-step scalar inputs (f64 when a weight is f64, else f32).
    pub scalar_dtype: DType,
}

/// Builds the training step of `graph`, whose scalar output `loss` is minimized over every
/// float param.
pub fn training_graph(
    graph: &Graph,
    loss: &str,
    config: &TrainConfig,
) -> Result<TrainingGraph, TrainError> {
    let with_grads = gradients(graph, loss, &Wrt::Params)?;
    // Gradients feed the update; returning them too would copy them out every step.
    let (nodes, outputs, writes) = with_grads.into_parts();
    let (grad_outputs, kept): (Vec<_>, Vec<_>) = outputs
        .into_iter()
        .partition(|o| o.name.starts_with("grad/"));
    let loss_index = kept
        .iter()
        .position(|o| o.name == loss)
        .expect("the loss is an output");
    let base = Graph::assemble(nodes, kept, writes)
        .map_err(|e| TrainError::Config(format!("the gradient graph does not verify: {e}")))?;
    let mut b = GraphBuilder::from_graph(base);
    let weights: Vec<(NodeId, String)> = graph
        .params()
        .filter(|(_, n)| n.ty.dtype.is_float())
        .map(|(id, n)| (id, n.name.clone().unwrap_or_default()))
        .collect();
    let grads: Vec<NodeId> = grad_outputs.iter().map(|o| o.node).collect();
    let scalar_dtype = hyper_dtype(graph);
    let first = graph.outputs().len();
    let (updates, state_specs) =
        append_update(&mut b, &weights, grads, config, scalar_dtype, first)?;
    Ok(TrainingGraph {
        graph: b.finish()?,
        updates,
        state: state_specs,
        loss: loss_index,
        scalar_dtype,
    })
}

/// The optimizer's half of a training graph: per-step scalar inputs, clipping of `grads`
/// (one per weight), the update of every weight and its optimizer state (new params), and
/// an output `update/<name>` for each, numbered from `first_output`. Returns `(output
/// index, param name)` of every update and the state params' specs.
#[allow(clippy::type_complexity)]
fn append_update(
    b: &mut GraphBuilder,
    weights: &[(NodeId, String)],
    mut grads: Vec<NodeId>,
    config: &TrainConfig,
    scalar_dtype: DType,
    first_output: usize,
) -> Result<(Vec<(usize, String)>, Vec<(String, DType, Vec<usize>)>), TrainError> {
    config.optimizer.validate().map_err(TrainError::Config)?;
    if let Some(max) = config.clip_grad_norm {
        if !(max.is_finite() && max > 0.0) {
            return Err(TrainError::Config(format!(
                "clip_grad_norm must be positive and finite, got {max}"
            )));
        }
        grads = clip_by_global_norm(b, &grads, max)?;
    }
    let opt = &config.optimizer;
    let lr = b.input(LR_INPUT, scalar_dtype, Shape::scalar())?;
    let bias_corrections = match opt {
        Optimizer::Adam(_) | Optimizer::AdamW(_) => Some((
            b.input(BIAS_CORRECTION_INPUTS[0], scalar_dtype, Shape::scalar())?,
            b.input(BIAS_CORRECTION_INPUTS[1], scalar_dtype, Shape::scalar())?,
        )),
        Optimizer::Sgd { .. } => None,
    };
    let step = StepInputs {
        lr,
        bias_corrections,
    };
    let mut updates = Vec::new();
    let mut state_specs = Vec::new();
    let mut new_outputs: Vec<(String, NodeId)> = Vec::new();
    for ((weight, name), grad) in weights.iter().zip(&grads) {
        let ty = b.ty(*weight).expect("the weight is a node").clone();
        let dims = ty.shape.static_dims().ok_or_else(|| {
            TrainError::Config(format!("weight {name:?} has symbolic dims {}", ty.shape))
        })?;
        let mut state = Vec::new();
        for suffix in opt.state_names() {
            let state_name = format!("optimizer.{name}.{suffix}");
            state.push(b.param(&state_name, ty.dtype, ty.shape.clone())?);
            state_specs.push((state_name, ty.dtype, dims.clone()));
        }
        let (new_weight, new_state) = update(b, opt, &step, *weight, *grad, &state)?;
        new_outputs.push((name.clone(), new_weight));
        for (suffix, node) in opt.state_names().iter().zip(new_state) {
            new_outputs.push((format!("optimizer.{name}.{suffix}"), node));
        }
    }
    for (k, (name, node)) in new_outputs.into_iter().enumerate() {
        b.output(&format!("update/{name}"), node)?;
        updates.push((first_output + k, name));
    }
    Ok((updates, state_specs))
}

/// Runs training steps on a compiled [`training_graph`]: binds the weights and the
/// optimizer state (zeros at first), computes each step's learning rate, runs the step
/// and moves the updated values back into the params.
pub struct Trainer {
    exe: Box<dyn Executable>,
    config: TrainConfig,
    /// `(output index, param name)` of every weight and piece of optimizer state.
    updates: Vec<(usize, String)>,
    loss: usize,
    steps: u64,
    outputs: Vec<HostTensor>,
    scalars: StepScalars,
}

impl Trainer {
    /// Compiles the training step of `graph` (minimizing its output `loss`) on `backend`
    /// and zeroes the optimizer state. Bind the weights with [`Trainer::set_weight`].
    pub fn new<B: Backend>(
        backend: &B,
        graph: &Graph,
        loss: &str,
        config: TrainConfig,
    ) -> Result<Trainer, TrainError>
    where
        B::Executable: 'static,
    {
        let step = training_graph(graph, loss, &config)?;
        let exe: Box<dyn Executable> = Box::new(backend.compile(&step.graph)?);
        for (name, dtype, dims) in &step.state {
            let zeros = HostTensor::zeros(*dtype, dims.clone());
            exe.set_weight(name, zeros.view())?;
        }
        Ok(Trainer {
            exe,
            config,
            updates: step.updates,
            loss: step.loss,
            steps: 0,
            outputs: Vec::new(),
            scalars: StepScalars::new(step.scalar_dtype),
        })
    }

    /// Binds the weight (or optimizer state) `name`.
    pub fn set_weight(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), TrainError> {
        Ok(self.exe.set_weight(name, value)?)
    }

    /// A copy of the weight (or optimizer state) `name`.
    pub fn weight(&self, name: &str) -> Result<HostTensor, TrainError> {
        Ok(self.exe.weight(name)?)
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Sets the step count (when resuming from saved state).
    pub fn set_steps(&mut self, steps: u64) {
        self.steps = steps;
    }

    /// The learning rate the next step uses.
    pub fn lr(&self) -> f64 {
        self.config.lr_at(self.steps)
    }

    /// The outputs of the last step, in the model graph's output order (the loss
    /// included), followed by the updated values.
    pub fn outputs(&self) -> &[HostTensor] {
        &self.outputs
    }

    /// Saves every weight, the optimizer state and the step count (`optimizer.step`, an
    /// `i64` scalar) to a safetensors file, so [`Trainer::load`] resumes exactly here.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        save_state(&*self.exe, &self.updates, self.steps, path)
    }

    /// Loads what [`Trainer::save`] wrote: every weight and optimizer state, and the step
    /// count. The file must hold exactly those tensors.
    pub fn load(&mut self, path: &Path) -> Result<(), TrainError> {
        let exe = &self.exe;
        self.steps = load_state(&self.updates, path, &mut |name, value| {
            exe.set_weight(name, value)
        })?;
        Ok(())
    }

    /// Runs one step on `batch` (the model's inputs) and returns the loss before the
    /// update.
    pub fn step(&mut self, batch: &[(&str, TensorRef<'_>)]) -> Result<f64, TrainError> {
        let used = self.scalars.fill(&self.config, self.steps);
        let scalars = self.scalars.inputs();
        let extra = &scalars[..used];
        // The batch and the step's scalars in one list, on the stack for the usual handful
        // of inputs, so a step allocates nothing on the CPU.
        const ON_STACK: usize = 16;
        let count = batch.len() + extra.len();
        let mut stack = [extra[0]; ON_STACK];
        let heap: Vec<(&str, TensorRef<'_>)>;
        let inputs: &[(&str, TensorRef<'_>)] = if count <= ON_STACK {
            stack[..batch.len()].copy_from_slice(batch);
            stack[batch.len()..count].copy_from_slice(extra);
            &stack[..count]
        } else {
            heap = batch.iter().chain(extra).copied().collect();
            &heap
        };
        self.exe.run_into(inputs, &[], &mut self.outputs)?;
        for (index, name) in &self.updates {
            self.exe.set_weight(name, self.outputs[*index].view())?;
        }
        self.steps += 1;
        Ok(scalar_value(&self.outputs[self.loss]))
    }
}

/// Writes the values of `updates`' params, read from `exe`, and the step count.
fn save_state(
    exe: &dyn Executable,
    updates: &[(usize, String)],
    steps: u64,
    path: &Path,
) -> Result<(), TrainError> {
    let mut tensors = Vec::with_capacity(updates.len() + 1);
    for (_, name) in updates {
        tensors.push((name.clone(), exe.weight(name)?));
    }
    let step = HostTensor::scalar(i64::try_from(steps).unwrap_or(i64::MAX));
    tensors.push((STEP_KEY.to_string(), step));
    save_tensors(path, &tensors)?;
    Ok(())
}

/// Reads what [`save_state`] wrote, binding each tensor with `bind`; returns the step
/// count. Every param of `updates` must be in the file.
fn load_state(
    updates: &[(usize, String)],
    path: &Path,
    bind: &mut dyn FnMut(&str, TensorRef<'_>) -> Result<(), RunError>,
) -> Result<u64, TrainError> {
    let mut seen = Vec::new();
    let mut steps = None;
    read_tensors(path, &mut |name, value| {
        if name == STEP_KEY {
            let bytes: [u8; 8] = value.bytes.try_into().map_err(|_| WeightsError::Format {
                path: path.to_path_buf(),
                message: format!("{STEP_KEY} is not an i64 scalar"),
            })?;
            steps = Some(i64::from_le_bytes(bytes));
        } else {
            bind(name, value)?;
            seen.push(name.to_string());
        }
        Ok(())
    })?;
    let missing: Vec<&str> = updates
        .iter()
        .map(|(_, n)| n.as_str())
        .filter(|n| !seen.iter().any(|s| s == n))
        .collect();
    match steps {
        Some(steps) if missing.is_empty() && steps >= 0 => Ok(steps.unsigned_abs()),
        _ => Err(TrainError::Config(format!(
            "{} is not a saved training state: missing {missing:?}{}",
            path.display(),
            if steps.is_none() {
                " and the step count"
            } else {
                ""
            }
        ))),
    }
}

/// The per-step scalar inputs of a training graph (the learning rate, then Adam's bias
/// corrections), kept between steps so filling them allocates nothing.
struct StepScalars([HostTensor; 3]);

impl StepScalars {
    fn new(dtype: DType) -> StepScalars {
        StepScalars([(); 3].map(|_| HostTensor::zeros(dtype, Vec::new())))
    }

    /// Sets the values of the step after `steps` steps; returns how many inputs the graph
    /// has (the first of [`StepScalars::inputs`]).
    fn fill(&mut self, config: &TrainConfig, steps: u64) -> usize {
        let t = (steps + 1) as i32;
        let lr = config.lr_at(steps);
        let (values, used) = match &config.optimizer {
            Optimizer::Adam(s) | Optimizer::AdamW(s) => {
                let (b1, b2) = s.betas;
                ([lr, 1.0 - b1.powi(t), 1.0 - b2.powi(t)], 3)
            }
            Optimizer::Sgd { .. } => ([lr, 1.0, 1.0], 1),
        };
        for (slot, v) in self.0.iter_mut().zip(values) {
            if let Ok(x) = slot.as_mut_slice::<f64>() {
                x[0] = v;
            } else if let Ok(x) = slot.as_mut_slice::<f32>() {
                x[0] = v as f32;
            }
        }
        used
    }

    fn inputs(&self) -> [(&'static str, TensorRef<'_>); 3] {
        let names = [
            LR_INPUT,
            BIAS_CORRECTION_INPUTS[0],
            BIAS_CORRECTION_INPUTS[1],
        ];
        std::array::from_fn(|i| (names[i], self.0[i].view()))
    }
}

/// The dtype of the per-step scalar inputs: f64 when some weight is f64, else f32.
fn hyper_dtype(graph: &Graph) -> DType {
    if graph.params().any(|(_, n)| n.ty.dtype == DType::F64) {
        DType::F64
    } else {
        DType::F32
    }
}

/// The value of a float scalar tensor.
fn scalar_value(t: &HostTensor) -> f64 {
    if let Ok(v) = t.as_slice::<f32>() {
        return f64::from(v[0]);
    }
    if let Ok(v) = t.as_slice::<f64>() {
        return v[0];
    }
    t.to_f64_vec().first().copied().unwrap_or(f64::NAN)
}

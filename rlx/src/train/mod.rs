//! Training: one compiled graph per step that runs the forward pass, the backward pass
//! ([`crate::autodiff`]) and the optimizer's update, and a [`Trainer`] that feeds it.
//!
//! [`training_graph`] extends a model graph whose scalar output is the loss: it adds the
//! gradients of every float param, optional clipping by global norm, and the optimizer's
//! update. The trained weights and the optimizer's moments are the step graph's
//! [states](crate::backend::Context): each step reads them and writes their new values, which
//! the backend keeps where it runs and updates in place (no copy to the host, no rebinding).
//! Optimizer state is named like the weights (`optimizer.<weight>.exp_avg`, PyTorch's
//! suffixes), and is set, read and saved by name as the weights are. The per-step scalars
//! (the scheduled learning rate, Adam's bias corrections) are inputs (f64 when a weight is
//! f64, else f32), so the schedule costs no recompilation.
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

use std::collections::HashSet;
use std::path::Path;

use crate::autodiff::{GradError, Recompute, Wrt, gradients_with};
use crate::backend::signature::check_weight;
use crate::backend::{Backend, CompileError, Context, Executable, RunError, TensorRole};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{DType, Graph, NodeId, Op, Shape};
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
    /// Which params the step updates (every float param unless set).
    pub trainable: Trainable,
    /// Whether the backward pass computes the values between checkpoints again instead
    /// of keeping them (off unless set; see [`Recompute`]).
    pub recompute: Recompute,
}

/// Which float params a training step updates. The others are frozen: they stay weights of
/// the step's executable (bound with [`Trainer::set_weight`], never copied into the
/// optimizer), take no gradient of their own and no optimizer state; gradients still flow
/// through them to the trained params. Fine-tuning with adapters trains a few small
/// tensors this way on a frozen (possibly quantized) base.
///
/// ```
/// use rlx::train::{Optimizer, TrainConfig, Trainable};
/// let config = TrainConfig::new(Optimizer::adamw(1e-3)).train_only(["lora_a", "lora_b"]);
/// assert_eq!(config.trainable, Trainable::Only(vec!["lora_a".into(), "lora_b".into()]));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Trainable {
    /// Every float param.
    #[default]
    All,
    /// These params, by name (each must be a float param of the model).
    Only(Vec<String>),
}

impl TrainConfig {
    /// `optimizer` at a constant rate, without clipping.
    pub fn new(optimizer: Optimizer) -> TrainConfig {
        TrainConfig {
            optimizer,
            schedule: Schedule::Constant,
            clip_grad_norm: None,
            trainable: Trainable::All,
            recompute: Recompute::Nothing,
        }
    }

    /// Keeps only the checkpoints' activations (each layer's output, in the models that
    /// mark them) from the forward pass and computes the rest again in the backward pass:
    /// less memory for about one more forward pass of compute (see [`Recompute`]).
    ///
    /// ```
    /// use rlx::autodiff::Recompute;
    /// use rlx::train::{Optimizer, TrainConfig};
    /// let config = TrainConfig::new(Optimizer::adamw(1e-3)).recompute_activations();
    /// assert_eq!(config.recompute, Recompute::BetweenCheckpoints);
    /// ```
    pub fn recompute_activations(mut self) -> TrainConfig {
        self.recompute = Recompute::BetweenCheckpoints;
        self
    }

    /// Trains only the params `names`; every other param is frozen (see [`Trainable`]).
    pub fn train_only<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> TrainConfig {
        self.trainable = Trainable::Only(names.into_iter().map(Into::into).collect());
        self
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

/// A training step's graph: its states are the trained weights and the optimizer's
/// moments, which every run reads and writes.
#[derive(Clone, Debug)]
pub struct TrainingGraph {
    /// Forward, backward and update in one graph. Its outputs are the model graph's.
    pub graph: Graph,
    /// The trained weights (every float param of the model), now states of `graph`.
    pub weights: Vec<String>,
    /// The optimizer's states, with their dtypes and dims.
    pub optimizer_state: Vec<(String, DType, Vec<usize>)>,
    /// The loss output's index.
    pub loss: usize,
    /// The dtype of the per-step scalar inputs (f64 when a weight is f64, else f32).
    pub scalar_dtype: DType,
}

/// Builds the training step of `graph`, whose scalar output `loss` is minimized over the
/// params `config.trainable` names (every float param by default).
pub fn training_graph(
    graph: &Graph,
    loss: &str,
    config: &TrainConfig,
) -> Result<TrainingGraph, TrainError> {
    let d = differentiate(graph, loss, config)?;
    let base = Graph::assemble(d.nodes, d.outputs, d.writes)
        .map_err(|e| TrainError::Config(format!("the gradient graph does not verify: {e}")))?;
    let mut b = GraphBuilder::from_graph(base);
    let scalar_dtype = hyper_dtype(graph);
    let optimizer_state = append_update(&mut b, &d.weights, d.grads, config, scalar_dtype)?;
    Ok(TrainingGraph {
        graph: b.finish()?,
        weights: d.weights.into_iter().map(|(_, name)| name).collect(),
        optimizer_state,
        loss: d.loss,
        scalar_dtype,
    })
}

/// A model graph with the gradients of its float params, which are now states (the trained
/// weights), taken apart to be extended.
struct Differentiated {
    nodes: Vec<crate::ir::Node>,
    /// The model's outputs (the gradients are not outputs).
    outputs: Vec<crate::ir::Output>,
    /// The model's own writes.
    writes: Vec<crate::ir::Output>,
    /// Each trained weight's node and name, in the model's param order.
    weights: Vec<(NodeId, String)>,
    /// Each weight's gradient, in the same order.
    grads: Vec<NodeId>,
    /// The loss among `outputs`.
    loss: usize,
}

fn differentiate(
    graph: &Graph,
    loss: &str,
    config: &TrainConfig,
) -> Result<Differentiated, TrainError> {
    // The trained names, once: `None` trains every float param.
    let only: Option<HashSet<&str>> = match &config.trainable {
        Trainable::All => None,
        Trainable::Only(names) => {
            let params: HashSet<&str> = graph
                .params()
                .filter_map(|(_, n)| n.name.as_deref())
                .collect();
            if let Some(name) = names.iter().find(|n| !params.contains(n.as_str())) {
                return Err(TrainError::Config(format!(
                    "{name:?} is not a param of the model, so it cannot be trained"
                )));
            }
            Some(names.iter().map(String::as_str).collect())
        }
    };
    let wrt = match &only {
        None => Wrt::Params,
        Some(names) => {
            let mut names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            names.sort();
            Wrt::Named(names)
        }
    };
    let trained = |name: &str| only.as_ref().is_none_or(|names| names.contains(name));
    let with_grads = gradients_with(graph, loss, &wrt, config.recompute)?;
    let (mut nodes, outputs, writes) = with_grads.into_parts();
    let (grad_outputs, outputs): (Vec<_>, Vec<_>) = outputs
        .into_iter()
        .partition(|o| o.name.starts_with("grad/"));
    let loss = outputs.iter().position(|o| o.name == loss).ok_or_else(|| {
        TrainError::Config(format!("the gradient graph lost the output {loss:?}"))
    })?;
    let mut weights: Vec<(NodeId, String)> = Vec::new();
    for (i, node) in nodes.iter_mut().enumerate() {
        let name = node.name.as_deref().unwrap_or_default();
        if node.op == Op::Param && node.ty.dtype.is_float() && trained(name) {
            node.op = Op::State;
            weights.push((NodeId::new(i), node.name.clone().unwrap_or_default()));
        }
    }
    let mut grads = Vec::with_capacity(weights.len());
    for (_, name) in &weights {
        let grad = format!("grad/{name}");
        let output = grad_outputs.iter().find(|o| o.name == grad);
        let output = output.ok_or_else(|| {
            TrainError::Config(format!("the gradient graph has no output {grad:?}"))
        })?;
        grads.push(output.node);
    }
    Ok(Differentiated {
        nodes,
        outputs,
        writes,
        weights,
        grads,
        loss,
    })
}

/// The optimizer's half of a training graph: per-step scalar inputs, clipping of `grads`
/// (one per weight), and the update of every weight (a state of `b`) and of its optimizer
/// state (new states), each written back. Returns the optimizer states' specs.
fn append_update(
    b: &mut GraphBuilder,
    weights: &[(NodeId, String)],
    mut grads: Vec<NodeId>,
    config: &TrainConfig,
    scalar_dtype: DType,
) -> Result<Vec<(String, DType, Vec<usize>)>, TrainError> {
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
    let mut state_specs = Vec::new();
    let mut writes: Vec<(String, NodeId)> = Vec::new();
    for ((weight, name), grad) in weights.iter().zip(&grads) {
        let ty = b.ty(*weight).expect("the weight is a node").clone();
        let dims = ty.shape.static_dims().ok_or_else(|| {
            TrainError::Config(format!("weight {name:?} has symbolic dims {}", ty.shape))
        })?;
        let mut state = Vec::new();
        for suffix in opt.state_names() {
            let state_name = format!("optimizer.{name}.{suffix}");
            state.push(b.state(&state_name, ty.dtype, ty.shape.clone())?);
            state_specs.push((state_name, ty.dtype, dims.clone()));
        }
        let (new_weight, new_state) = update(b, opt, &step, *weight, *grad, &state)?;
        writes.push((name.clone(), new_weight));
        for (suffix, node) in opt.state_names().iter().zip(new_state) {
            writes.push((format!("optimizer.{name}.{suffix}"), node));
        }
    }
    for (name, node) in writes {
        b.write(&name, node)?;
    }
    Ok(state_specs)
}

/// Runs training steps on a compiled [`training_graph`]: the weights and the optimizer
/// state live in a [`Context`] of the step (the optimizer state zero at first), where each
/// step updates them in place; the trainer computes each step's learning rate and runs it.
pub struct Trainer {
    exe: Box<dyn Executable>,
    context: Context,
    config: TrainConfig,
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
        let context = exe.new_context()?;
        Ok(Trainer {
            exe,
            context,
            config,
            loss: step.loss,
            steps: 0,
            outputs: Vec::new(),
            scalars: StepScalars::new(step.scalar_dtype),
        })
    }

    /// Sets the weight (or optimizer state, or untrained param) `name`.
    pub fn set_weight(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), TrainError> {
        if is_state(&self.context, name) {
            Ok(self.context.set(name, value)?)
        } else {
            Ok(self.exe.set_weight(name, value)?)
        }
    }

    /// A copy of the weight (or optimizer state, or untrained param) `name`.
    pub fn weight(&self, name: &str) -> Result<HostTensor, TrainError> {
        if is_state(&self.context, name) {
            Ok(self.context.get(name)?)
        } else {
            Ok(self.exe.weight(name)?)
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The compiled step, whose params are the frozen weights (see [`Trainable`]): what a
    /// checkpoint loader binds them to.
    pub fn executable(&self) -> &dyn Executable {
        self.exe.as_ref()
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
    /// included).
    pub fn outputs(&self) -> &[HostTensor] {
        &self.outputs
    }

    /// Saves every weight, the optimizer state and the step count (`optimizer.step`, an
    /// `i64` scalar) to a safetensors file, so [`Trainer::load`] resumes exactly here.
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        save_state(&self.context, self.steps, path)
    }

    /// Loads what [`Trainer::save`] wrote: every weight and optimizer state, and the step
    /// count. The file must hold exactly those tensors; on any error nothing changes.
    pub fn load(&mut self, path: &Path) -> Result<(), TrainError> {
        self.steps = load_state(&mut self.context, path)?;
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
        self.exe
            .run_in_into(&mut self.context, inputs, &[], &mut self.outputs)?;
        self.steps += 1;
        Ok(scalar_value(&self.outputs[self.loss]))
    }
}

/// True if `name` is one of `context`'s states.
fn is_state(context: &Context, name: &str) -> bool {
    context.states().iter().any(|s| s.name == name)
}

/// Writes every state of `context` (the weights and the optimizer state) and the step
/// count.
fn save_state(context: &Context, steps: u64, path: &Path) -> Result<(), TrainError> {
    let mut tensors = Vec::with_capacity(context.states().len() + 1);
    for spec in context.states() {
        tensors.push((spec.name.clone(), context.get(&spec.name)?));
    }
    let step = HostTensor::scalar(i64::try_from(steps).unwrap_or(i64::MAX));
    tensors.push((STEP_KEY.to_string(), step));
    save_tensors(path, &tensors)?;
    Ok(())
}

/// Reads what [`save_state`] wrote into `context`; returns the step count. The file must
/// hold every state of `context` and the step count, and nothing else; on any error
/// `context` is unchanged.
fn load_state(context: &mut Context, path: &Path) -> Result<u64, TrainError> {
    let mut values: Vec<(String, HostTensor)> = Vec::new();
    let mut steps = None;
    read_tensors(path, &mut |name, value| {
        if name == STEP_KEY {
            let bytes: [u8; 8] = value.bytes.try_into().map_err(|_| WeightsError::Format {
                path: path.to_path_buf(),
                message: format!("{STEP_KEY} is not an i64 scalar"),
            })?;
            steps = Some(i64::from_le_bytes(bytes));
        } else if is_state(context, name) {
            values.push((name.to_string(), value.to_host()));
        } else {
            return Err(WeightsError::Format {
                path: path.to_path_buf(),
                message: format!("{name:?} is neither a trained weight nor optimizer state"),
            });
        }
        Ok(())
    })?;
    let missing: Vec<&str> = context
        .states()
        .iter()
        .map(|s| s.name.as_str())
        .filter(|n| !values.iter().any(|(v, _)| v == n))
        .collect();
    let steps = match steps {
        Some(steps) if missing.is_empty() && steps >= 0 => steps.unsigned_abs(),
        _ => {
            return Err(TrainError::Config(format!(
                "{} is not a saved training state: missing {missing:?}{}",
                path.display(),
                if steps.is_none() {
                    " and the step count"
                } else {
                    ""
                }
            )));
        }
    };
    // Checked first, so that a value of the wrong type changes nothing.
    for (name, value) in &values {
        let spec = context.states().iter().find(|s| &s.name == name);
        let spec = spec.expect("only states were kept");
        check_weight(
            TensorRole::State,
            name,
            spec.dtype,
            &spec.shape,
            &value.view(),
        )?;
    }
    for (name, value) in &values {
        context.set(name, value.view())?;
    }
    Ok(steps)
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

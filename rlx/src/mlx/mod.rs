//! The MLX backend: graphs run through Apple's MLX array library (feature `mlx`).
//!
//! `compile` optimizes the graph (simplify, CSE, DCE) and uploads constants. The first run
//! with a binding of the runtime dims fixes every node's concrete dims; each run then
//! lowers the graph to lazy MLX arrays and evaluates them, in one of three [`MlxMode`]s.
//!
//! Executables compute on a [`Device`]: the GPU when there is one (Metal on macOS, CUDA
//! with the `mlx-cuda` feature on Linux), else MLX's CPU backend (no AVX kernels, BLAS
//! through OpenBLAS when installed), which is here for portability and parity; the
//! [`crate::cpu`] executor is the fast CPU path. A [`Precision`] chooses full float32 (the
//! default), TF32 matrix products, or half-precision execution of float32 models.
//! [`Executable::run_values`] keeps inputs and outputs
//! on the device, as MLX arrays ([`Value::mlx_array`](crate::backend::Value::mlx_array)).
//!
//! Every MLX failure (a C++ exception, at op construction or at evaluation) comes back as
//! [`RunError::Backend`] with MLX's message and the node it happened at.
//!
//! ```no_run
//! use rlx::prelude::*;
//! use rlx::backend::{Backend, Executable};
//! use rlx::mlx::{MlxBackend, MlxMode};
//! use rlx::tensor::HostTensor;
//!
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", DType::F32, [Dim::sym("n")])?;
//! let y = b.unary(UnaryOp::Relu, x)?;
//! b.output("y", y)?;
//! let exe = MlxBackend::new(MlxMode::Lazy).compile(&b.finish()?)?;
//! let x = HostTensor::from_vec(vec![-1.0f32, 2.0], [2])?;
//! assert_eq!(exe.run(&[("x", x.view())], &[])?[0].as_slice::<f32>()?, &[0.0, 2.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod array;
mod backend;
pub(crate) mod codes;
mod compiled;
mod device;
mod layout;
mod lower;
mod ops;
mod values;
mod weights;

pub use array::{
    Array, MlxError, active_memory, blas, device_name, live_arrays, peak_memory, reset_peak_memory,
    set_kernel_fusion, version,
};
pub use backend::MlxBackend;
pub(crate) use device::gpu_turn;
pub use device::{Device, Precision, cuda_graphs, set_cuda_graphs, tf32_enabled};
pub use ops::MaskArg;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

use crate::backend::Value;
use crate::backend::shared::{
    CustomOps, ParamTable, PlanCache, Pooled, ScratchPool, lock, read, write,
};
use crate::backend::signature::{Binder, Given, Signature, concrete_shapes};
use crate::backend::{Backend, CompileError, Executable, NodeSite, RunError, check_compilable};
use crate::backend::{Context, StateSpec, needs_context};
use crate::backend::{Profile, ProfileStep, check_output_indices};
use crate::gguf::GgmlType;
use crate::ir::{AttrValue, DType, Graph, NodeId, Op};
use crate::passes;
use crate::tensor::{HostTensor, TensorRef};
use compiled::Function;
use layout::{
    FusedSlot, ProductGroup, RowOperand, block_weight_params, fused_slots, k_major_params,
    prepared_slots, product_groups, row_operand_params,
};
use lower::{
    BiasAdds, Constants, GatedProducts, HeadRopes, Lowering, PreparedWeight, ResidualNorms,
    eval_error, upload_constants,
};
use values::{MlxState, MlxValue};
use weights::{BoundWeights, Joined, Weight};

/// How runs are evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlxMode {
    /// Evaluate each node as soon as it is built: slow, but a failure points at its node.
    Eager,
    /// Build the whole graph lazily and evaluate it once per run.
    Lazy,
    /// Trace the graph once per runtime-dim binding with `mlx::compile` and call the traced
    /// function on every run. On Linux CPU, MLX builds fused kernels by running `g++` on
    /// the first call (seconds, cached under `$TMPDIR/mlx`).
    Compiled,
}

impl Default for MlxMode {
    /// Compiled on a GPU (Metal, CUDA), lazy on Linux's CPU backend (see
    /// [`MlxMode::Compiled`]).
    fn default() -> MlxMode {
        if cfg!(target_os = "macos") || Device::preferred() == Device::Gpu {
            MlxMode::Compiled
        } else {
            MlxMode::Lazy
        }
    }
}

/// An MLX-side kernel of a [`Op::Custom`] op, built from [`Array`] ops.
///
/// ```no_run
/// use std::collections::BTreeMap;
/// use std::sync::Arc;
/// use rlx::ir::{AttrValue, BinaryOp, DType};
/// use rlx::mlx::{Array, MlxBackend, MlxCustomOp, MlxMode};
/// use rlx::tensor::HostTensor;
///
/// /// `y = x * x`.
/// struct Square;
/// impl MlxCustomOp for Square {
///     fn lower(&self, _: &BTreeMap<String, AttrValue>, inputs: &[Array], _: DType, _: &[usize]) -> Result<Array, String> {
///         inputs[0].binary(BinaryOp::Mul, &inputs[0]).map_err(|e| e.to_string())
///     }
/// }
/// let backend = MlxBackend::new(MlxMode::Lazy).with_custom_op("square", Arc::new(Square));
/// ```
pub trait MlxCustomOp: Send + Sync {
    /// Builds the op's result from its operands; it must have `dtype` and `dims`. An `Err`
    /// becomes [`RunError::Custom`].
    fn lower(
        &self,
        attrs: &BTreeMap<String, AttrValue>,
        inputs: &[Array],
        dtype: DType,
        dims: &[usize],
    ) -> Result<Array, String>;
}

/// Copies host tensors (a run's inputs, or weights being bound) into MLX arrays for
/// `device`: on a CUDA GPU, into device memory (see `rlx_mlx_array_from_bytes`).
fn upload(tensors: &[(&str, TensorRef<'_>)], device: Device) -> Result<Vec<Array>, RunError> {
    tensors
        .iter()
        .map(|(_, t)| Array::from_tensor_on(*t, device).map_err(backend_error))
        .collect()
}

/// The type of an input given as an MLX array.
struct ArrayType {
    dtype: DType,
    dims: Vec<usize>,
}

impl Given for ArrayType {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn dims(&self) -> &[usize] {
        &self.dims
    }
    fn byte_len(&self) -> usize {
        self.dims.iter().product::<usize>() * self.dtype.size_bytes()
    }
}

/// MLX sets no rank limit of its own; this bound only keeps absurd graphs out.
const MAX_RANK: usize = 16;

/// The backend's name in errors.
pub(crate) const NAME: &str = "mlx";

struct BindingPlan {
    lowering: Arc<Lowering>,
    /// Compiled mode: the traced function.
    function: Option<Function>,
}

/// What one call works with: the binder's buffers and room for reading results.
struct CallScratch {
    binder: Binder,
    read: Vec<u8>,
}

/// A graph compiled for MLX. See [`MlxBackend`].
///
/// Runs may come from many threads at once ([`Executable`] takes `&self`). Each builds its
/// ops under a process-wide lock (MLX's default device is one per process) and, on the CPU
/// device, evaluates them without it, on its own thread's MLX stream. On a GPU the calls of
/// the process take turns: MLX 0.32's CUDA backend aborted under concurrent runs.
pub struct MlxExecutable {
    /// Identifies this executable's contexts.
    /// The graph's states, in graph order (leaves after the inputs).
    states: Arc<[StateSpec]>,
    /// Per write, in graph order: the state it replaces.
    written: Vec<usize>,
    graph: Arc<Graph>,
    signature: Signature,
    weights: RwLock<BoundWeights>,
    /// Held through `set_weights`, so concurrent calls apply one after the other.
    binding_weights: Mutex<()>,
    leaves: Vec<NodeId>,
    constants: Arc<Constants>,
    custom: Arc<Vec<Option<Arc<dyn MlxCustomOp>>>>,
    /// The adds of a bias to a matmul, lowered as one GEMM (every binding alike).
    bias_adds: Arc<BiasAdds>,
    residual_norms: Arc<ResidualNorms>,
    head_ropes: Arc<HeadRopes>,
    gated_products: Arc<GatedProducts>,
    mode: MlxMode,
    device: Device,
    /// False under [`Precision::F16`] and [`Precision::BF16`]: half ops run MLX's own
    /// half-precision kernels.
    exact_halves: bool,
    /// Per param: the dtype its float32 value is cast to when bound (half precisions).
    param_casts: Vec<Option<DType>>,
    /// Per param: stored K-major (see [`layout`]).
    k_major: Vec<bool>,
    /// Per param: the block format whose MLX form is made when it is bound (see
    /// [`layout::block_weight_params`]).
    block_formats: Vec<Option<GgmlType>>,
    /// Per param: the float weight's view for products of a block of rows, made when it is
    /// bound (see [`layout::row_operand_params`]).
    row_operands: Vec<Option<RowOperand>>,
    /// Per node: where a param's form made when it is bound (a block weight's MLX form, a
    /// float weight's view for rows) lies among a call's leaves.
    prepared: Arc<Vec<Option<PreparedWeight>>>,
    /// Products of one operand by several weights, each group's weights joined when bound
    /// (see [`layout::product_groups`]).
    groups: Vec<ProductGroup>,
    /// Per node: where a grouped product's joined weight lies among a call's leaves.
    fused: Arc<Vec<Option<FusedSlot>>>,
    bindings: PlanCache<BindingPlan>,
    scratch: ScratchPool<CallScratch>,
}

impl std::fmt::Debug for MlxExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlxExecutable")
            .field("nodes", &self.graph.len())
            .field("mode", &self.mode)
            .field("device", &self.device)
            .field("bindings", &self.bindings.len())
            .finish_non_exhaustive()
    }
}

fn backend_error(e: MlxError) -> RunError {
    RunError::Backend {
        backend: NAME,
        message: e.message,
    }
}

impl MlxExecutable {
    /// The optimized graph that runs.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The evaluation mode.
    pub fn mode(&self) -> MlxMode {
        self.mode
    }

    fn binding_for(&self, values: &[usize]) -> Result<Arc<BindingPlan>, RunError> {
        self.bindings.get_or_make(values, || {
            let shapes = concrete_shapes(&self.graph, &self.signature, values, MAX_RANK, "MLX")?;
            let repeats = lower::repeated_sites(&self.graph, &shapes);
            let lowering = Arc::new(Lowering {
                graph: self.graph.clone(),
                bias_adds: self.bias_adds.clone(),
                residual_norms: self.residual_norms.clone(),
                head_ropes: self.head_ropes.clone(),
                gated_products: self.gated_products.clone(),
                shapes,
                constants: self.constants.clone(),
                custom: self.custom.clone(),
                leaves: self.leaves.clone(),
                prepared: self.prepared.clone(),
                fused: self.fused.clone(),
                eager: self.mode == MlxMode::Eager,
                device: self.device,
                verified: AtomicBool::new(false),
                index_arrays: Default::default(),
                repeats,
            });
            let function = if self.mode == MlxMode::Compiled {
                Some(Function::new(lowering.clone()).map_err(backend_error)?)
            } else {
                None
            };
            Ok(BindingPlan { lowering, function })
        })
    }

    fn take_scratch(&self) -> Pooled<'_, CallScratch> {
        self.scratch.take(|| CallScratch {
            binder: Binder::new(&self.signature),
            read: Vec::new(),
        })
    }
}

impl Executable for MlxExecutable {
    fn cached_plans(&self) -> usize {
        self.bindings.len()
    }

    fn set_weights(&self, weights: &[(&str, TensorRef<'_>)]) -> Result<(), RunError> {
        let _one_at_a_time = lock(&self.binding_weights);
        let _gpu = device::gpu_turn(self.device);
        let indices = {
            let bound = read(&self.weights);
            weights
                .iter()
                .map(|(name, value)| bound.params.check(name, value))
                .collect::<Result<Vec<_>, _>>()?
        };
        // Uploaded (and cast) without the lock: runs go on meanwhile.
        let uploaded = upload(weights, self.device)?;
        let made = uploaded
            .into_iter()
            .zip(indices)
            .map(|(array, i)| Ok((i, self.as_stored(i, array)?)))
            .collect::<Result<Vec<_>, RunError>>()?;
        self.store_weights(made)
    }

    fn weight(&self, name: &str) -> Result<HostTensor, RunError> {
        let _gpu = device::gpu_turn(self.device);
        let value = {
            let bound = read(&self.weights);
            let i = bound.params.find_bound(name)?;
            let value = bound.values[i].clone().expect("a bound param has a value");
            (value, self.param_casts[i])
        };
        match value {
            // The value as bound, in the precision it computes in.
            (Weight { array, .. }, Some(_)) => array.cast(DType::F32).and_then(|v| v.to_host()),
            (Weight { array, .. }, None) => array.to_host(),
        }
        .map_err(backend_error)
    }

    /// Times each node: every node is built and evaluated on its own (as in
    /// [`MlxMode::Eager`], whatever the executable's mode), so the figures show where the
    /// time goes rather than what a fused run costs.
    fn profile(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        runs: usize,
    ) -> Result<Profile, RunError> {
        let runs = runs.max(1);
        needs_context(&self.states)?;
        let _gpu = device::gpu_turn(self.device);
        let uploaded = upload(inputs, self.device)?;
        let BoundLeaves {
            plan,
            mut leaves,
            prepared,
        } = self.bind_leaves(inputs, &uploaded, dims)?;
        leaves.extend(prepared);
        Array::eval(&leaves.iter().collect::<Vec<_>>()).map_err(backend_error)?;
        let mut timings = Vec::new();
        let started = std::time::Instant::now();
        for _ in 0..runs {
            let lowered = device::on_device(self.device, self.exact_halves, || {
                plan.lowering.lower_timed(&leaves, Some(&mut timings))
            })
            .map_err(backend_error)??;
            for check in &lowered.checks {
                plan.lowering.verify_indices(check)?;
            }
        }
        let total = started.elapsed();
        let mut steps: Vec<ProfileStep> = Vec::new();
        for (node, time) in timings {
            match steps.iter_mut().find(|s| s.node == Some(node)) {
                Some(step) => step.time += time,
                None => steps.push(ProfileStep {
                    op: self.graph[node].op.name(),
                    node: Some(node),
                    time,
                }),
            }
        }
        Ok(Profile { runs, total, steps })
    }

    fn run_outputs(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        which: &[usize],
    ) -> Result<Vec<HostTensor>, RunError> {
        check_output_indices(which, self.graph.outputs().len())?;
        needs_context(&self.states)?;
        let _gpu = device::gpu_turn(self.device);
        let uploaded = upload(inputs, self.device)?;
        let results = self.evaluate(inputs, &uploaded, dims, None)?;
        which
            .iter()
            .map(|&index| results[index].to_host().map_err(backend_error))
            .collect()
    }

    fn run_into(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError> {
        needs_context(&self.states)?;
        let _gpu = device::gpu_turn(self.device);
        let uploaded = upload(inputs, self.device)?;
        let results = self.evaluate(inputs, &uploaded, dims, None)?;
        self.read_outputs(&results, outputs)
    }

    fn new_context(&self) -> Result<Context, RunError> {
        let _gpu = device::gpu_turn(self.device);
        let arrays = (0..self.states.len())
            .map(|k| self.zero_state(k).map(Some))
            .collect::<Result<Vec<_>, _>>()?;
        let store = MlxState {
            arrays,
            device: self.device,
        };
        Ok(Context::new(Arc::clone(&self.states), Box::new(store)))
    }

    fn run_in_into(
        &self,
        context: &mut Context,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError> {
        let state = self.state_of(context)?;
        let _gpu = device::gpu_turn(self.device);
        let uploaded = upload(inputs, self.device)?;
        let results = self.evaluate(inputs, &uploaded, dims, Some(&mut state.arrays))?;
        self.read_outputs(&results, outputs)
    }

    /// Values that are MLX arrays are used as they are, host values are uploaded, and the
    /// outputs stay MLX arrays, evaluated (on a GPU, in device memory).
    fn run_values(
        &self,
        inputs: &[(&str, &Value)],
        dims: &[(&str, usize)],
    ) -> Result<Vec<Value>, RunError> {
        needs_context(&self.states)?;
        let _gpu = device::gpu_turn(self.device);
        let (described, arrays) = self.arrays_of(inputs)?;
        let results = self.evaluate(&described, &arrays, dims, None)?;
        self.output_values(results)
    }

    fn run_values_in(
        &self,
        context: &mut Context,
        inputs: &[(&str, &Value)],
        dims: &[(&str, usize)],
    ) -> Result<Vec<Value>, RunError> {
        let state = self.state_of(context)?;
        let _gpu = device::gpu_turn(self.device);
        let (described, arrays) = self.arrays_of(inputs)?;
        let results = self.evaluate(&described, &arrays, dims, Some(&mut state.arrays))?;
        self.output_values(results)
    }
}

/// A call's arrays once its inputs are bound: the plan for their dims, the leaves in call
/// order (the bound weights, then the inputs; a call appends the states), and the block
/// weights' MLX forms and product groups' joined weights, which follow every other leaf.
struct BoundLeaves {
    plan: Arc<BindingPlan>,
    leaves: Vec<Array>,
    prepared: Vec<Array>,
}

impl MlxExecutable {
    /// The arrays of `inputs`: an MLX value's own array, a host value uploaded to the
    /// executable's device, each with its type.
    #[allow(clippy::type_complexity)]
    fn arrays_of<'a>(
        &self,
        inputs: &[(&'a str, &Value)],
    ) -> Result<(Vec<(&'a str, ArrayType)>, Vec<Array>), RunError> {
        let mut described = Vec::with_capacity(inputs.len());
        let mut arrays = Vec::with_capacity(inputs.len());
        for (name, value) in inputs {
            let array = match value.mlx_array() {
                Some(a) => a.clone(),
                None => {
                    let host = value.host_view()?;
                    Array::from_tensor_on(host.view(), self.device).map_err(backend_error)?
                }
            };
            described.push((
                *name,
                ArrayType {
                    dtype: value.dtype(),
                    dims: value.shape().to_vec(),
                },
            ));
            arrays.push(array);
        }
        Ok((described, arrays))
    }

    /// The graph's outputs among `results` (outputs, then writes) as values.
    fn output_values(&self, mut results: Vec<Array>) -> Result<Vec<Value>, RunError> {
        results.truncate(self.graph.outputs().len());
        results
            .into_iter()
            .map(|array| MlxValue::value(array, self.device).map_err(backend_error))
            .collect()
    }

    /// The store of `context`, if it holds this graph's states on this device.
    fn state_of<'c>(&self, context: &'c mut Context) -> Result<&'c mut MlxState, RunError> {
        let state = context.store_of::<MlxState>(&self.states)?;
        if state.device != self.device {
            return Err(RunError::ForeignContext);
        }
        Ok(state)
    }

    /// State `k` at zero, on the device.
    fn zero_state(&self, k: usize) -> Result<Array, RunError> {
        let s = &self.states[k];
        let zeros = HostTensor::zeros(s.dtype, s.shape.clone());
        Array::from_tensor_on(zeros.view(), self.device).map_err(backend_error)
    }

    /// Copies the graph's outputs among `results` (outputs, then writes) to `outputs`.
    fn read_outputs(
        &self,
        results: &[Array],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError> {
        let count = self.graph.outputs().len();
        outputs.resize_with(count, || HostTensor::zeros(DType::F32, [0]));
        let mut scratch = self.take_scratch();
        for (out, array) in outputs.iter_mut().zip(&results[..count]) {
            array
                .read_into(out, &mut scratch.read)
                .map_err(backend_error)?;
        }
        Ok(())
    }

    /// Binds the runtime dims from `inputs` (their arrays in `arrays`), checks the inputs
    /// against that binding, and returns its plan with the arrays of a call.
    fn bind_leaves<G: Given>(
        &self,
        inputs: &[(&str, G)],
        arrays: &[Array],
        dims: &[(&str, usize)],
    ) -> Result<BoundLeaves, RunError> {
        // The weights as bound now: a concurrent `set_weights` does not reach this run.
        let (mut leaves, prepared): (Vec<Array>, Vec<Array>) = {
            let bound = read(&self.weights);
            bound.params.all_bound()?;
            let weights = bound.values.iter().flatten();
            let joined = bound.joined.iter().flat_map(|j| j.0.iter().cloned());
            (
                weights.clone().map(|w| w.array.clone()).collect(),
                weights
                    .flat_map(|w| w.prepared.iter().cloned())
                    .chain(joined)
                    .collect(),
            )
        };
        let mut scratch = self.take_scratch();
        let binder = &mut scratch.binder;
        binder.bind(&self.signature, inputs, dims)?;
        let plan = self.binding_for(&binder.key)?;
        let shapes = &plan.lowering.shapes;
        self.signature.check_inputs(binder, inputs, |i| {
            shapes[self.signature.inputs[i].node.index()].as_slice()
        })?;
        leaves.extend(binder.provided.iter().map(|&given| arrays[given].clone()));
        Ok(BoundLeaves {
            plan,
            leaves,
            prepared,
        })
    }

    /// Binds the inputs (described by `inputs`, their arrays in `arrays`), lowers or calls
    /// the traced function on this executable's device, and evaluates the outputs and
    /// writes (in that order). With `states` (a context's, one array per state), the state
    /// nodes read them and each write replaces its state's array.
    fn evaluate<G: Given>(
        &self,
        inputs: &[(&str, G)],
        arrays: &[Array],
        dims: &[(&str, usize)],
        states: Option<&mut Vec<Option<Array>>>,
    ) -> Result<Vec<Array>, RunError> {
        let BoundLeaves {
            plan,
            mut leaves,
            prepared,
        } = self.bind_leaves(inputs, arrays, dims)?;
        if let Some(states) = &states {
            for (k, state) in states.iter().enumerate() {
                leaves.push(match state {
                    Some(array) => array.clone(),
                    None => self.zero_state(k)?,
                });
            }
        }
        leaves.extend(prepared);
        let graph = &*self.graph;
        let lowered = device::on_device(self.device, self.exact_halves, || match &plan.function {
            Some(f) => f.call(&leaves),
            None => plan.lowering.lower(&leaves),
        })
        .map_err(backend_error)??;
        // A written state is now referenced by the graph alone, so that MLX may update it in
        // place (it copies an array referenced anywhere else). Until the writes are in, the
        // context holds no value for it: a failed run leaves zeros.
        drop(leaves);
        let count = graph.outputs().len();
        let mut states = states;
        if let Some(states) = states.as_deref_mut() {
            for &k in &self.written {
                states[k] = None;
            }
        }
        let mut all: Vec<&Array> = lowered.outputs.iter().collect();
        all.extend(&lowered.any_bad);
        Array::eval(&all).map_err(|e| eval_error(graph, None, e))?;
        if let Some(states) = states {
            for (w, &k) in self.written.iter().enumerate() {
                states[k] = Some(lowered.outputs[count + w].clone());
            }
            // A GPU keeps each kernel's operands alive until a worker sees it finish; the
            // next run may update these states in place only once that has happened.
            if self.device == Device::Gpu {
                array::synchronize().map_err(backend_error)?;
            }
        }
        // One flag read per run (each read waits for the device); the gathers and
        // scatters are looked at one by one only when some index was out of range.
        let out_of_range = match &lowered.any_bad {
            Some(flag) => flag.to_host().map_err(backend_error)?.to_f64_vec() != [0.0],
            None => false,
        };
        if out_of_range {
            for check in &lowered.checks {
                plan.lowering.verify_indices(check)?;
            }
        }
        Ok(lowered.outputs)
    }
}

//! The MLX backend: graphs run through Apple's MLX array library (feature `mlx`).
//!
//! `compile` optimizes the graph (simplify, CSE, DCE) and uploads constants. The first run
//! with a binding of the runtime dims fixes every node's concrete dims; each run then
//! lowers the graph to lazy MLX arrays and evaluates them, in one of three [`MlxMode`]s.
//! On Linux MLX runs on its CPU backend (no AVX kernels, one thread per stream, BLAS
//! through OpenBLAS when installed), so it is here for portability and parity; the
//! [`crate::cpu`] executor is the fast path there. On macOS the same code runs on Metal.
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
//! let mut exe = MlxBackend::new(MlxMode::Lazy).compile(&b.finish()?)?;
//! let x = HostTensor::from_vec(vec![-1.0f32, 2.0], [2])?;
//! assert_eq!(exe.run(&[("x", x.view())], &[])?[0].as_slice::<f32>()?, &[0.0, 2.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod array;
mod codes;
mod compiled;
mod lower;

pub use array::{
    Array, MaskArg, MlxError, blas, device_name, live_arrays, set_kernel_fusion, version,
};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::backend::shared::{CustomOps, ParamTable, PlanCache};
use crate::backend::signature::{Binder, Signature, concrete_shapes};
use crate::backend::{Backend, CompileError, Executable, RunError, check_compilable};
use crate::ir::{AttrValue, DType, Graph, NodeId, Op};
use crate::passes;
use crate::tensor::{HostTensor, TensorRef};
use compiled::Function;
use lower::{Constants, Lowering, eval_error, upload_constants};

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
    /// Compiled on macOS (Metal), lazy elsewhere (see [`MlxMode::Compiled`]).
    fn default() -> MlxMode {
        if cfg!(target_os = "macos") {
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

/// The MLX backend. See the [module docs](self).
#[derive(Clone, Default)]
pub struct MlxBackend {
    mode: MlxMode,
    custom: CustomOps<dyn MlxCustomOp>,
}

impl std::fmt::Debug for MlxBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlxBackend")
            .field("mode", &self.mode)
            .field("custom_ops", &self.custom)
            .finish()
    }
}

impl MlxBackend {
    /// A backend evaluating in `mode`.
    pub fn new(mode: MlxMode) -> MlxBackend {
        MlxBackend {
            mode,
            custom: CustomOps::default(),
        }
    }

    /// The evaluation mode.
    pub fn mode(&self) -> MlxMode {
        self.mode
    }

    /// Registers the MLX kernel of the custom op `name`.
    pub fn with_custom_op(mut self, name: &str, kernel: Arc<dyn MlxCustomOp>) -> MlxBackend {
        self.custom.insert(name, kernel);
        self
    }
}

/// MLX sets no rank limit of its own; this bound only keeps absurd graphs out.
const MAX_RANK: usize = 16;

/// The backend's name in errors.
pub(crate) const NAME: &str = "mlx";

impl Backend for MlxBackend {
    type Executable = MlxExecutable;

    fn name(&self) -> &'static str {
        NAME
    }

    fn supports(&self, op: &Op) -> bool {
        self.custom.supports(op)
    }

    fn compile(&self, graph: &Graph) -> Result<MlxExecutable, CompileError> {
        check_compilable(self, graph)?;
        let g = passes::standard(graph)?;

        let signature = Signature::of(&g);
        let params = ParamTable::of(&g);
        let constants = upload_constants(&g).map_err(|e| CompileError::Backend {
            backend: NAME,
            message: e.message,
        })?;
        let custom = self.custom.per_node(&g);
        let mut leaves: Vec<NodeId> = params.specs.iter().map(|p| p.node).collect();
        leaves.extend(signature.inputs.iter().map(|i| i.node));
        Ok(MlxExecutable {
            binder: Binder::new(&signature),
            signature,
            values: vec![None; params.specs.len()],
            params,
            leaves,
            constants: Arc::new(constants),
            custom: Arc::new(custom),
            graph: Arc::new(g),
            mode: self.mode,
            bindings: PlanCache::default(),
            scratch: Vec::new(),
        })
    }
}

struct BindingPlan {
    lowering: Arc<Lowering>,
    /// Compiled mode: the traced function.
    function: Option<Function>,
}

/// A graph compiled for MLX. See [`MlxBackend`].
pub struct MlxExecutable {
    graph: Arc<Graph>,
    signature: Signature,
    params: ParamTable,
    /// The bound value of each param, indexed like `params`.
    values: Vec<Option<Array>>,
    leaves: Vec<NodeId>,
    constants: Arc<Constants>,
    custom: Arc<Vec<Option<Arc<dyn MlxCustomOp>>>>,
    mode: MlxMode,
    binder: Binder,
    bindings: PlanCache<BindingPlan>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for MlxExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MlxExecutable")
            .field("nodes", &self.graph.len())
            .field("mode", &self.mode)
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

    fn binding_for(&mut self) -> Result<usize, RunError> {
        let (graph, signature) = (&self.graph, &self.signature);
        let (constants, custom, leaves) = (&self.constants, &self.custom, &self.leaves);
        let mode = self.mode;
        self.bindings.index_for(&self.binder.key, || {
            let shapes = concrete_shapes(graph, signature, &self.binder.key, MAX_RANK, "MLX")?;
            let lowering = Arc::new(Lowering {
                graph: graph.clone(),
                shapes,
                constants: constants.clone(),
                custom: custom.clone(),
                leaves: leaves.clone(),
                eager: mode == MlxMode::Eager,
                verified: AtomicBool::new(false),
            });
            let function = if mode == MlxMode::Compiled {
                Some(Function::new(lowering.clone()).map_err(backend_error)?)
            } else {
                None
            };
            Ok(BindingPlan { lowering, function })
        })
    }
}

impl Executable for MlxExecutable {
    fn set_weight(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), RunError> {
        let i = self.params.check(name, &value)?;
        let array = Array::from_tensor(value).map_err(backend_error)?;
        // Materialize now, so the caller's bytes may go away and runs do not pay for it.
        Array::eval(&[&array]).map_err(backend_error)?;
        self.values[i] = Some(array);
        self.params.mark_bound(i);
        Ok(())
    }

    fn weight(&self, name: &str) -> Result<HostTensor, RunError> {
        let i = self.params.find_bound(name)?;
        let value = self.values[i].as_ref().expect("a bound param has a value");
        value.to_host().map_err(backend_error)
    }

    fn run_into(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError> {
        self.params.all_bound()?;
        let mut leaves: Vec<Array> = self.values.iter().flatten().cloned().collect();
        self.binder.bind(&self.signature, inputs, dims)?;
        let b = self.binding_for()?;
        let plan = self.bindings.get(b);
        let shapes = &plan.lowering.shapes;
        self.signature.check_inputs(&self.binder, inputs, |i| {
            shapes[self.signature.inputs[i].node.index()].as_slice()
        })?;

        for &given in &self.binder.provided {
            leaves.push(Array::from_tensor(inputs[given].1).map_err(backend_error)?);
        }

        let graph = &*self.graph;
        let (results, checks) = match &plan.function {
            Some(f) => f.call(&leaves)?,
            None => {
                let lowered = plan.lowering.lower(&leaves)?;
                (lowered.outputs, lowered.checks)
            }
        };
        let mut all: Vec<&Array> = results.iter().collect();
        all.extend(checks.iter().map(|c| &c.bad));
        Array::eval(&all).map_err(|e| eval_error(graph, None, e))?;
        for check in &checks {
            plan.lowering.verify_indices(check)?;
        }
        outputs.resize_with(results.len(), || HostTensor::zeros(DType::F32, [0]));
        for (out, array) in outputs.iter_mut().zip(&results) {
            array
                .read_into(out, &mut self.scratch)
                .map_err(backend_error)?;
        }
        Ok(())
    }
}

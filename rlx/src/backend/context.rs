//! Contexts: the states of a graph held between runs (a key/value cache per sequence, a
//! running statistic), apart from the executable, so that many independent contexts share
//! one compiled graph, its weights and its plans.

use std::path::Path;
use std::sync::Arc;

use super::signature::check_weight;
use super::{RunError, TensorRole};
use crate::ir::{DType, Graph};
use crate::tensor::{HostTensor, TensorRef};
use crate::weights::{WeightsError, read_tensors, save_tensors};

/// One state of a graph: its name, dtype and (static) dims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateSpec {
    /// The state node's name.
    pub name: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its dims.
    pub shape: Vec<usize>,
}

impl StateSpec {
    /// The states of `graph`, in graph order (their shapes already checked static).
    pub(crate) fn of(graph: &Graph) -> Vec<StateSpec> {
        graph
            .states()
            .map(|(_, n)| StateSpec {
                name: n.name.clone().unwrap_or_default(),
                dtype: n.ty.dtype,
                shape: n.ty.shape.static_dims().unwrap_or_default(),
            })
            .collect()
    }
}

/// Where a backend keeps a context's values: host bytes on the CPU, device arrays on MLX.
/// Slots are the graph's states in order; values passed in are already checked.
pub(crate) trait StateStore: Send + Sync + std::any::Any {
    /// A copy of slot `k`, the state `spec`, on the host.
    fn read(&self, k: usize, spec: &StateSpec) -> Result<HostTensor, RunError>;
    /// Replaces slot `k` with `value`.
    fn write(&mut self, k: usize, value: TensorRef<'_>) -> Result<(), RunError>;
    /// For the backend that made the store, to reach its own type.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

/// The states of one sequence of runs of an executable: what its graph's
/// [`state`](crate::builder::GraphBuilder::state) nodes read and its writes replace.
///
/// A context is made by [`Executable::new_context`](super::Executable::new_context) with
/// every state zero, and passed to [`Executable::run_in`](super::Executable::run_in), which
/// reads and writes it. Contexts are independent: a server keeps one per conversation on one
/// executable, whose weights and plans they share, and runs them from many threads at once.
/// A context also fits every other executable of its backend (and device) whose graph
/// declares the same states, in the same order: two graphs that take turns on one set of
/// states (a training step's gradients and its update) share one context. States are read,
/// set, reset, saved and loaded by name, as weights are.
///
/// ```
/// use rlx::prelude::*;
/// use rlx::backend::{Backend, Executable};
/// use rlx::cpu::CpuBackend;
/// use rlx::tensor::HostTensor;
///
/// let mut b = GraphBuilder::new();
/// let total = b.state("total", DType::F32, [2])?;
/// let x = b.input("x", DType::F32, [2])?;
/// let sum = b.add(total, x)?;
/// b.write("total", sum)?;
/// b.output("sum", sum)?;
/// let exe = CpuBackend::default().compile(&b.finish()?)?;
///
/// let mut ctx = exe.new_context()?;
/// let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2])?;
/// for _ in 0..3 {
///     exe.run_in(&mut ctx, &[("x", x.view())], &[])?;
/// }
/// assert_eq!(ctx.get("total")?.as_slice::<f32>()?, &[3.0, 6.0]);
/// ctx.reset()?;
/// assert_eq!(ctx.get("total")?.as_slice::<f32>()?, &[0.0, 0.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Context {
    specs: Arc<[StateSpec]>,
    pub(crate) store: Box<dyn StateStore>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("states", &self.specs)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context over `store`, whose slots are `specs`.
    pub(crate) fn new(specs: Arc<[StateSpec]>, store: Box<dyn StateStore>) -> Self {
        Context { specs, store }
    }

    /// The store as the backend's own type `T`, if this context holds the states `specs`
    /// (of a graph of that backend).
    pub(crate) fn store_of<T: StateStore>(
        &mut self,
        specs: &[StateSpec],
    ) -> Result<&mut T, RunError> {
        if *self.specs != *specs {
            return Err(RunError::ForeignContext);
        }
        self.store
            .as_any_mut()
            .downcast_mut::<T>()
            .ok_or(RunError::ForeignContext)
    }

    /// The states, in graph order.
    pub fn states(&self) -> &[StateSpec] {
        &self.specs
    }

    fn slot(&self, name: &str) -> Result<usize, RunError> {
        self.specs
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| RunError::UnknownState {
                name: name.to_string(),
                known: self.specs.iter().map(|s| s.name.clone()).collect(),
            })
    }

    /// A copy of the state `name`.
    pub fn get(&self, name: &str) -> Result<HostTensor, RunError> {
        let k = self.slot(name)?;
        self.store.read(k, &self.specs[k])
    }

    /// Sets the state `name` to `value`, of its dtype and dims.
    pub fn set(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), RunError> {
        let k = self.slot(name)?;
        let spec = &self.specs[k];
        check_weight(TensorRole::State, name, spec.dtype, &spec.shape, &value)?;
        self.store.write(k, value)
    }

    /// Sets every state back to zero.
    pub fn reset(&mut self) -> Result<(), RunError> {
        for (k, spec) in self.specs.iter().enumerate() {
            let zeros = HostTensor::zeros(spec.dtype, spec.shape.clone());
            self.store.write(k, zeros.view())?;
        }
        Ok(())
    }

    /// Writes every state to a safetensors file, by name.
    pub fn save(&self, path: &Path) -> Result<(), ContextError> {
        let mut tensors = Vec::with_capacity(self.specs.len());
        for spec in self.specs.iter() {
            tensors.push((spec.name.clone(), self.get(&spec.name)?));
        }
        Ok(save_tensors(path, &tensors)?)
    }

    /// Sets every state from a safetensors file written by [`Context::save`]: the file must
    /// hold each state, of its dtype and dims, and nothing else. On any error the context is
    /// unchanged.
    pub fn load(&mut self, path: &Path) -> Result<(), ContextError> {
        let mut values: Vec<Option<HostTensor>> = vec![None; self.specs.len()];
        read_tensors(path, &mut |name, value| {
            let format = |e: RunError| WeightsError::Format {
                path: path.to_path_buf(),
                message: e.to_string(),
            };
            let k = self.slot(name).map_err(format)?;
            let spec = &self.specs[k];
            check_weight(TensorRole::State, name, spec.dtype, &spec.shape, &value)
                .map_err(format)?;
            values[k] = Some(value.to_host());
            Ok(())
        })?;
        if let Some(missing) = self.specs.iter().zip(&values).find(|(_, v)| v.is_none()) {
            return Err(ContextError::Missing {
                name: missing.0.name.clone(),
            });
        }
        for (k, value) in values.into_iter().enumerate() {
            let value = value.expect("every state was read");
            self.store.write(k, value.view())?;
        }
        Ok(())
    }
}

/// Why saving or loading a context failed.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// Reading or writing the file failed, or it is not a valid state file.
    #[error(transparent)]
    File(#[from] WeightsError),
    /// The file lacks a state of the graph.
    #[error("the file has no value for state {name:?}")]
    Missing {
        /// The state.
        name: String,
    },
    /// The backend failed to read or write a state.
    #[error(transparent)]
    Run(Box<RunError>),
}

impl From<RunError> for ContextError {
    fn from(e: RunError) -> ContextError {
        ContextError::Run(Box::new(e))
    }
}

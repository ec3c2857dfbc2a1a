//! The CPU thunk executor: the default backend.
//!
//! `compile` optimizes the graph (simplify, CSE, DCE, constant folding) and lays out params
//! and constants. The first run with a binding of the runtime dims makes a plan: concrete
//! shapes, one memory arena placed by the [`memory`] planner, and a flat list of thunks.
//! Later runs with the same binding reuse it: they copy inputs in, call the thunks in order,
//! and copy outputs out, without allocating (see `run_into`), hashing or shape arithmetic.

mod custom;
mod fold;
pub(crate) mod fuse;
pub(crate) mod kernels;
mod lower;
pub mod memory;
mod plan;
mod program;
mod statics;
mod thunk;
mod view;
mod workers;

pub use custom::{CustomInputs, CustomKernel, TensorMut};
pub use kernels::simd::{Isa, detected_isa, isa};
pub use plan::PlanReport;

use std::fmt;
use std::sync::{Arc, RwLock};

use crate::backend::shared::{CustomOps, ParamTable, PlanCache, Pooled, ScratchPool, read, write};
use crate::backend::signature::Binder;
use crate::backend::{
    Backend, CompileError, Context, Executable, Profile, ProfileStep, RunError, StateStore,
    check_compilable, needs_context,
};
use crate::ir::{Graph, Op};
use crate::tensor::{HostTensor, TensorRef};
use kernels::layout::with_parallelism;
use plan::Plan;
use program::Program;
use view::Memory;
use workers::Team;

/// Settings of the CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Threads a run's parallel kernels spread over (the caller and workers that stay
    /// awake for the run); defaults to rayon's pool size (all cores, or `RAYON_NUM_THREADS`).
    pub threads: usize,
    /// Run the optimization passes (simplify, CSE, DCE, constant folding).
    pub optimize: bool,
    /// Let buffers whose lifetimes do not overlap share memory.
    pub reuse_memory: bool,
    /// Fill the arena with NaN before every run, so reads of memory no kernel wrote show up.
    pub poison: bool,
    /// The most bytes the weights and constants may take (else compiling fails with
    /// [`CompileError::OutOfMemory`]), and, separately, the most working memory (the
    /// arena) one binding of the runtime dims may take (else that run fails with
    /// [`RunError::OutOfMemory`] when it is planned). `None` (the default) refuses only
    /// what the allocator cannot provide, with the same errors rather than an abort.
    pub memory_limit: Option<usize>,
    /// The most per-binding plans an executable keeps (at least one); past it, the least
    /// recently used is dropped and made again if its binding returns. Defaults to
    /// [`DEFAULT_PLAN_CACHE`](crate::backend::DEFAULT_PLAN_CACHE).
    pub plan_cache: usize,
}

impl Default for CpuOptions {
    fn default() -> CpuOptions {
        CpuOptions {
            threads: rayon::current_num_threads(),
            optimize: true,
            reuse_memory: true,
            poison: false,
            memory_limit: None,
            plan_cache: crate::backend::DEFAULT_PLAN_CACHE,
        }
    }
}

/// The CPU backend.
///
/// ```
/// use rlx::prelude::*;
/// use rlx::backend::{Backend, Executable};
/// use rlx::cpu::CpuBackend;
/// use rlx::tensor::HostTensor;
///
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("batch"), Dim::from(2)])?;
/// let w = b.param("w", DType::F32, [2, 2])?;
/// let y = b.matmul(x, w)?;
/// b.output("y", y)?;
/// let exe = CpuBackend::default().compile(&b.finish()?)?;
/// exe.set_weight("w", HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2])?.view())?;
/// let x = HostTensor::from_vec(vec![1.0f32, 1.0], [1, 2])?;
/// let y = exe.run(&[("x", x.view())], &[])?;
/// assert_eq!(y[0].as_slice::<f32>()?, &[4.0, 6.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct CpuBackend {
    options: CpuOptions,
    custom: CustomOps<dyn CustomKernel>,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("options", &self.options)
            .field("custom_ops", &self.custom)
            .finish()
    }
}

impl CpuBackend {
    /// A backend with these settings.
    pub fn new(options: CpuOptions) -> CpuBackend {
        CpuBackend {
            options,
            custom: CustomOps::default(),
        }
    }

    /// Registers the kernel of the custom op `name` (see [`CustomKernel`]).
    pub fn with_custom_op(mut self, name: &str, kernel: Arc<dyn CustomKernel>) -> CpuBackend {
        self.custom.insert(name, kernel);
        self
    }
}

impl Backend for CpuBackend {
    type Executable = CpuExecutable;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn supports(&self, op: &Op) -> bool {
        self.custom.supports(op)
    }

    fn compile(&self, graph: &Graph) -> Result<CpuExecutable, CompileError> {
        check_compilable(self, graph)?;
        let (program, static_region) = Program::new(graph, &self.options, &self.custom)?;
        let threads = self.options.threads.max(1);
        Ok(CpuExecutable {
            team: match threads {
                1 => None,
                _ => Some(Team::of(threads).map_err(CompileError::Threads)?),
            },
            weights: RwLock::new(Weights {
                statics: Arc::new(static_region),
                params: ParamTable::of(&program.graph),
            }),
            program,
            options: self.options.clone(),
            plans: PlanCache::new(self.options.plan_cache),
            scratch: ScratchPool::default(),
        })
    }
}

/// One 64-byte-aligned block of bytes.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// A growable byte buffer whose start is 64-byte aligned.
#[derive(Default)]
struct AlignedBytes {
    blocks: Vec<Block>,
    len: usize,
}

impl AlignedBytes {
    /// Grows to `len` bytes, or fails without changing anything if the memory is not there.
    fn try_resize(&mut self, len: usize) -> Result<(), std::collections::TryReserveError> {
        let blocks = len.div_ceil(64);
        self.blocks
            .try_reserve_exact(blocks.saturating_sub(self.blocks.len()))?;
        self.blocks.resize(blocks, Block([0; 64]));
        self.len = len;
        Ok(())
    }

    /// A copy, or an error if the memory is not there.
    fn try_clone(&self) -> Result<AlignedBytes, std::collections::TryReserveError> {
        let mut blocks = Vec::new();
        blocks.try_reserve_exact(self.blocks.len())?;
        blocks.extend_from_slice(&self.blocks);
        Ok(AlignedBytes {
            blocks,
            len: self.len,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `Block` is 64 plain bytes with no padding (size 64, align 64), so the
        // blocks are `len.div_ceil(64) * 64 >= len` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the unique borrow of `self` makes the slice unique.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// The weights and constants of a compiled graph, and which params are bound. Runs hold
/// an `Arc` of the region they started with, so binding weights while runs are in flight
/// writes a copy (see [`Executable::set_weights`]); otherwise it writes in place.
struct Weights {
    statics: Arc<AlignedBytes>,
    params: ParamTable,
}

/// What one run works in: the arena its plan places buffers in, and the binder's buffers.
struct Scratch {
    arena: AlignedBytes,
    binder: Binder,
}

/// A graph compiled for the CPU. See [`CpuBackend`].
///
/// Runs may come from many threads at once ([`Executable`] takes `&self`): they share the
/// weights and the plans, and each takes an arena of its own from a pool, so memory grows
/// with the number of runs in flight, one plan's arena each.
pub struct CpuExecutable {
    /// Identifies this executable's contexts.
    program: Program,
    /// The workers of its runs' parallel kernels (none for one thread).
    team: Option<Arc<Team>>,
    options: CpuOptions,
    weights: RwLock<Weights>,
    plans: PlanCache<Plan>,
    scratch: ScratchPool<Scratch>,
}

impl std::fmt::Debug for CpuExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuExecutable")
            .field("nodes", &self.program.graph.len())
            .field("plans", &self.plans.len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The bytes of an output view, in the run's arena, the static region it ran with or its
/// context's states.
fn output_bytes<'a>(
    view: &view::View,
    dtype: crate::ir::DType,
    arena: &'a AlignedBytes,
    statics: &'a AlignedBytes,
    state: &'a [u8],
) -> &'a [u8] {
    let bytes = view.bytes(dtype.size_bytes());
    match view.region {
        view::Region::Arena => &arena.bytes()[bytes],
        view::Region::Static => &statics.bytes()[bytes],
        view::Region::State => &state[bytes],
    }
}

/// A context's states on the CPU: one block of bytes, each state in its slot.
struct CpuState {
    bytes: AlignedBytes,
    slots: Vec<program::StateSlot>,
}

impl StateStore for CpuState {
    fn read(&self, k: usize, spec: &crate::backend::StateSpec) -> Result<HostTensor, RunError> {
        let slot = &self.slots[k];
        let mut out = HostTensor::zeros(spec.dtype, spec.shape.clone());
        out.data_mut()
            .copy_from_bytes(&self.bytes.bytes()[slot.offset..slot.offset + slot.bytes]);
        Ok(out)
    }

    fn write(&mut self, k: usize, value: TensorRef<'_>) -> Result<(), RunError> {
        let slot = &self.slots[k];
        self.bytes.bytes_mut()[slot.offset..slot.offset + slot.bytes].copy_from_slice(value.bytes);
        Ok(())
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl CpuExecutable {
    /// The optimized graph that runs, before this backend fuses any of its nodes.
    pub fn graph(&self) -> &Graph {
        &self.program.graph
    }

    /// The program as this backend runs it, printed like a graph: each fused node as its
    /// fusion (`fused_matmul[+bias, gelu]`, `fused_elementwise[mul, tanh]`) over the values
    /// it reads, and the nodes computed inside it left out.
    ///
    /// ```
    /// use rlx::backend::Backend;
    /// use rlx::cpu::CpuBackend;
    /// use rlx::prelude::*;
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [Dim::sym("rows"), Dim::from(8)])?;
    /// let w = b.param("w", DType::F32, [8, 4])?;
    /// let bias = b.param("bias", DType::F32, [4])?;
    /// let y = b.matmul(x, w)?;
    /// let y = b.binary(BinaryOp::Add, y, bias)?;
    /// let y = b.unary(UnaryOp::Gelu, y)?;
    /// b.output("y", y)?;
    /// let exe = CpuBackend::default().compile(&b.finish()?)?;
    /// assert!(exe.lowered().to_string().contains("fused_matmul[+bias, gelu] %0, %1, %2"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lowered(&self) -> impl fmt::Display + '_ {
        &self.program
    }

    /// Memory figures of the plan for these runtime dims (made now if needed).
    pub fn plan_report(&self, dims: &[(&str, usize)]) -> Result<PlanReport, RunError> {
        let values = self
            .program
            .signature
            .symbols
            .iter()
            .map(|s| {
                dims.iter()
                    .find(|(n, _)| *n == s.name())
                    .map(|(_, v)| *v)
                    .ok_or_else(|| RunError::UnboundSymbol {
                        symbol: s.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.plan_for(&values)?.report.clone())
    }

    /// Runs the graph and lends its outputs to `f` as views into the run's memory, with no
    /// copy. The views live until `f` returns; the run's arena then serves later runs.
    ///
    /// ```
    /// use rlx::prelude::*;
    /// use rlx::backend::Backend;
    /// use rlx::cpu::CpuBackend;
    /// use rlx::tensor::HostTensor;
    ///
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [3])?;
    /// let y = b.unary(UnaryOp::Neg, x)?;
    /// b.output("y", y)?;
    /// let exe = CpuBackend::default().compile(&b.finish()?)?;
    /// let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
    /// let first = exe.run_with(&[("x", x.view())], &[], |outs| outs[0].bytes[..4].to_vec())?;
    /// assert_eq!(f32::from_le_bytes(first.try_into().unwrap()), -1.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_with<R>(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        f: impl FnOnce(&[TensorRef<'_>]) -> R,
    ) -> Result<R, RunError> {
        needs_context(&self.program.states)?;
        let statics = self.bound_statics()?;
        let mut scratch = self.take_scratch();
        let plan = self.execute(&mut scratch, &statics, &mut [], inputs, dims, None)?;
        let views: Vec<TensorRef<'_>> = plan
            .outputs
            .iter()
            .map(|(view, dtype, shape)| TensorRef {
                dtype: *dtype,
                shape,
                bytes: output_bytes(view, *dtype, &scratch.arena, &statics, &[]),
            })
            .collect();
        Ok(f(&views))
    }

    /// The static region runs start with, once every param is bound.
    fn bound_statics(&self) -> Result<Arc<AlignedBytes>, RunError> {
        let weights = read(&self.weights);
        weights.params.all_bound()?;
        Ok(Arc::clone(&weights.statics))
    }

    fn take_scratch(&self) -> Pooled<'_, Scratch> {
        self.scratch.take(|| Scratch {
            arena: AlignedBytes::default(),
            binder: Binder::new(&self.program.signature),
        })
    }

    /// Checks inputs, plans if needed and runs every thunk in `scratch`'s arena against
    /// `statics` and the context's `state` bytes (empty without states); returns the plan
    /// used. With `timings`, adds each thunk's time to its entry.
    fn execute(
        &self,
        scratch: &mut Scratch,
        statics: &AlignedBytes,
        state: &mut [u8],
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        timings: Option<&mut Vec<std::time::Duration>>,
    ) -> Result<Arc<Plan>, RunError> {
        let Scratch { arena, binder } = scratch;
        binder.bind(&self.program.signature, inputs, dims)?;
        let plan = self.plan_for(&binder.key)?;
        self.program
            .signature
            .check_inputs(binder, inputs, |i| plan.inputs[i].1.as_slice())?;
        if arena.len < plan.arena_bytes {
            arena
                .try_resize(plan.arena_bytes)
                .map_err(|_| RunError::OutOfMemory {
                    bytes: plan.arena_bytes,
                    limit: self.options.memory_limit,
                })?;
        }

        let arena = &mut arena.bytes_mut()[..plan.arena_bytes];
        if self.options.poison {
            for chunk in arena.chunks_exact_mut(4) {
                chunk.copy_from_slice(&f32::NAN.to_le_bytes());
            }
        }
        for (i, (view, _)) in plan.inputs.iter().enumerate() {
            let bytes = inputs[binder.provided[i]].1.bytes;
            arena[view.offset..view.offset + bytes.len()].copy_from_slice(bytes);
        }
        let memory = Memory::new(arena, state, statics.bytes());
        let threads = self.options.threads;
        let run = || {
            with_parallelism(threads > 1, || match timings {
                None => plan
                    .thunks
                    .iter()
                    .try_for_each(|thunk| thunk.execute(&memory)),
                Some(timings) => {
                    timings.resize(plan.thunks.len(), std::time::Duration::ZERO);
                    for (thunk, time) in plan.thunks.iter().zip(timings.iter_mut()) {
                        let started = std::time::Instant::now();
                        thunk.execute(&memory)?;
                        *time += started.elapsed();
                    }
                    Ok(())
                }
            })
        };
        match &self.team {
            Some(team) => team.run(run)?,
            None => run()?,
        }
        Ok(plan)
    }

    /// The plan for these runtime-dim values, made (and checked against the memory limit)
    /// on first use.
    fn plan_for(&self, values: &[usize]) -> Result<Arc<Plan>, RunError> {
        let options = &self.options;
        self.plans.get_or_make(values, || {
            let plan = Plan::new(&self.program, values, options.threads, options.reuse_memory)?;
            if options
                .memory_limit
                .is_some_and(|limit| plan.arena_bytes > limit)
            {
                return Err(RunError::OutOfMemory {
                    bytes: plan.arena_bytes,
                    limit: options.memory_limit,
                });
            }
            Ok(plan)
        })
    }

    /// Writes already checked `weights` into `statics`, refreshes their packings and marks
    /// them bound.
    fn write_weights(
        &self,
        statics: &mut AlignedBytes,
        params: &mut ParamTable,
        weights: &[(&str, TensorRef<'_>)],
    ) -> Result<(), RunError> {
        let statics = statics.bytes_mut();
        for (name, value) in weights {
            let i = params.find(name)?;
            let slot = &self.program.params[i];
            if let Some(at) = slot.offset {
                statics[at..at + value.bytes.len()].copy_from_slice(value.bytes);
            }
            for packing in &slot.packings {
                packing.pack(statics, slot.dtype, value.bytes);
            }
            params.mark_bound(i);
        }
        Ok(())
    }

    /// The bytes of `context`'s states, if it holds this graph's (laid out alike: the
    /// slots follow from the states alone, and are compared too).
    fn state_of<'c>(&self, context: &'c mut Context) -> Result<&'c mut [u8], RunError> {
        let store = context.store_of::<CpuState>(&self.program.states)?;
        if store.slots != self.program.state_slots || store.bytes.len != self.program.state_len {
            return Err(RunError::ForeignContext);
        }
        Ok(store.bytes.bytes_mut())
    }

    /// Copies the outputs of a run with `plan` into `outputs`, reusing their storage.
    fn copy_outputs(
        plan: &Plan,
        arena: &AlignedBytes,
        statics: &AlignedBytes,
        state: &[u8],
        outputs: &mut Vec<HostTensor>,
    ) {
        if outputs.len() != plan.outputs.len() {
            outputs.resize_with(plan.outputs.len(), || {
                HostTensor::zeros(crate::ir::DType::F32, [0])
            });
        }
        for (out, (view, dtype, shape)) in outputs.iter_mut().zip(&plan.outputs) {
            out.reshape_for(*dtype, shape);
            out.data_mut()
                .copy_from_bytes(output_bytes(view, *dtype, arena, statics, state));
        }
    }
}

impl Executable for CpuExecutable {
    fn cached_plans(&self) -> usize {
        self.plans.len()
    }

    fn set_weights(&self, weights: &[(&str, TensorRef<'_>)]) -> Result<(), RunError> {
        let mut bound = write(&self.weights);
        for (name, value) in weights {
            bound.params.check(name, value)?;
        }
        let Weights { statics, params } = &mut *bound;
        match Arc::get_mut(statics) {
            Some(unique) => self.write_weights(unique, params, weights)?,
            None => {
                // Runs in flight read the current region: later runs take a new one.
                let mut copy = statics
                    .try_clone()
                    .map_err(|_| RunError::WeightsOutOfMemory { bytes: statics.len })?;
                self.write_weights(&mut copy, params, weights)?;
                *statics = Arc::new(copy);
            }
        }
        Ok(())
    }

    fn weight(&self, name: &str) -> Result<HostTensor, RunError> {
        let weights = read(&self.weights);
        let i = weights.params.find_bound(name)?;
        let slot = &self.program.params[i];
        let len = slot.shape.iter().product::<usize>() * slot.dtype.size_bytes();
        let statics = weights.statics.bytes();
        let mut out = HostTensor::zeros(slot.dtype, slot.shape.clone());
        match (slot.offset, slot.packings.first()) {
            (Some(at), _) => out.data_mut().copy_from_bytes(&statics[at..at + len]),
            (None, Some(packing)) => {
                let mut bytes = vec![0u8; len];
                packing.unpack(statics, slot.dtype, &mut bytes);
                out.data_mut().copy_from_bytes(&bytes);
            }
            // The layout keeps the bytes of every param without a packing.
            (None, None) => {
                return Err(RunError::Backend {
                    backend: "cpu",
                    message: format!("weight {name:?} is held nowhere"),
                });
            }
        }
        Ok(out)
    }

    /// Times every kernel call: one step per thunk, named after the op of its node.
    fn profile(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        runs: usize,
    ) -> Result<Profile, RunError> {
        let runs = runs.max(1);
        // A graph with states runs in a context of its own, its states zero at first.
        let mut context = self.new_context()?;
        let state = self.state_of(&mut context)?;
        let mut timings = Vec::new();
        let mut outputs = Vec::new();
        let statics = self.bound_statics()?;
        let mut scratch = self.take_scratch();
        let started = std::time::Instant::now();
        let mut plan = None;
        for _ in 0..runs {
            let used = self.execute(
                &mut scratch,
                &statics,
                state,
                inputs,
                dims,
                Some(&mut timings),
            )?;
            Self::copy_outputs(&used, &scratch.arena, &statics, state, &mut outputs);
            plan = Some(used);
        }
        let total = started.elapsed();
        let steps = plan
            .iter()
            .flat_map(|plan| plan.thunk_nodes.iter())
            .zip(timings)
            .map(|(node, time)| ProfileStep {
                op: self.program.op_name(*node),
                node: Some(*node),
                time,
            })
            .collect();
        Ok(Profile { runs, total, steps })
    }

    fn run_into(
        &self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError> {
        needs_context(&self.program.states)?;
        let statics = self.bound_statics()?;
        let mut scratch = self.take_scratch();
        let plan = self.execute(&mut scratch, &statics, &mut [], inputs, dims, None)?;
        Self::copy_outputs(&plan, &scratch.arena, &statics, &[], outputs);
        Ok(())
    }

    fn new_context(&self) -> Result<Context, RunError> {
        let mut bytes = AlignedBytes::default();
        let len = self.program.state_len;
        bytes.try_resize(len).map_err(|_| RunError::OutOfMemory {
            bytes: len,
            limit: None,
        })?;
        let store = CpuState {
            bytes,
            slots: self.program.state_slots.clone(),
        };
        Ok(Context::new(
            Arc::clone(&self.program.states),
            Box::new(store),
        ))
    }

    fn run_in_into(
        &self,
        context: &mut Context,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError> {
        let state = self.state_of(context)?;
        let statics = self.bound_statics()?;
        let mut scratch = self.take_scratch();
        let plan = self.execute(&mut scratch, &statics, state, inputs, dims, None)?;
        Self::copy_outputs(&plan, &scratch.arena, &statics, state, outputs);
        Ok(())
    }
}

//! The CPU thunk executor: the default backend.
//!
//! `compile` optimizes the graph (simplify, CSE, DCE, constant folding) and lays out params
//! and constants. The first run with a binding of the runtime dims makes a plan: concrete
//! shapes, one memory arena placed by the [`memory`] planner, and a flat list of thunks.
//! Later runs with the same binding reuse it: they copy inputs in, call the thunks in order,
//! and copy outputs out, without allocating (see `run_into`), hashing or shape arithmetic.

mod custom;
mod fold;
pub(crate) mod kernels;
mod lower;
pub mod memory;
mod plan;
mod program;
mod thunks;

pub use custom::{CustomInputs, CustomKernel, TensorMut};
pub use kernels::simd::{Isa, detected_isa, isa};
pub use plan::PlanReport;

use std::sync::Arc;

use crate::backend::shared::{CustomOps, ParamTable, PlanCache};
use crate::backend::signature::Binder;
use crate::backend::{
    Backend, CompileError, Executable, Profile, ProfileStep, RunError, check_compilable,
};
use crate::ir::{Graph, Op};
use crate::tensor::{HostTensor, TensorRef};
use kernels::layout::with_parallelism;
use plan::Plan;
use program::Program;
use thunks::Memory;

/// Settings of the CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Worker threads for large kernels; defaults to rayon's pool size (all cores).
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
}

impl Default for CpuOptions {
    fn default() -> CpuOptions {
        CpuOptions {
            threads: rayon::current_num_threads(),
            optimize: true,
            reuse_memory: true,
            poison: false,
            memory_limit: None,
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
/// let mut exe = CpuBackend::default().compile(&b.finish()?)?;
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
        let (program, statics) = Program::new(graph, &self.options, &self.custom)?;
        let mut static_region = AlignedBytes::default();
        static_region
            .try_resize(statics.len())
            .map_err(|_| CompileError::OutOfMemory {
                bytes: statics.len(),
                limit: None,
            })?;
        static_region.bytes_mut()[..statics.len()].copy_from_slice(&statics);
        let binder = Binder::new(&program.signature);
        let threads = self.options.threads.max(1);
        // The global pool serves the default; another count gets a pool of its own.
        let pool = if threads > 1 && threads != rayon::current_num_threads() {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .map_err(|e| CompileError::Threads(e.to_string()))?;
            Some(std::sync::Arc::new(pool))
        } else {
            None
        };
        Ok(CpuExecutable {
            pool,
            params: ParamTable::of(&program.graph),
            program,
            options: self.options.clone(),
            statics: static_region,
            plans: PlanCache::default(),
            arena: AlignedBytes::default(),
            binder,
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

/// A graph compiled for the CPU. See [`CpuBackend`].
pub struct CpuExecutable {
    program: Program,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    options: CpuOptions,
    statics: AlignedBytes,
    params: ParamTable,
    plans: PlanCache<Plan>,
    arena: AlignedBytes,
    // Per-run scratch, sized at compile time so runs do not allocate.
    binder: Binder,
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

impl CpuExecutable {
    /// The optimized graph that runs.
    pub fn graph(&self) -> &Graph {
        &self.program.graph
    }

    /// Memory figures of the plan for these runtime dims (made now if needed).
    pub fn plan_report(&mut self, dims: &[(&str, usize)]) -> Result<PlanReport, RunError> {
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
        let i = self.plan_for(&values)?;
        Ok(self.plans.get(i).report.clone())
    }

    /// Runs the graph and lends its outputs to `f` as views into the executor's memory, with
    /// no copy. The views live until `f` returns; the next run overwrites them.
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
    /// let mut exe = CpuBackend::default().compile(&b.finish()?)?;
    /// let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
    /// let first = exe.run_with(&[("x", x.view())], &[], |outs| outs[0].bytes[..4].to_vec())?;
    /// assert_eq!(f32::from_le_bytes(first.try_into().unwrap()), -1.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_with<R>(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        f: impl FnOnce(&[TensorRef<'_>]) -> R,
    ) -> Result<R, RunError> {
        let plan_index = self.execute(inputs, dims, None)?;
        let plan = self.plans.get(plan_index);
        let views: Vec<TensorRef<'_>> = plan
            .outputs
            .iter()
            .map(|(view, dtype, shape)| TensorRef {
                dtype: *dtype,
                shape,
                bytes: self.output_bytes(view, *dtype),
            })
            .collect();
        Ok(f(&views))
    }

    /// The bytes of an output view.
    fn output_bytes(&self, view: &thunks::View, dtype: crate::ir::DType) -> &[u8] {
        let bytes = view.bytes(dtype.size_bytes());
        match view.region {
            thunks::Region::Arena => &self.arena.bytes()[bytes],
            thunks::Region::Static => &self.statics.bytes()[bytes],
        }
    }

    /// Checks inputs, plans if needed and runs every thunk; returns the plan used. With
    /// `timings`, adds each thunk's time to its entry.
    fn execute(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        timings: Option<&mut Vec<std::time::Duration>>,
    ) -> Result<usize, RunError> {
        self.params.all_bound()?;
        self.binder.bind(&self.program.signature, inputs, dims)?;
        let key = std::mem::take(&mut self.binder.key);
        let plan_index = self.plan_for(&key);
        self.binder.key = key;
        let plan_index = plan_index?;
        let plan = self.plans.get(plan_index);
        self.program
            .signature
            .check_inputs(&self.binder, inputs, |i| plan.inputs[i].1.as_slice())?;

        let arena = &mut self.arena.bytes_mut()[..plan.arena_bytes];
        if self.options.poison {
            for chunk in arena.chunks_exact_mut(4) {
                chunk.copy_from_slice(&f32::NAN.to_le_bytes());
            }
        }
        for (i, (view, _)) in plan.inputs.iter().enumerate() {
            let bytes = inputs[self.binder.provided[i]].1.bytes;
            arena[view.offset..view.offset + bytes.len()].copy_from_slice(bytes);
        }
        let memory = Memory::new(arena, self.statics.bytes());
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
        match &self.pool {
            Some(pool) => pool.install(run)?,
            None => run()?,
        }
        Ok(plan_index)
    }

    fn plan_for(&mut self, values: &[usize]) -> Result<usize, RunError> {
        let (program, options, arena) = (&self.program, &self.options, &mut self.arena);
        self.plans.index_for(values, || {
            let plan = Plan::new(program, values, options.threads, options.reuse_memory)?;
            let refused = RunError::OutOfMemory {
                bytes: plan.arena_bytes,
                limit: options.memory_limit,
            };
            if options
                .memory_limit
                .is_some_and(|limit| plan.arena_bytes > limit)
            {
                return Err(refused);
            }
            if plan.arena_bytes > arena.len {
                arena.try_resize(plan.arena_bytes).map_err(|_| refused)?;
            }
            Ok(plan)
        })
    }
}

impl Executable for CpuExecutable {
    fn set_weight(&mut self, name: &str, value: TensorRef<'_>) -> Result<(), RunError> {
        let i = self.params.check(name, &value)?;
        let slot = &self.program.params[i];
        let at = slot.offset;
        let statics = self.statics.bytes_mut();
        statics[at..at + value.bytes.len()].copy_from_slice(value.bytes);
        for packing in &slot.packings {
            packing.refresh(statics, slot);
        }
        self.params.mark_bound(i);
        Ok(())
    }

    fn weight(&self, name: &str) -> Result<HostTensor, RunError> {
        let i = self.params.find_bound(name)?;
        let slot = &self.program.params[i];
        let len = slot.shape.iter().product::<usize>() * slot.dtype.size_bytes();
        let mut out = HostTensor::zeros(slot.dtype, slot.shape.clone());
        out.data_mut()
            .copy_from_bytes(&self.statics.bytes()[slot.offset..slot.offset + len]);
        Ok(out)
    }

    /// Times every kernel call: one step per thunk, named after the op of its node.
    fn profile(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        runs: usize,
    ) -> Result<Profile, RunError> {
        let runs = runs.max(1);
        let mut timings = Vec::new();
        let mut outputs = Vec::new();
        let started = std::time::Instant::now();
        let mut plan_index = 0;
        for _ in 0..runs {
            plan_index = self.execute(inputs, dims, Some(&mut timings))?;
            self.copy_outputs(plan_index, &mut outputs);
        }
        let total = started.elapsed();
        let plan = self.plans.get(plan_index);
        let steps = plan
            .thunk_nodes
            .iter()
            .zip(timings)
            .map(|(node, time)| ProfileStep {
                op: self.program.graph[*node].op.name(),
                node: Some(*node),
                time,
            })
            .collect();
        Ok(Profile { runs, total, steps })
    }

    fn run_into(
        &mut self,
        inputs: &[(&str, TensorRef<'_>)],
        dims: &[(&str, usize)],
        outputs: &mut Vec<HostTensor>,
    ) -> Result<(), RunError> {
        let plan_index = self.execute(inputs, dims, None)?;
        self.copy_outputs(plan_index, outputs);
        Ok(())
    }
}

impl CpuExecutable {
    /// Copies the outputs of the last run with plan `plan_index` into `outputs`, reusing
    /// their storage.
    fn copy_outputs(&self, plan_index: usize, outputs: &mut Vec<HostTensor>) {
        let plan = self.plans.get(plan_index);
        if outputs.len() != plan.outputs.len() {
            outputs.resize_with(plan.outputs.len(), || {
                HostTensor::zeros(crate::ir::DType::F32, [0])
            });
        }
        for (out, (view, dtype, shape)) in outputs.iter_mut().zip(&plan.outputs) {
            out.reshape_for(*dtype, shape);
            out.data_mut()
                .copy_from_bytes(self.output_bytes(view, *dtype));
        }
    }
}

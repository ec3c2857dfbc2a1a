//! A plan: the program specialized to one binding of its runtime dims.
//!
//! Made on the first run with a binding and cached: concrete shapes, the memory plan, and
//! the thunks. Every view is checked once here (bounds, and that no thunk writes memory it
//! also reads), which is what makes the raw memory access in [`super::thunk`] sound.

use super::fuse::Fusion;
use super::lower::{LowerInput, lower, scratch_requests, whole_copy};
use super::memory::{BufferRequest, plan_memory};
use super::program::Program;
use super::thunk::{Accesses, Thunk};
use super::view::{Region, View};
use crate::backend::RunError;
use crate::backend::signature::concrete_shapes;
use crate::ir::{DType, NodeId, Op};

/// Most axes a tensor may have on the CPU backend (index counters live on the stack).
const MAX_RANK: usize = super::kernels::layout::MAX_RANK;

/// Memory figures of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanReport {
    /// Bytes of the arena: the peak memory of a run.
    pub peak_bytes: usize,
    /// The most bytes live at any one step; no placement can use less.
    pub lower_bound: usize,
    /// Every arena buffer: `(offset, bytes, first step, last step)`.
    pub buffers: Vec<(usize, usize, usize, usize)>,
}

/// Where a node's value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    Static(usize),
    Arena(usize),
    /// At this byte offset of the context's states.
    State(usize),
    /// Computed inside a fused node, never stored.
    None,
}

pub(crate) struct Plan {
    pub thunks: Vec<Thunk>,
    /// The node each thunk computes (for profiles).
    pub thunk_nodes: Vec<NodeId>,
    pub arena_bytes: usize,
    /// Per program input: its arena view and concrete dims.
    pub inputs: Vec<(View, Vec<usize>)>,
    /// Per program output: its view, dtype and concrete dims.
    pub outputs: Vec<(View, DType, Vec<usize>)>,
    pub report: PlanReport,
}

impl Plan {
    pub(crate) fn new(
        program: &Program,
        values: &[usize],
        threads: usize,
        reuse: bool,
    ) -> Result<Plan, RunError> {
        let graph = &program.graph;
        // 1. Concrete shapes, re-checked against the op rules now that sizes are known.
        let shapes = concrete_shapes(graph, &program.signature, values, MAX_RANK, "CPU")?;

        // 2. Storage: statics for params and constants, views for reshapes, arena otherwise.
        let end = graph.len();
        let mut storage: Vec<Storage> = Vec::with_capacity(graph.len());
        let mut requests: Vec<BufferRequest> = Vec::new();
        let bytes_of = |id: NodeId| {
            shapes[id.index()].iter().product::<usize>() * graph[id].ty.dtype.size_bytes()
        };
        let (elided, sequence_major) = (&program.view_permutes, &program.sequence_major);
        for (id, node) in graph.iter() {
            let fusion = &program.fusions[id.index()];
            let s = match &node.op {
                _ if matches!(fusion, Some(Fusion::Absorbed)) => {
                    storage.push(Storage::None);
                    continue;
                }
                Op::Param | Op::Constant(_) => Storage::Static(
                    program.static_offsets[id.index()].expect("statics are laid out"),
                ),
                Op::State => Storage::State(program.slot_offset(program.state_of[id.index()])),
                _ if program.in_place[id.index()].is_some() => {
                    Storage::State(program.slot_offset(program.in_place[id.index()]))
                }
                _ if node.op.shares_first_operand() || elided[id.index()] => {
                    storage[node.inputs[0].index()]
                }
                op => {
                    let start = if *op == Op::Input { 0 } else { id.index() };
                    requests.push(BufferRequest {
                        size: bytes_of(id),
                        start,
                        end: start,
                    });
                    Storage::Arena(requests.len() - 1)
                }
            };
            // A joined product writes its earlier members' outputs here: they stay live
            // until then even when nothing reads them.
            let written_here = match fusion {
                Some(Fusion::Products { members, .. }) => &members[..members.len() - 1],
                _ => &[],
            };
            for input in program.operands(id).iter().chain(written_here) {
                if let Storage::Arena(b) = storage[input.index()] {
                    requests[b].end = requests[b].end.max(id.index());
                }
            }
            storage.push(s);
        }
        for out in program
            .outputs
            .iter()
            .chain(program.writes.iter().map(|(_, v)| v))
        {
            if let Storage::Arena(b) = storage[out.index()] {
                requests[b].end = end;
            }
        }
        // Writes take effect when the run ends: a value not already in its slot is copied
        // there after every thunk. A value that lies in a state's slot (read from it), and an
        // output that does while its slot is so written, is first staged in the arena, so
        // that every copy reads the state as it was before the run.
        let copied: Vec<(usize, NodeId)> = program
            .writes
            .iter()
            .filter(|(slot, value)| {
                storage[value.index()] != Storage::State(program.state_slots[*slot].offset)
            })
            .copied()
            .collect();
        let overwritten = |s: Storage| {
            copied
                .iter()
                .any(|(slot, _)| s == Storage::State(program.state_slots[*slot].offset))
        };
        let mut staged: Vec<(NodeId, usize)> = Vec::new();
        let mut stage = |id: NodeId, requests: &mut Vec<BufferRequest>| {
            if let Some(&(_, b)) = staged.iter().find(|(n, _)| *n == id) {
                return b;
            }
            requests.push(BufferRequest {
                size: bytes_of(id),
                start: end,
                end,
            });
            staged.push((id, requests.len() - 1));
            requests.len() - 1
        };
        for &(_, value) in &copied {
            if matches!(storage[value.index()], Storage::State(_)) {
                stage(value, &mut requests);
            }
        }
        for &out in &program.outputs {
            if overwritten(storage[out.index()]) {
                stage(out, &mut requests);
            }
        }
        let mut scratch_of: Vec<Vec<(usize, usize)>> = vec![Vec::new(); graph.len()];
        for (id, node) in graph.iter() {
            let fusion = program.fusions[id.index()].as_ref();
            let operands: Vec<&[usize]> = program
                .operands(id)
                .iter()
                .map(|i| shapes[i.index()].as_slice())
                .collect();
            let out = &shapes[id.index()];
            for (dtype, len) in scratch_requests(node, fusion, &operands, out, threads) {
                let size = len * dtype.size_bytes();
                requests.push(BufferRequest {
                    size,
                    start: id.index(),
                    end: id.index(),
                });
                scratch_of[id.index()].push((requests.len() - 1, len));
            }
        }

        // 3. Placement.
        let memory = plan_memory(&requests, reuse);
        let view_of = |id: NodeId| -> View {
            let len = shapes[id.index()].iter().product();
            match storage[id.index()] {
                Storage::Static(offset) => View {
                    region: Region::Static,
                    offset,
                    len,
                },
                Storage::Arena(b) => View {
                    region: Region::Arena,
                    offset: memory.offsets[b],
                    len,
                },
                Storage::State(offset) => View {
                    region: Region::State,
                    offset,
                    len,
                },
                Storage::None => unreachable!("no thunk reads a value computed inside a fusion"),
            }
        };
        let staged_view = |id: NodeId| -> Option<View> {
            staged.iter().find(|(n, _)| *n == id).map(|&(_, b)| View {
                region: Region::Arena,
                offset: memory.offsets[b],
                len: shapes[id.index()].iter().product(),
            })
        };

        // 4. Thunks.
        let mut thunks = Vec::new();
        let mut thunk_nodes = Vec::new();
        for (id, node) in graph.iter() {
            let fusion = program.fusions[id.index()].as_ref();
            if elided[id.index()] || matches!(fusion, Some(Fusion::Absorbed)) {
                continue;
            }
            let operands = program.operands(id);
            let scratch = scratch_of[id.index()]
                .iter()
                .map(|&(b, len)| View {
                    region: Region::Arena,
                    offset: memory.offsets[b],
                    len,
                })
                .collect();
            thunks.extend(lower(LowerInput {
                id,
                node,
                fusion,
                shapes: operands
                    .iter()
                    .map(|i| shapes[i.index()].as_slice())
                    .collect(),
                out_shape: &shapes[id.index()],
                views: operands.iter().map(|i| view_of(*i)).collect(),
                dtypes: operands.iter().map(|i| graph[*i].ty.dtype).collect(),
                out: view_of(id),
                scratch,
                threads,
                custom: program.custom[id.index()].clone(),
                packed_b: program.packed_b[id.index()].map(|(offset, len)| View {
                    region: Region::Static,
                    offset,
                    len,
                }),
                sequence_major: sequence_major[id.index()],
                joined_outs: match fusion {
                    Some(Fusion::Products { members, .. }) => {
                        members.iter().map(|m| view_of(*m)).collect()
                    }
                    _ => Vec::new(),
                },
            }));
            thunk_nodes.resize(thunks.len(), id);
        }
        // The writes, once every node has run: stage, then copy into the slots.
        for &(id, _) in &staged {
            let to = staged_view(id).expect("staged");
            if to.len > 0 {
                thunks.push(whole_copy(graph[id].ty.dtype, view_of(id), to));
                thunk_nodes.push(id);
            }
        }
        for &(slot, value) in &copied {
            let from = staged_view(value).unwrap_or_else(|| view_of(value));
            let to = View {
                region: Region::State,
                offset: program.state_slots[slot].offset,
                len: from.len,
            };
            if from.len > 0 {
                thunks.push(whole_copy(graph[value].ty.dtype, from, to));
                thunk_nodes.push(value);
            }
        }

        let plan = Plan {
            inputs: program
                .signature
                .inputs
                .iter()
                .map(|i| (view_of(i.node), shapes[i.node.index()].clone()))
                .collect(),
            outputs: program
                .outputs
                .iter()
                .map(|o| {
                    let view = staged_view(*o).unwrap_or_else(|| view_of(*o));
                    (view, graph[*o].ty.dtype, shapes[o.index()].clone())
                })
                .collect(),
            thunks,
            thunk_nodes,
            arena_bytes: memory.peak_bytes,
            report: PlanReport {
                peak_bytes: memory.peak_bytes,
                lower_bound: memory.lower_bound,
                buffers: requests
                    .iter()
                    .zip(&memory.offsets)
                    .map(|(r, o)| (*o, r.size, r.start, r.end))
                    .collect(),
            },
        };
        plan.check(program.statics_len, program.state_len);
        Ok(plan)
    }

    /// Asserts that every view is in bounds and that no thunk writes memory it reads or
    /// writes through another view. Runs once per plan; a failure is a planner bug.
    fn check(&self, statics_len: usize, state_len: usize) {
        for t in &self.thunks {
            let Accesses { writes, reads } = t.accesses();
            for (v, size) in reads.iter().chain(&writes) {
                let limit = match v.region {
                    Region::Arena => self.arena_bytes,
                    Region::Static => statics_len,
                    Region::State => state_len,
                };
                assert!(
                    v.bytes(*size).end <= limit,
                    "view {v:?} out of bounds in {t:?}"
                );
                assert_eq!(v.offset % size, 0, "misaligned view in {t:?}");
            }
            for (i, (w, wsize)) in writes.iter().enumerate() {
                assert_ne!(
                    w.region,
                    Region::Static,
                    "thunk writes static memory: {t:?}"
                );
                let wr = w.bytes(*wsize);
                let overlaps = |(v, size): &(View, usize)| {
                    let r = v.bytes(*size);
                    v.region == w.region
                        && r.start < wr.end
                        && wr.start < r.end
                        && !r.is_empty()
                        && !wr.is_empty()
                };
                let clash = reads.iter().any(overlaps) || writes[i + 1..].iter().any(overlaps);
                assert!(!clash, "aliased views in {t:?}");
            }
        }
    }
}

//! The compiled program: the optimized graph, its fusions, and everything fixed before any
//! dims are bound (the static region, the input and symbol tables).

use std::fmt;

use super::fuse::{self, Fusion};
use super::memory::ALIGN;
use super::statics::{self, ParamSlot};
use super::{AlignedBytes, CpuOptions};
use std::sync::Arc;

use crate::backend::shared::CustomOps;
use crate::backend::signature::Signature;
use crate::backend::{CompileError, StateSpec};
use crate::ir::{Graph, Node, NodeId, Op};
use crate::ir::{Permute, Reduce, Reshape};
use crate::passes::{self, Rewriter};

/// Where a context keeps one state: its bytes, 64-byte aligned, in graph order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StateSlot {
    pub offset: usize,
    pub bytes: usize,
}

pub(crate) struct Program {
    pub graph: Graph,
    /// The states, in graph order, and where a context holds each.
    pub states: Arc<[StateSpec]>,
    pub state_slots: Vec<StateSlot>,
    /// Bytes of a context.
    pub state_len: usize,
    /// Per state node: its slot.
    pub state_of: Vec<Option<usize>>,
    /// Each write: the slot written and the node whose value it takes.
    pub writes: Vec<(usize, NodeId)>,
    /// Per node: the slot a slice update writes in place (see [`in_place_writes`]).
    pub in_place: Vec<Option<usize>>,
    /// Per node: how the CPU fuses it with its neighbours, `None` when it runs as itself.
    pub fusions: Vec<Option<Fusion>>,
    /// The kernel of each custom op node.
    pub custom: Vec<Option<std::sync::Arc<dyn super::custom::CustomKernel>>>,
    pub signature: Signature,
    pub params: Vec<ParamSlot>,
    pub outputs: Vec<NodeId>,
    /// Byte offset in the static region of each param and constant node.
    pub static_offsets: Vec<Option<usize>>,
    /// Byte offset and element count in the static region of the packed `b` of each matmul
    /// whose `b` is a 2-D weight.
    pub packed_b: Vec<Option<(usize, usize)>>,
    pub statics_len: usize,
    /// Permutes every plan makes views of their operand (see `head_permutes`).
    pub view_permutes: Vec<bool>,
    /// Per attention node: which of q, k, v and its output are stored `[.., S, H, D]`.
    pub sequence_major: Vec<[bool; 4]>,
}

impl Program {
    /// The byte offset in a context of the slot `slot` (which a state node or an in-place
    /// update always has).
    pub(crate) fn slot_offset(&self, slot: Option<usize>) -> usize {
        self.state_slots[slot.expect("the node has a state slot")].offset
    }

    /// The values node `id` reads as the CPU computes it: a fused node's are its fusion's.
    pub(crate) fn operands(&self, id: NodeId) -> &[NodeId] {
        match &self.fusions[id.index()] {
            Some(fusion) => fusion.operands(),
            None => &self.graph[id].inputs,
        }
    }

    /// The name of what node `id` computes, as profiles show it.
    pub(crate) fn op_name(&self, id: NodeId) -> &'static str {
        match &self.fusions[id.index()] {
            Some(fusion) => fusion.name(),
            None => self.graph[id].op.name(),
        }
    }
}

/// The graph as the CPU runs it: a fused node is printed as its fusion over the fusion's
/// operands, and the nodes computed inside it are left out.
impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::inspect::write_graph(f, &self.graph, |id, node| match &self.fusions[id.index()] {
            None => Some((crate::inspect::describe(node), &node.inputs)),
            Some(Fusion::Absorbed | Fusion::ProductOf(_)) => None,
            Some(fusion) => Some((fusion.to_string(), fusion.operands())),
        })
    }
}

/// Splits reductions over non-adjacent axes into one reduction per run of adjacent axes
/// (last run first, keeping dims), then reshapes away the reduced axes if asked.
fn legalize(graph: &Graph) -> Result<Graph, crate::ir::VerifyError> {
    let mut rw = Rewriter::new(graph.len());
    for (id, node) in graph.iter() {
        let Op::Reduce(Reduce {
            op,
            axes,
            keep_dims,
        }) = &node.op
        else {
            rw.keep(id, node);
            continue;
        };
        let mut blocks: Vec<Vec<usize>> = Vec::new();
        for &a in axes {
            match blocks.last_mut() {
                Some(b) if *b.last().unwrap_or(&usize::MAX) + 1 == a => b.push(a),
                _ => blocks.push(vec![a]),
            }
        }
        if blocks.len() == 1 {
            rw.keep(id, node);
            continue;
        }
        let mut current = rw.get(node.inputs[0]);
        for block in blocks.iter().rev() {
            let step = Op::Reduce(Reduce {
                op: *op,
                axes: block.clone(),
                keep_dims: true,
            });
            let ty = step
                .infer(&[rw.nodes()[current.index()].ty.clone()])
                .expect("a sub-reduction of a valid reduction is valid");
            current = rw.push(
                id,
                Node {
                    op: step,
                    inputs: vec![current],
                    ty,
                    name: None,
                    origin: node.origin,
                },
            );
        }
        if !keep_dims {
            let reshape = Op::Reshape(Reshape {
                shape: node.ty.shape.clone(),
            });
            rw.push(
                id,
                Node {
                    op: reshape,
                    inputs: vec![current],
                    ty: node.ty.clone(),
                    name: node.name.clone(),
                    origin: node.origin,
                },
            );
        }
    }
    rw.finish(graph)
}

impl Program {
    pub(crate) fn new(
        graph: &Graph,
        options: &CpuOptions,
        registry: &CustomOps<dyn super::custom::CustomKernel>,
    ) -> Result<(Program, AlignedBytes), CompileError> {
        // Composites without a kernel here become their decompositions.
        let mut g = passes::pass(
            "decompose",
            passes::decompose(graph, &super::lower::has_kernel),
        )?;
        if options.optimize {
            g = passes::standard(&g)?;
            g = super::fold::fold_constants(&g, options)?;
        }
        g = passes::pass("legalize", legalize(&g))?;
        let mut fusions = if options.optimize {
            fuse::fuse(&g)
        } else {
            vec![None; g.len()]
        };

        let limit = options.memory_limit;
        // States: each in a 64-byte-aligned slot of a context's bytes.
        let states: Arc<[StateSpec]> = StateSpec::of(&g).into();
        let mut state_slots = Vec::with_capacity(states.len());
        let mut state_of = vec![None; g.len()];
        let mut state_len = 0usize;
        for ((id, node), spec) in g.states().zip(states.iter()) {
            let bytes = node.ty.static_bytes().ok_or(CompileError::OutOfMemory {
                bytes: usize::MAX,
                limit,
            })?;
            let offset = state_len.div_ceil(ALIGN) * ALIGN;
            state_len = offset.checked_add(bytes).ok_or(CompileError::OutOfMemory {
                bytes: usize::MAX,
                limit,
            })?;
            debug_assert_eq!(Some(spec.name.as_str()), node.name.as_deref());
            state_of[id.index()] = Some(state_slots.len());
            state_slots.push(StateSlot { offset, bytes });
        }
        let writes: Vec<(usize, NodeId)> = g
            .writes()
            .iter()
            .map(|w| {
                let state = g.state(&w.name).expect("writes name states");
                (state_of[state.index()].expect("a state has a slot"), w.node)
            })
            .collect();

        let signature = Signature::of(&g);
        let (view_permutes, sequence_major) = head_permutes(&g);
        if options.optimize {
            let views: Vec<bool> = g
                .iter()
                .map(|(id, node)| node.op.shares_first_operand() || view_permutes[id.index()])
                .collect();
            fuse::products::fuse(&g, &views, &mut fusions);
        }
        let in_place = in_place_writes(&g, &fusions, &view_permutes, &writes, &state_of);
        let outputs = g.outputs().iter().map(|o| o.node).collect();
        let custom = registry.per_node(&g);
        let layout = statics::lay_out(&g, &fusions, limit)?;
        let statics = statics::allocate(&g, &layout, limit)?;
        Ok((
            Program {
                graph: g,
                states,
                state_slots,
                state_len,
                state_of,
                writes,
                in_place,
                fusions,
                custom,
                signature,
                params: layout.params,
                outputs,
                static_offsets: layout.offsets,
                packed_b: layout.packed_b,
                statics_len: layout.len,
                view_permutes,
                sequence_major,
            },
            statics,
        ))
    }
}

/// True if `op` swaps the heads and sequence axes of a `[.., H, S, D]` value.
fn swaps_heads_and_sequence(op: &Op) -> bool {
    let Op::Permute(Permute { perm }) = op else {
        return false;
    };
    let r = perm.len();
    r >= 3
        && perm[r - 3] == r - 2
        && perm[r - 2] == r - 3
        && perm[r - 1] == r - 1
        && perm[..r - 3].iter().enumerate().all(|(i, p)| i == *p)
}

/// The permutes that split heads off the features of each position (`[.., S, H, D]` to
/// `[.., H, S, D]`) only for an attention to read, or merge its output back: they need no
/// copy, because the attention kernel reads and writes the `[.., S, H, D]` layout through
/// strides. Returns which nodes become views of their operand, and per attention node
/// which of q, k, v and its output use that layout.
fn head_permutes(graph: &Graph) -> (Vec<bool>, Vec<[bool; 4]>) {
    let users = graph.users();
    let exposed = graph.returned();
    let mut elided = vec![false; graph.len()];
    let mut sequence_major = vec![[false; 4]; graph.len()];
    for (id, node) in graph.iter() {
        if !matches!(node.op, Op::Attention(_)) || !node.ty.dtype.is_float() {
            continue;
        }
        for (i, operand) in node.inputs.iter().enumerate().take(3) {
            let only_here = users[operand.index()].iter().all(|u| *u == id)
                && node.inputs[3..].iter().all(|x| x != operand);
            // A permute already dropped as an earlier attention's output stays as it is.
            if swaps_heads_and_sequence(&graph[*operand].op)
                && only_here
                && !exposed[operand.index()]
                && !elided[operand.index()]
            {
                elided[operand.index()] = true;
                sequence_major[id.index()][i] = true;
            }
        }
        if let [user] = users[id.index()].as_slice()
            && swaps_heads_and_sequence(&graph[*user].op)
            && !exposed[id.index()]
        {
            elided[user.index()] = true;
            sequence_major[id.index()][3] = true;
        }
    }
    (elided, sequence_major)
}

/// The slice updates that write a state in place: per node, the slot it writes.
///
/// A write `s ← v` where `v` is a chain of slice updates over the state node `s`
/// (`v = update(update(s, ..), ..)`) needs no copy of `s`: each update of the chain writes
/// its window straight into `s`'s slot. That is sound when nothing reads the old `s` after
/// the chain's first update runs (thunks run in graph order), and nothing returns or writes
/// the old `s` (those are read after every thunk); when each link of the chain has the next
/// as its only reader and is not returned; and when no update or offset operand shares `s`'s
/// storage.
///
/// A write `s ← v` where `v` is a fused elementwise chain (an optimizer's update of a
/// weight or a moment) is computed straight into `s`'s slot when the chain reads `s`
/// itself, element for element (the kernel loads each block of it before storing that
/// block), nothing else reads or returns the old `s` after the chain, and `v` is written
/// nowhere else. Later readers of `v`, and outputs of it, read it from the slot.
/// Otherwise the write is a copy when the run ends.
fn in_place_writes(
    g: &Graph,
    fusions: &[Option<Fusion>],
    view_permutes: &[bool],
    writes: &[(usize, NodeId)],
    state_of: &[Option<usize>],
) -> Vec<Option<usize>> {
    // The node whose storage each node shares (itself unless it is a view).
    let mut root: Vec<NodeId> = Vec::with_capacity(g.len());
    for (id, node) in g.iter() {
        let view = node.op.shares_first_operand() || view_permutes[id.index()];
        root.push(if view {
            root[node.inputs[0].index()]
        } else {
            id
        });
    }
    // Who reads each storage root, as the CPU runs the graph (a fused node reads its
    // fusion's operands; views read nothing themselves).
    let mut readers: Vec<Vec<(NodeId, usize)>> = vec![Vec::new(); g.len()];
    for (id, node) in g.iter() {
        let operands = match &fusions[id.index()] {
            Some(Fusion::Absorbed) => continue,
            Some(fusion) => fusion.operands(),
            None => &node.inputs,
        };
        if root[id.index()] != id {
            continue;
        }
        for (k, operand) in operands.iter().enumerate() {
            readers[root[operand.index()].index()].push((id, k));
        }
    }
    let mut exposed = vec![false; g.len()];
    for o in g.outputs().iter().chain(g.writes()) {
        exposed[root[o.node.index()].index()] = true;
    }
    let mut in_place = vec![None; g.len()];
    for &(slot, value) in writes {
        let mut chain = Vec::new();
        let mut at = value;
        while matches!(g[at].op, Op::SliceUpdate(_)) && fusions[at.index()].is_none() {
            chain.push(at);
            at = g[at].inputs[0];
        }
        let Some(&first) = chain.last() else { continue };
        if state_of[at.index()] != Some(slot) || root[at.index()] != at || exposed[at.index()] {
            continue;
        }
        let links_private = chain[1..]
            .iter()
            .zip(&chain)
            .all(|(link, next)| !exposed[link.index()] && readers[link.index()] == [(*next, 0)]);
        let state_read_before = readers[at.index()]
            .iter()
            .all(|&(reader, k)| reader < first || (reader == first && k == 0));
        let operands_apart = chain
            .iter()
            .all(|link| g[*link].inputs[1..].iter().all(|x| root[x.index()] != at));
        if links_private && state_read_before && operands_apart {
            for link in chain {
                in_place[link.index()] = Some(slot);
            }
        }
    }
    for &(slot, value) in writes {
        let Some(Fusion::Elementwise { operands, .. }) = &fusions[value.index()] else {
            continue;
        };
        let Some(state) = (0..g.len()).find(|&i| state_of[i] == Some(slot)) else {
            continue;
        };
        let state = NodeId::new(state);
        let written_once = writes.iter().filter(|(_, v)| *v == value).count() == 1;
        let read_here_or_before = readers[state.index()]
            .iter()
            .all(|&(reader, k)| reader < value || (reader == value && operands[k] == state));
        if written_once && !exposed[state.index()] && read_here_or_before {
            in_place[value.index()] = Some(slot);
        }
    }
    in_place
}

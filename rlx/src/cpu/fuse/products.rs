//! Block products of one input computed together: a decoding step's q/k/v projections (and
//! gate/up) are small products of the same activations, each bound by its fixed costs
//! (quantizing the activations, a parallel section, the weight's first cache misses) more
//! than by the bytes it reads. Joined, they quantize once and stream their weights in one
//! parallel section.
//!
//! The joined kernel runs where the last member runs; each member keeps its own output,
//! which the planner keeps live from the member's place to its last reader. So a run of
//! members joins only while nothing reads an earlier member before the last one runs.

use super::Fusion;
use crate::ir::{Graph, NodeId, Op};

/// Most products one kernel computes together (q/k/v are three).
pub(crate) const MAX_MEMBERS: usize = 4;

/// Joins `block_matmul`s not otherwise fused that read the same `x` in the same format and
/// activation precision, in runs of consecutive members (by node order) that no node reads
/// before the run's last member. `views[i]`: whether node `i` is stored as a view of its
/// first operand (it reads nothing itself; its readers read that operand).
pub(crate) fn fuse(graph: &Graph, views: &[bool], fusions: &mut [Option<Fusion>]) {
    // The node whose storage each node shares.
    let mut root: Vec<NodeId> = Vec::with_capacity(graph.len());
    for (id, node) in graph.iter() {
        root.push(if views[id.index()] {
            root[node.inputs[0].index()]
        } else {
            id
        });
    }
    // The first node that reads each storage root as the CPU runs the graph.
    let mut first_reader = vec![usize::MAX; graph.len()];
    for (id, node) in graph.iter() {
        if views[id.index()] {
            continue;
        }
        let operands = match &fusions[id.index()] {
            Some(Fusion::Absorbed) => continue,
            Some(fusion) => fusion.operands(),
            None => &node.inputs,
        };
        for operand in operands {
            let at = &mut first_reader[root[operand.index()].index()];
            *at = (*at).min(id.index());
        }
    }
    // What members of one kernel share: the input, the format, the activation precision.
    let keys: Vec<_> = graph
        .iter()
        .map(|(id, node)| match &node.op {
            Op::BlockMatMul(op) if fusions[id.index()].is_none() && !views[id.index()] => {
                Some((node.inputs[0], op.format, op.activations))
            }
            _ => None,
        })
        .collect();
    let key = |id: NodeId| keys[id.index()];
    let mut claimed = vec![false; graph.len()];
    for (id, _) in graph.iter() {
        let Some(k) = key(id) else { continue };
        if claimed[id.index()] {
            continue;
        }
        let mut members = vec![id];
        let mut read_from = first_reader[id.index()];
        for (next, _) in graph.iter().skip(id.index() + 1) {
            if members.len() == MAX_MEMBERS || next.index() >= read_from {
                break;
            }
            if claimed[next.index()] || key(next) != Some(k) {
                continue;
            }
            members.push(next);
            read_from = read_from.min(first_reader[next.index()]);
        }
        for member in &members {
            claimed[member.index()] = true;
        }
        let Some((&last, earlier)) = members.split_last() else {
            continue;
        };
        if earlier.is_empty() {
            continue;
        }
        for member in earlier {
            fusions[member.index()] = Some(Fusion::ProductOf(last));
        }
        let mut operands = vec![k.0];
        operands.extend(members.iter().map(|m| graph[*m].inputs[1]));
        fusions[last.index()] = Some(Fusion::Products { members, operands });
    }
}

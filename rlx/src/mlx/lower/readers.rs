//! Who reads each node of a graph, and the members of each product group: what the
//! lowering's pattern finders ask before they build nodes together.

use std::collections::HashMap;

use crate::ir::{Graph, NodeId};
use crate::mlx::layout::FusedSlot;

/// Each node's readers and whether the graph returns it.
pub(super) struct Readers {
    users: Vec<Vec<NodeId>>,
    returned: Vec<bool>,
}

impl Readers {
    pub(super) fn of(graph: &Graph) -> Readers {
        Readers {
            users: graph.users(),
            returned: graph.returned(),
        }
    }

    /// The one node reading `n`, if exactly one does and `n` is not returned.
    pub(super) fn sole(&self, n: NodeId) -> Option<NodeId> {
        match self.users[n.index()].as_slice() {
            [reader] if !self.returned[n.index()] => Some(*reader),
            _ => None,
        }
    }

    /// Whether `reader` alone reads `n` and `n` is not returned.
    pub(super) fn only(&self, n: NodeId, reader: NodeId) -> bool {
        self.sole(n) == Some(reader)
    }

    /// Every node reading `n`.
    pub(super) fn of_node(&self, n: NodeId) -> &[NodeId] {
        &self.users[n.index()]
    }
}

/// The members of each product group, by leader, in graph order.
pub(super) fn group_members(fused: &[Option<FusedSlot>]) -> HashMap<NodeId, Vec<NodeId>> {
    let mut members = HashMap::<NodeId, Vec<NodeId>>::new();
    for (i, slot) in fused.iter().enumerate() {
        if let Some(slot) = slot {
            members.entry(slot.leader).or_default().push(NodeId::new(i));
        }
    }
    members
}

//! Rebuilding a graph node by node with remapped ids.

use crate::ir::{Graph, Node, NodeId, Output, VerifyError};

/// Copies nodes into a new graph, keeping a map from old ids to new ones.
pub(crate) struct Rewriter {
    nodes: Vec<Node>,
    map: Vec<Option<NodeId>>,
}

impl Rewriter {
    pub(crate) fn new(old_len: usize) -> Rewriter {
        Rewriter {
            nodes: Vec::with_capacity(old_len),
            map: vec![None; old_len],
        }
    }

    /// The new id of an old node that has been kept or replaced.
    pub(crate) fn get(&self, old: NodeId) -> NodeId {
        self.map[old.index()].expect("operands are rewritten before their users")
    }

    /// Keeps `node` (an old node), remapping its operands; returns its new id.
    pub(crate) fn keep(&mut self, old: NodeId, node: &Node) -> NodeId {
        let mut node = node.clone();
        for input in &mut node.inputs {
            *input = self.get(*input);
        }
        self.push(old, node)
    }

    /// Adds a node whose operands are already new ids, as the value of `old`.
    pub(crate) fn push(&mut self, old: NodeId, node: Node) -> NodeId {
        let id = NodeId::new(self.nodes.len());
        self.nodes.push(node);
        self.map[old.index()] = Some(id);
        id
    }

    /// Adds a node that stands for no old node; returns its id.
    pub(crate) fn add(&mut self, node: Node) -> NodeId {
        let id = NodeId::new(self.nodes.len());
        self.nodes.push(node);
        id
    }

    /// Makes `old` stand for an existing new node.
    pub(crate) fn alias(&mut self, old: NodeId, new: NodeId) {
        self.map[old.index()] = Some(new);
    }

    /// The new nodes so far.
    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The graph of the new nodes with these outputs and writes (new ids).
    pub(crate) fn finish_with(
        self,
        outputs: Vec<Output>,
        writes: Vec<Output>,
    ) -> Result<Graph, VerifyError> {
        Graph::assemble(self.nodes, outputs, writes)
    }

    /// The graph of the new nodes with the outputs and writes of `old`, remapped.
    pub(crate) fn finish(self, old: &Graph) -> Result<Graph, VerifyError> {
        let remap = |list: &[Output]| -> Vec<Output> {
            list.iter()
                .map(|o| Output {
                    name: o.name.clone(),
                    node: self.map[o.node.index()].expect("outputs and writes are kept"),
                })
                .collect()
        };
        let (outputs, writes) = (remap(old.outputs()), remap(old.writes()));
        Graph::assemble(self.nodes, outputs, writes)
    }
}

//! A whole computation: nodes in topological order, named outputs and state writes.

use std::ops::Index;

use super::dim::Symbol;
use super::node::{Node, NodeId};
use super::verify::VerifyError;
use crate::ops::Op;

/// A named result of a graph, or the value a graph writes to the state of that name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// Unique among outputs (among writes: the state written).
    pub name: String,
    /// The node whose value is returned.
    pub node: NodeId,
}

/// A verified computation graph.
///
/// Nodes are in topological order (every operand precedes its user), types agree with
/// [`Op::infer`], input, param and state names are unique, every output exists, and each
/// write replaces a declared state with a value of its type. Graphs are made by a
/// [`GraphBuilder`](crate::builder::GraphBuilder) or from raw parts with
/// [`Graph::from_parts`] (and [`Graph::with_writes`]), all of which verify.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("batch"), Dim::from(4)])?;
/// let y = b.unary(UnaryOp::Relu, x)?;
/// b.output("y", y)?;
/// let g = b.finish()?;
/// assert_eq!(g.len(), 2);
/// assert_eq!(g.input("x"), Some(x));
/// assert_eq!(g.symbols(), vec![Symbol::new("batch")]);
/// # Ok::<(), rlx::builder::BuildError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    nodes: Vec<Node>,
    outputs: Vec<Output>,
    writes: Vec<Output>,
}

impl Graph {
    /// A graph from nodes and outputs (and no state writes), after checking them with the
    /// verifier.
    pub fn from_parts(nodes: Vec<Node>, outputs: Vec<Output>) -> Result<Graph, VerifyError> {
        Graph::assemble(nodes, outputs, Vec::new())
    }

    /// A graph from all its parts, verified.
    pub(crate) fn assemble(
        nodes: Vec<Node>,
        outputs: Vec<Output>,
        writes: Vec<Output>,
    ) -> Result<Graph, VerifyError> {
        let graph = Graph {
            nodes,
            outputs,
            writes,
        };
        graph.verify()?;
        Ok(graph)
    }

    /// This graph writing `writes` (each the new value of the state it names) instead of
    /// its own, verified.
    ///
    /// ```
    /// use rlx::prelude::*;
    /// use rlx::ir::Output;
    /// let mut b = GraphBuilder::new();
    /// let count = b.state("count", DType::F32, [1])?;
    /// let one = b.scalar(1.0, DType::F32);
    /// let next = b.add(count, one)?;
    /// b.output("count", count)?;
    /// let g = b.finish()?.with_writes(vec![Output { name: "count".into(), node: next }])?;
    /// assert_eq!(g.writes()[0].node, next);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_writes(self, writes: Vec<Output>) -> Result<Graph, VerifyError> {
        let graph = Graph { writes, ..self };
        graph.verify()?;
        Ok(graph)
    }

    /// Takes the graph apart into its nodes, outputs and writes, e.g. to rewrite it and
    /// rebuild it with [`Graph::from_parts`] and [`Graph::with_writes`].
    pub fn into_parts(self) -> (Vec<Node>, Vec<Output>, Vec<Output>) {
        (self.nodes, self.outputs, self.writes)
    }

    /// Every node, in topological order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node `id`, if it exists.
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Ids and nodes, in order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (NodeId::new(i), n))
    }

    /// For each node, the nodes that take it as an operand, in graph order (a node listed
    /// once per operand position it fills).
    ///
    /// ```
    /// use rlx::prelude::*;
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [2])?;
    /// let y = b.binary(BinaryOp::Mul, x, x)?;
    /// b.output("y", y)?;
    /// let g = b.finish()?;
    /// assert_eq!(g.users()[x.index()], vec![y, y]);
    /// assert!(g.users()[y.index()].is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn users(&self) -> Vec<Vec<NodeId>> {
        let mut users = vec![Vec::new(); self.nodes.len()];
        for (id, node) in self.iter() {
            for input in &node.inputs {
                users[input.index()].push(id);
            }
        }
        users
    }

    /// Per node: whether the graph returns or writes it (passes keep such values stored).
    pub(crate) fn returned(&self) -> Vec<bool> {
        let mut returned = vec![false; self.nodes.len()];
        for output in self.outputs.iter().chain(&self.writes) {
            returned[output.node.index()] = true;
        }
        returned
    }

    /// Named outputs, in declaration order.
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    /// The state writes: for each written state (by name), the node whose value it holds
    /// once a run completes. Every read of a state in a run sees its value from before the
    /// run; a state no write names keeps its value.
    pub fn writes(&self) -> &[Output] {
        &self.writes
    }

    /// Input nodes, in order of creation.
    pub fn inputs(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.iter().filter(|(_, n)| n.op == Op::Input)
    }

    /// Param nodes, in order of creation.
    pub fn params(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.iter().filter(|(_, n)| n.op == Op::Param)
    }

    /// State nodes, in order of creation.
    pub fn states(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.iter().filter(|(_, n)| n.op == Op::State)
    }

    /// The state named `name`.
    pub fn state(&self, name: &str) -> Option<NodeId> {
        self.find(Op::State, name)
    }

    /// The input named `name`.
    pub fn input(&self, name: &str) -> Option<NodeId> {
        self.find(Op::Input, name)
    }

    /// The param named `name`.
    pub fn param(&self, name: &str) -> Option<NodeId> {
        self.find(Op::Param, name)
    }

    fn find(&self, kind: Op, name: &str) -> Option<NodeId> {
        self.iter()
            .find(|(_, n)| n.op == kind && n.name.as_deref() == Some(name))
            .map(|(id, _)| id)
    }

    /// The symbols of the graph's inputs: the dims to bind when it runs.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = self
            .inputs()
            .flat_map(|(_, n)| n.ty.shape.symbols())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

impl Index<NodeId> for Graph {
    type Output = Node;
    fn index(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }
}

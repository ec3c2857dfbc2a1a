//! Nodes of a graph.

use std::fmt;
use std::panic::Location;

use super::shape::TensorType;
use crate::ops::Op;

/// The index of a node in its [`Graph`](crate::ir::Graph). Printed as `%3`.
///
/// ```
/// use rlx::ir::NodeId;
/// assert_eq!(NodeId::new(3).to_string(), "%3");
/// assert_eq!(NodeId::new(3).index(), 3);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The id of the node at `index`.
    ///
    /// Panics if `index` exceeds `u32::MAX`; graphs are limited to 2^32 nodes.
    pub fn new(index: usize) -> NodeId {
        NodeId(u32::try_from(index).expect("graphs hold at most 2^32 nodes"))
    }

    /// Position in the graph's node list.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One operation applied to earlier nodes, with the type it produces.
///
/// ```
/// use rlx::ir::{DType, Node, Op, TensorType};
/// let x = Node::new(Op::Input, vec![], TensorType::new(DType::F32, [2])).named("x");
/// assert_eq!(x.name.as_deref(), Some("x"));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What the node computes.
    pub op: Op,
    /// Operands, all earlier in the graph.
    pub inputs: Vec<NodeId>,
    /// The type it produces; the verifier checks it against [`Op::infer`].
    pub ty: TensorType,
    /// Required for inputs and params (their binding key); an optional label otherwise.
    pub name: Option<String>,
    /// Where in the user's code the node was made, when known.
    pub origin: Option<&'static Location<'static>>,
}

impl Node {
    /// An unnamed node without an origin.
    pub fn new(op: Op, inputs: Vec<NodeId>, ty: TensorType) -> Node {
        Node {
            op,
            inputs,
            ty,
            name: None,
            origin: None,
        }
    }

    /// The node with a name.
    pub fn named(mut self, name: impl Into<String>) -> Node {
        self.name = Some(name.into());
        self
    }
}

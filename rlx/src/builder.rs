//! The untyped graph builder: the layer typed handles sit on.
//!
//! Every method is `#[track_caller]`, so a node remembers the user's `file:line` and a
//! rejected op reports it:
//!
//! ```
//! use rlx::prelude::*;
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", DType::F32, [Dim::sym("batch"), Dim::from(384)])?;
//! let w = b.param("w", DType::F32, [385, 1536])?;
//! let err = b.matmul(x, w).unwrap_err();
//! assert_eq!(err.op(), "matmul");
//! assert!(err.to_string().ends_with(
//!     "`matmul` on (f32[batch,384], f32[385,1536]): inner dims 384 and 385 differ"
//! ));
//! assert_eq!(err.location().file(), file!());
//! # Ok::<(), BuildError>(())
//! ```

use crate::ir::{Cast, Concat, MatMul, Permute, Reduce, Reshape};
use std::collections::HashSet;
use std::fmt;
use std::panic::Location;

use crate::ir::{
    BinaryOp, CompareOp, ConstantData, DType, Graph, InferError, Node, NodeId, Op, Output,
    ReduceOp, Scalar, Shape, TensorType, UnaryOp, VerifyError,
};

/// Why the builder refused a request.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BuildErrorKind {
    /// Shape or dtype inference rejected the operands.
    #[error(transparent)]
    Infer(#[from] InferError),
    /// An operand id does not belong to this builder.
    #[error("operand {0} does not exist in this graph")]
    UnknownNode(NodeId),
    /// An input, param or output name is taken.
    #[error("an {kind} named {name:?} already exists")]
    DuplicateName {
        /// `input`, `param` or `output`.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// A state is written twice in one graph.
    #[error("state {name:?} is written twice; a run leaves one value in it")]
    WrittenTwice {
        /// The state.
        name: String,
    },
    /// The finished graph failed verification.
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

/// A rejected builder call: the op, its operand types, where it was called and why.
///
/// Displays like a compiler diagnostic:
/// `src/model.rs:12:9: `matmul` on (f32[batch,384], f32[385,1536]): inner dims 384 and 385 differ`.
/// The details are boxed so that `Result<NodeId, BuildError>` stays one pointer wide.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildError(Box<Details>);

#[derive(Clone, Debug, PartialEq)]
struct Details {
    op: String,
    operands: Vec<TensorType>,
    location: &'static Location<'static>,
    kind: BuildErrorKind,
}

impl BuildError {
    /// An error at the caller's location (every builder error and the typed layer's own).
    #[track_caller]
    pub(crate) fn at_caller(
        op: String,
        operands: Vec<TensorType>,
        kind: BuildErrorKind,
    ) -> BuildError {
        BuildError(Box::new(Details {
            op,
            operands,
            location: Location::caller(),
            kind,
        }))
    }

    /// The op with its attributes, e.g. `matmul` or `softmax[axis=3]`.
    pub fn op(&self) -> &str {
        &self.0.op
    }

    /// Types of the operands that were given.
    pub fn operands(&self) -> &[TensorType] {
        &self.0.operands
    }

    /// Where the rejected call was made.
    pub fn location(&self) -> &'static Location<'static> {
        self.0.location
    }

    /// Why it was rejected.
    pub fn kind(&self) -> &BuildErrorKind {
        &self.0.kind
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.0;
        write!(f, "{}: `{}`", d.location, d.op)?;
        if !d.operands.is_empty() {
            let list: Vec<String> = d.operands.iter().map(ToString::to_string).collect();
            write!(f, " on ({})", list.join(", "))?;
        }
        write!(f, ": {}", d.kind)
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0.kind)
    }
}

/// Builds a [`Graph`] one node at a time, inferring and checking every node's type.
///
/// [`GraphBuilder::op`] appends any [`Op`]; the other methods are shorthands for common ones.
///
/// ```
/// use rlx::prelude::*;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("batch"), Dim::from(8)])?;
/// let w = b.param("w", DType::F32, [8, 4])?;
/// let h = b.matmul(x, w)?;
/// let y = b.op(Op::Softmax(rlx::ir::Softmax { axis: 1, log: false }), &[h])?;
/// b.output("probs", y)?;
/// let graph = b.finish()?;
/// assert_eq!(graph[y].ty.to_string(), "f32[batch,4]");
/// # Ok::<(), BuildError>(())
/// ```
#[derive(Default)]
pub struct GraphBuilder {
    nodes: Vec<Node>,
    outputs: Vec<Output>,
    writes: Vec<Output>,
    input_names: HashSet<String>,
    param_names: HashSet<String>,
    state_names: HashSet<String>,
}

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> GraphBuilder {
        GraphBuilder::default()
    }

    /// A builder that continues `graph`: its nodes keep their ids, its outputs stay
    /// declared, and new nodes may use any of them.
    ///
    /// ```
    /// use rlx::prelude::*;
    /// let mut b = GraphBuilder::new();
    /// let x = b.input("x", DType::F32, [3])?;
    /// b.output("x", x)?;
    /// let mut more = GraphBuilder::from_graph(b.finish()?);
    /// let y = more.add(x, x)?;
    /// more.output("twice", y)?;
    /// assert_eq!(more.finish()?.outputs().len(), 2);
    /// # Ok::<(), BuildError>(())
    /// ```
    pub fn from_graph(graph: Graph) -> GraphBuilder {
        let (nodes, outputs, writes) = graph.into_parts();
        let names = |op: &Op| -> HashSet<String> {
            nodes
                .iter()
                .filter(|n| &n.op == op)
                .filter_map(|n| n.name.clone())
                .collect()
        };
        GraphBuilder {
            input_names: names(&Op::Input),
            param_names: names(&Op::Param),
            state_names: names(&Op::State),
            nodes,
            outputs,
            writes,
        }
    }

    /// The type of a node made by this builder.
    pub fn ty(&self, id: NodeId) -> Option<&TensorType> {
        self.nodes.get(id.index()).map(|n| &n.ty)
    }

    /// Nodes made so far.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if no node was made yet.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    #[track_caller]
    fn error(&self, op: String, operands: &[NodeId], kind: BuildErrorKind) -> BuildError {
        let operands = operands
            .iter()
            .filter_map(|i| self.ty(*i).cloned())
            .collect();
        BuildError::at_caller(op, operands, kind)
    }

    #[track_caller]
    fn push(&mut self, node: Node) -> NodeId {
        let id = NodeId::new(self.nodes.len());
        self.nodes.push(Node {
            origin: Some(Location::caller()),
            ..node
        });
        id
    }

    #[track_caller]
    fn leaf(
        &mut self,
        op: Op,
        name: &str,
        dtype: DType,
        shape: Shape,
    ) -> Result<NodeId, BuildError> {
        let (names, kind) = match op {
            Op::Input => (&mut self.input_names, "input"),
            Op::State => (&mut self.state_names, "state"),
            _ => (&mut self.param_names, "param"),
        };
        if !names.insert(name.to_string()) {
            let kind = BuildErrorKind::DuplicateName {
                kind,
                name: name.to_string(),
            };
            return Err(self.error(op.to_string(), &[], kind));
        }
        Ok(self.push(Node::new(op, vec![], TensorType::new(dtype, shape)).named(name)))
    }

    /// A graph input named `name`, supplied on every run.
    #[track_caller]
    pub fn input(
        &mut self,
        name: &str,
        dtype: DType,
        shape: impl Into<Shape>,
    ) -> Result<NodeId, BuildError> {
        self.leaf(Op::Input, name, dtype, shape.into())
    }

    /// A weight named `name`, bound once per executable.
    #[track_caller]
    pub fn param(
        &mut self,
        name: &str,
        dtype: DType,
        shape: impl Into<Shape>,
    ) -> Result<NodeId, BuildError> {
        self.leaf(Op::Param, name, dtype, shape.into())
    }

    /// Persistent state named `name` (a cache, a running statistic, a weight a training
    /// step updates): read at the start of each run; [`GraphBuilder::write`] gives the value
    /// it holds after the run. Its shape must be static when the graph compiles.
    ///
    /// ```
    /// use rlx::prelude::*;
    /// let mut b = GraphBuilder::new();
    /// let total = b.state("total", DType::F32, [3])?;
    /// let x = b.input("x", DType::F32, [3])?;
    /// let sum = b.add(total, x)?;
    /// b.write("total", sum)?;
    /// b.output("sum", sum)?;
    /// let g = b.finish()?;
    /// assert_eq!(g.state("total"), Some(total));
    /// # Ok::<(), BuildError>(())
    /// ```
    #[track_caller]
    pub fn state(
        &mut self,
        name: &str,
        dtype: DType,
        shape: impl Into<Shape>,
    ) -> Result<NodeId, BuildError> {
        self.leaf(Op::State, name, dtype, shape.into())
    }

    /// Makes `node` the value the state `name` holds once a run completes. Reads of the
    /// state in the same run still see its value from before; a state is written at most
    /// once per graph, with a value of its own type.
    #[track_caller]
    pub fn write(&mut self, name: &str, node: NodeId) -> Result<(), BuildError> {
        let op = format!("write[{name:?}]");
        if node.index() >= self.nodes.len() {
            return Err(self.error(op, &[], BuildErrorKind::UnknownNode(node)));
        }
        let state = self
            .nodes
            .iter()
            .find(|n| n.op == Op::State && n.name.as_deref() == Some(name));
        let Some(state) = state else {
            let kind = VerifyError::UnknownState {
                name: name.to_string(),
            };
            return Err(self.error(op, &[node], kind.into()));
        };
        if state.ty != self.nodes[node.index()].ty {
            let kind = VerifyError::WriteType {
                name: name.to_string(),
                state: state.ty.clone(),
                value: self.nodes[node.index()].ty.clone(),
            };
            return Err(self.error(op, &[node], kind.into()));
        }
        if self.writes.iter().any(|w| w.name == name) {
            let kind = BuildErrorKind::WrittenTwice {
                name: name.to_string(),
            };
            return Err(self.error(op, &[node], kind));
        }
        self.writes.push(Output {
            name: name.to_string(),
            node,
        });
        Ok(())
    }

    /// A constant tensor embedded in the graph.
    #[track_caller]
    pub fn constant(&mut self, data: ConstantData) -> NodeId {
        let ty = data.ty().clone();
        self.push(Node::new(Op::Constant(data), vec![], ty))
    }

    /// A rank-0 constant of `dtype`; broadcasts against any shape.
    #[track_caller]
    pub fn scalar(&mut self, value: impl Into<Scalar>, dtype: DType) -> NodeId {
        self.constant(ConstantData::scalar(value, dtype))
    }

    /// Appends `op` applied to `inputs` after inferring its type.
    #[track_caller]
    pub fn op(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId, BuildError> {
        if let Some(bad) = inputs.iter().find(|i| i.index() >= self.nodes.len()) {
            return Err(self.error(op.to_string(), inputs, BuildErrorKind::UnknownNode(*bad)));
        }
        if op.is_leaf() {
            let kind = InferError::Attribute(format!(
                "`{}` nodes are made with input(), param() or constant()",
                op.name()
            ));
            return Err(self.error(op.to_string(), inputs, kind.into()));
        }
        let types: Vec<TensorType> = inputs
            .iter()
            .map(|i| self.nodes[i.index()].ty.clone())
            .collect();
        match op.infer(&types) {
            Ok(ty) => Ok(self.push(Node::new(op, inputs.to_vec(), ty))),
            Err(e) => Err(self.error(op.to_string(), inputs, e.into())),
        }
    }

    /// Labels node `id` for the printers. Inputs and params keep the name they were
    /// declared with (it is their binding key); for them, and for unknown ids, this returns
    /// `false` and changes nothing.
    pub fn set_label(&mut self, id: NodeId, label: impl Into<String>) -> bool {
        match self.nodes.get_mut(id.index()) {
            Some(node) if !matches!(node.op, Op::Input | Op::Param | Op::State) => {
                node.name = Some(label.into());
                true
            }
            _ => false,
        }
    }

    /// `kind(x)`.
    #[track_caller]
    pub fn unary(&mut self, kind: UnaryOp, x: NodeId) -> Result<NodeId, BuildError> {
        self.op(Op::Unary(kind), &[x])
    }

    /// `kind(a, b)` with broadcasting.
    #[track_caller]
    pub fn binary(&mut self, kind: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId, BuildError> {
        self.op(Op::Binary(kind), &[a, b])
    }

    /// `a + b` with broadcasting.
    #[track_caller]
    pub fn add(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, BuildError> {
        self.binary(BinaryOp::Add, a, b)
    }

    /// `a * b` with broadcasting.
    #[track_caller]
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, BuildError> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// Elementwise comparison to `bool`.
    #[track_caller]
    pub fn compare(&mut self, kind: CompareOp, a: NodeId, b: NodeId) -> Result<NodeId, BuildError> {
        self.op(Op::Compare(kind), &[a, b])
    }

    /// `cond ? a : b` elementwise.
    #[track_caller]
    pub fn select(&mut self, cond: NodeId, a: NodeId, b: NodeId) -> Result<NodeId, BuildError> {
        self.op(Op::Where, &[cond, a, b])
    }

    /// `x` converted to `to`.
    #[track_caller]
    pub fn cast(&mut self, x: NodeId, to: DType) -> Result<NodeId, BuildError> {
        self.op(Op::Cast(Cast { to }), &[x])
    }

    /// `a @ b` (batched, broadcasting batch dims).
    #[track_caller]
    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, BuildError> {
        self.op(
            Op::MatMul(MatMul {
                transpose_a: false,
                transpose_b: false,
            }),
            &[a, b],
        )
    }

    /// Reduction of `x` over `axes`.
    #[track_caller]
    pub fn reduce(
        &mut self,
        op: ReduceOp,
        x: NodeId,
        axes: &[usize],
        keep_dims: bool,
    ) -> Result<NodeId, BuildError> {
        self.op(
            Op::Reduce(Reduce {
                op,
                axes: axes.to_vec(),
                keep_dims,
            }),
            &[x],
        )
    }

    /// Softmax of `x` along `axis`.
    #[track_caller]
    pub fn softmax(&mut self, x: NodeId, axis: usize) -> Result<NodeId, BuildError> {
        self.op(Op::Softmax(crate::ir::Softmax { axis, log: false }), &[x])
    }

    /// `x` with new dims.
    #[track_caller]
    pub fn reshape(&mut self, x: NodeId, shape: impl Into<Shape>) -> Result<NodeId, BuildError> {
        self.op(
            Op::Reshape(Reshape {
                shape: shape.into(),
            }),
            &[x],
        )
    }

    /// `x` with axes permuted.
    #[track_caller]
    pub fn permute(&mut self, x: NodeId, perm: &[usize]) -> Result<NodeId, BuildError> {
        self.op(
            Op::Permute(Permute {
                perm: perm.to_vec(),
            }),
            &[x],
        )
    }

    /// `x` with axes `a` and `b` swapped (a [`Op::Permute`]).
    #[track_caller]
    pub fn transpose(&mut self, x: NodeId, a: usize, b: usize) -> Result<NodeId, BuildError> {
        let rank = self.ty(x).map_or(0, TensorType::rank);
        if let Some(axis) = [a, b].into_iter().find(|axis| *axis >= rank) {
            let kind = InferError::Axis { axis, rank };
            return Err(self.error(format!("transpose[{a}, {b}]"), &[x], kind.into()));
        }
        let mut perm: Vec<usize> = (0..rank).collect();
        perm.swap(a, b);
        self.permute(x, &perm)
    }

    /// Concatenation of `xs` along `axis`.
    #[track_caller]
    pub fn concat(&mut self, xs: &[NodeId], axis: usize) -> Result<NodeId, BuildError> {
        self.op(Op::Concat(Concat { axis }), xs)
    }

    /// Declares `node` as the output `name`.
    #[track_caller]
    pub fn output(&mut self, name: &str, node: NodeId) -> Result<(), BuildError> {
        let op = format!("output[{name:?}]");
        if node.index() >= self.nodes.len() {
            return Err(self.error(op, &[], BuildErrorKind::UnknownNode(node)));
        }
        if self.outputs.iter().any(|o| o.name == name) {
            let kind = BuildErrorKind::DuplicateName {
                kind: "output",
                name: name.to_string(),
            };
            return Err(self.error(op, &[node], kind));
        }
        self.outputs.push(Output {
            name: name.to_string(),
            node,
        });
        Ok(())
    }

    /// The verified graph.
    #[track_caller]
    pub fn finish(self) -> Result<Graph, BuildError> {
        match Graph::assemble(self.nodes, self.outputs, self.writes) {
            Ok(graph) => Ok(graph),
            Err(e) => Err(BuildError::at_caller("finish".into(), vec![], e.into())),
        }
    }
}

//! Errors of compiling and running graphs.

use std::fmt;
use std::panic::Location;

use crate::ir::{DType, EvalDimError, InferError, Node, NodeId, Shape, VerifyError};

/// Why memory was refused: over `limit`, or (`None`) not to be had from the allocator.
fn refusal(limit: Option<usize>) -> String {
    match limit {
        Some(limit) => format!("over the limit of {limit}"),
        None => "which could not be allocated".to_string(),
    }
}

/// Which kind of tensor a caller supplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// A graph input, given on every run.
    Input,
    /// A weight, bound with `set_weight`.
    Weight,
    /// A state, held by a [`Context`](crate::backend::Context).
    State,
}

impl fmt::Display for TensorRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TensorRole::Input => "input",
            TensorRole::Weight => "weight",
            TensorRole::State => "state",
        })
    }
}

/// The node a run-time failure happened at: plain data, so kernels carry it for free.
///
/// ```
/// use rlx::backend::NodeSite;
/// use rlx::ir::{DType, Node, NodeId, Op, TensorType};
/// let node = Node::new(Op::Solve, vec![], TensorType::new(DType::F32, [2, 2]));
/// let site = NodeSite::of(NodeId::new(4), &node);
/// assert_eq!(site.to_string(), "%4 `solve`");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSite {
    /// The node's id in the graph the backend runs (after its optimization passes).
    pub id: NodeId,
    /// The op's name.
    pub op: &'static str,
    /// Where the user's code built the node, when known.
    pub origin: Option<&'static Location<'static>>,
}

impl NodeSite {
    /// The site of node `id`.
    pub fn of(id: NodeId, node: &Node) -> NodeSite {
        NodeSite {
            id,
            op: node.op.name(),
            origin: node.origin,
        }
    }
}

impl fmt::Display for NodeSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} `{}`", self.id, self.op)?;
        if let Some(origin) = self.origin {
            write!(f, " (built at {origin})")?;
        }
        Ok(())
    }
}

/// Why a node is invalid once its runtime dims are bound.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BindingFailure {
    /// A dim of the node's type evaluates to a negative size.
    #[error(transparent)]
    Dim(#[from] EvalDimError),
    /// The op's rules reject the bound operand shapes (a slice past the end, `k` larger
    /// than the axis, ...).
    #[error(transparent)]
    Infer(#[from] InferError),
    /// The node has more axes than the backend supports.
    #[error("rank {rank} exceeds the {backend} limit of {limit}")]
    Rank {
        /// The node's rank.
        rank: usize,
        /// The backend's limit.
        limit: usize,
        /// The backend.
        backend: &'static str,
    },
    /// The tensor's byte count overflows the address space.
    #[error("a {dtype} tensor of {dims:?} does not fit in memory")]
    TooLarge {
        /// Its dtype.
        dtype: DType,
        /// Its bound dims.
        dims: Vec<usize>,
    },
    /// The op's rules give another shape than the node's declared type.
    #[error("bound shape {inferred} differs from {dims:?}")]
    ShapeDiffers {
        /// What the op's rules give.
        inferred: Shape,
        /// The node's declared type, bound.
        dims: Vec<usize>,
    },
}

/// Why a graph could not be compiled.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// The backend has no kernel for these ops (each listed once, with its attributes).
    #[error("the {backend} backend does not support: {}", ops.join(", "))]
    Unsupported {
        /// The backend's name.
        backend: &'static str,
        /// The unsupported ops.
        ops: Vec<String>,
    },
    /// A state has a symbolic shape; a context holds each state at one fixed size.
    #[error("state {name:?} has the symbolic shape {shape}; states need static shapes")]
    SymbolicState {
        /// The state.
        name: String,
        /// Its declared shape.
        shape: Shape,
    },
    /// A param has a symbolic shape; weights must have static shapes.
    #[error("param {name:?} has the symbolic shape {shape}; weights need static shapes")]
    SymbolicParam {
        /// The param.
        name: String,
        /// Its declared shape.
        shape: Shape,
    },
    /// The backend's library failed while preparing the graph.
    #[error("the {backend} backend failed: {message}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What its library reported.
        message: String,
    },
    /// The device asked for is not there (no GPU, or a library built without GPU support).
    #[error("the {backend} backend has no {device} device here")]
    DeviceUnavailable {
        /// The backend's name.
        backend: &'static str,
        /// The device asked for.
        device: &'static str,
    },
    /// A node computes in a dtype its device has no kernels for (MLX has no float64 on
    /// GPUs).
    #[error(
        "node {node} computes in {dtype}, which the {backend} backend cannot run on its \
         {device}; compile for its CPU device or cast to a narrower dtype"
    )]
    DeviceDType {
        /// The backend's name.
        backend: &'static str,
        /// The device it compiles for.
        device: &'static str,
        /// The first such node.
        node: NodeSite,
        /// The dtype.
        dtype: DType,
    },
    /// The precision asked for is not the one this process computes in.
    #[error("the {backend} backend cannot compute in {asked} here: {reason}")]
    Precision {
        /// The backend's name.
        backend: &'static str,
        /// The precision asked for.
        asked: &'static str,
        /// Why, and what to change.
        reason: String,
    },
    /// The weights and constants need more memory than allowed (a backend's memory
    /// limit) or than the allocator could provide (`bytes` is `usize::MAX` when their size
    /// overflows).
    #[error("the weights and constants need {bytes} bytes, {}", refusal(*limit))]
    OutOfMemory {
        /// Bytes they would need.
        bytes: usize,
        /// The limit they exceed; `None` when the allocation itself failed.
        limit: Option<usize>,
    },
    /// The worker threads could not be started.
    #[error("cannot start worker threads: {0}")]
    Threads(String),
    /// A rewrite pass produced an invalid graph (a bug in the pass).
    #[error("pass `{pass}` produced an invalid graph: {source}")]
    Pass {
        /// The pass.
        pass: &'static str,
        /// What the verifier found.
        source: Box<VerifyError>,
    },
}

/// Why a run (or binding a weight) failed. Every variant names the tensor or dim at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    /// A graph input was not supplied.
    #[error("missing input {name:?}")]
    MissingInput {
        /// The input.
        name: String,
    },
    /// A supplied tensor matches no graph input.
    #[error("unknown input {name:?}; the graph's inputs are {known:?}")]
    UnknownInput {
        /// The name supplied.
        name: String,
        /// The graph's input names.
        known: Vec<String>,
    },
    /// A tensor has the wrong dtype.
    #[error("{kind} {name:?} has dtype {got}, expected {expected}")]
    DType {
        /// An input or a weight.
        kind: TensorRole,
        /// The tensor.
        name: String,
        /// Declared dtype.
        expected: DType,
        /// Supplied dtype.
        got: DType,
    },
    /// A tensor has the wrong number of axes. Checked before any dim is bound, so a rank
    /// mistake is never reported as a conflict between runtime dims.
    #[error("{kind} {name:?} has rank {} (shape {got:?}), expected rank {expected}", got.len())]
    Rank {
        /// An input or a weight.
        kind: TensorRole,
        /// The tensor.
        name: String,
        /// The declared rank.
        expected: usize,
        /// Supplied dims.
        got: Vec<usize>,
    },
    /// A tensor has the wrong shape.
    #[error("{kind} {name:?} has shape {got:?}, expected {expected}")]
    Shape {
        /// An input or a weight.
        kind: TensorRole,
        /// The tensor.
        name: String,
        /// Declared shape (with symbols, or their bound values).
        expected: String,
        /// Supplied dims.
        got: Vec<usize>,
    },
    /// A tensor's byte count does not match its dtype and shape.
    #[error("{kind} {name:?} has {got} bytes, but {dtype}{shape:?} needs {expected}")]
    Bytes {
        /// An input or a weight.
        kind: TensorRole,
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: DType,
        /// Its dims.
        shape: Vec<usize>,
        /// Bytes the dtype and dims need.
        expected: usize,
        /// Bytes supplied.
        got: usize,
    },
    /// A runtime dim has no value: it was not given and no input has it as a whole axis.
    #[error("runtime dim `{symbol}` is not bound; pass it in `dims`")]
    UnboundSymbol {
        /// The symbol.
        symbol: String,
    },
    /// A dim given in `dims` is not a dim of the graph.
    #[error("`{symbol}` is not a runtime dim of this graph; its dims are {known:?}")]
    UnknownSymbol {
        /// The name given.
        symbol: String,
        /// The graph's symbols.
        known: Vec<String>,
    },
    /// Two sources disagree on a runtime dim.
    #[error(
        "runtime dim `{symbol}` is {first} from {first_source} but {second} from {second_source}"
    )]
    InconsistentSymbol {
        /// The symbol.
        symbol: String,
        /// The first value seen.
        first: usize,
        /// Where it came from (`dims` or `input "x" axis 0`).
        first_source: String,
        /// The conflicting value.
        second: usize,
        /// Where that came from.
        second_source: String,
    },
    /// A param has not been bound with `set_weight`.
    #[error("weight {name:?} is not bound")]
    MissingWeight {
        /// The param.
        name: String,
    },
    /// The graph returned another number of outputs than the caller expects.
    #[error("the graph has {got} outputs, expected {expected}")]
    OutputCount {
        /// Outputs expected.
        expected: usize,
        /// Outputs the graph has.
        got: usize,
    },
    /// A binding of the runtime dims needs more working memory than allowed (a backend's
    /// memory limit) or than the allocator could provide. Nothing ran.
    #[error("these runtime dims need {bytes} bytes of working memory, {}", refusal(*limit))]
    OutOfMemory {
        /// Bytes the run would need.
        bytes: usize,
        /// The limit it exceeds; `None` when the allocation itself failed.
        limit: Option<usize>,
    },
    /// Binding weights while runs were in flight needed a second copy of the weights (the
    /// runs keep the first), and the allocator could not provide it. Nothing changed.
    #[error(
        "binding weights while runs are in flight needs a copy of {bytes} bytes, which could not be allocated"
    )]
    WeightsOutOfMemory {
        /// Bytes of the copy.
        bytes: usize,
    },
    /// An output index past the graph's outputs.
    #[error("output {index} asked for, but the graph has {count} outputs")]
    UnknownOutput {
        /// The index given.
        index: usize,
        /// How many outputs the graph has.
        count: usize,
    },
    /// The graph has states, so it runs in a [`Context`](crate::backend::Context).
    #[error(
        "the graph has states ({}); run it in a context (`Executable::new_context`, `run_in`)",
        states.join(", ")
    )]
    NeedsContext {
        /// The graph's states.
        states: Vec<String>,
    },
    /// The context holds other states than the graph declares (names, dtypes, dims or
    /// order), or was made by another backend or for another device.
    #[error("this context does not hold this graph's states (or belongs to another backend)")]
    ForeignContext,
    /// A state name given to a context names no state of its graph.
    #[error("unknown state {name:?}; the graph's states are {known:?}")]
    UnknownState {
        /// The name given.
        name: String,
        /// The graph's states.
        known: Vec<String>,
    },
    /// `set_weight` named no param of the graph.
    #[error("unknown weight {name:?}")]
    UnknownWeight {
        /// The name given.
        name: String,
    },
    /// The bound dims make a node invalid (a slice past the end, a negative size, ...).
    #[error("with {bindings}: {at}: {reason}")]
    Binding {
        /// The bound values, e.g. `batch=2, seq=7`.
        bindings: String,
        /// The node.
        at: NodeSite,
        /// Why (boxed: it is large and rare).
        reason: Box<BindingFailure>,
    },
    /// A matrix passed to `solve` is singular.
    #[error("{at}: the matrix is singular")]
    Singular {
        /// The solve node.
        at: NodeSite,
    },
    /// A custom op's kernel failed.
    #[error("custom op {name:?} failed: {message}")]
    Custom {
        /// The op's registry name.
        name: String,
        /// The kernel's message.
        message: String,
    },
    /// The backend's library failed (for MLX: the C++ exception's message, with the node
    /// it was building when the failure came at op construction).
    #[error("the {backend} backend failed: {message}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What its library reported.
        message: String,
    },
    /// An index operand points outside the indexed axis.
    #[error("{at}: index {index} is out of range for an axis of size {size}")]
    IndexOutOfRange {
        /// The gather or scatter node.
        at: NodeSite,
        /// The offending index.
        index: i64,
        /// Size of the axis.
        size: usize,
    },
    /// An offset of a dynamic slice or slice update puts its window outside the axis.
    #[error("{at}: offset {offset} puts a window of {window} outside an axis of size {size}")]
    WindowOutOfRange {
        /// The dynamic slice or slice update node.
        at: NodeSite,
        /// The offending offset.
        offset: i64,
        /// The window's size along the axis.
        window: usize,
        /// Size of the axis.
        size: usize,
    },
}

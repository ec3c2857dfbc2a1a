//! Errors of compiling and running graphs.

use crate::ir::{DType, Shape, VerifyError};

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
        /// `input` or `weight`.
        kind: &'static str,
        /// The tensor.
        name: String,
        /// Declared dtype.
        expected: DType,
        /// Supplied dtype.
        got: DType,
    },
    /// A tensor has the wrong shape.
    #[error("{kind} {name:?} has shape {got:?}, expected {expected}")]
    Shape {
        /// `input` or `weight`.
        kind: &'static str,
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
        /// `input` or `weight`.
        kind: &'static str,
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
    /// `set_weight` named no param of the graph.
    #[error("unknown weight {name:?}")]
    UnknownWeight {
        /// The name given.
        name: String,
    },
    /// The bound dims make a node invalid (a slice past the end, a negative size, ...).
    #[error("with {bindings}: {node}: {reason}")]
    Binding {
        /// The bound values, e.g. `batch=2, seq=7`.
        bindings: String,
        /// The node, its op and where it was built.
        node: String,
        /// Why.
        reason: String,
    },
    /// A matrix passed to `solve` is singular.
    #[error("{op}: the matrix is singular")]
    Singular {
        /// The op with its attributes.
        op: String,
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
    #[error("{op}: index {index} is out of range for an axis of size {size}")]
    IndexOutOfRange {
        /// The op with its attributes.
        op: String,
        /// The offending index.
        index: i64,
        /// Size of the axis.
        size: usize,
    },
}

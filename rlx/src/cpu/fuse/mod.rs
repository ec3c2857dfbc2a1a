//! The CPU's fusions: which nodes of a graph one kernel computes together.
//!
//! Fusion is this backend's business, not the IR's: the graph keeps its ops, and a side
//! table says, per node, whether it runs as itself, is computed inside a later fused
//! node, or is that fused node. Node ids stay the graph's, so the planner, the statics and
//! the custom kernels index both alike.
//!
//! - [`matmul`]: a matmul with the bias add, activation and residual add that alone
//!   consume it, in the GEMM's row epilogue.
//! - [`elementwise`]: chains of elementwise float ops in one pass over memory.
//! - [`attention`]: an attention reading int8 key or value rows and their scales in
//!   place.
//! - [`products`]: block products of one input (q/k/v, gate/up) in one kernel.

mod attention;
mod elementwise;
mod matmul;
pub(crate) mod products;

use std::fmt;

use crate::ir::{BinaryOp, Graph, NodeId, UnaryOp};

/// A value one step of a fused elementwise chain reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ElementwiseArg {
    /// Operand `i` of the fused node.
    Operand(usize),
    /// The result of step `i`, an earlier step.
    Step(usize),
}

/// One step of a fused elementwise chain: an elementwise float op of earlier values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ElementwiseStep {
    /// `f(x)`.
    Unary(UnaryOp, ElementwiseArg),
    /// `f(a, b)`.
    Binary(BinaryOp, ElementwiseArg, ElementwiseArg),
}

impl ElementwiseStep {
    /// Most operands plus steps one chain may have: the kernel keeps a block of each in
    /// fast memory.
    pub(crate) const MAX_VALUES: usize = 24;

    fn name(&self) -> &'static str {
        match self {
            ElementwiseStep::Unary(kind, _) => kind.name(),
            ElementwiseStep::Binary(kind, _, _) => kind.name(),
        }
    }
}

/// What a fused matmul does to its product before storing it:
/// `activation(a·b + bias) + residual`, each part optional.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub(crate) struct MatMulEpilogue {
    /// Adds a `[N]` operand to every row.
    pub bias: bool,
    /// Applies an elementwise function of floats.
    pub activation: Option<UnaryOp>,
    /// Adds an operand of the output's type (a residual connection).
    pub residual: bool,
}

/// How the CPU computes one node of a graph.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Fusion {
    /// Inside the fused node that consumes it: never stored.
    Absorbed,
    /// The last node of a matmul chain: `activation(a·b + bias) + residual`. Operands:
    /// `a`, `b`, then the bias and the residual as present.
    MatMul {
        transpose_a: bool,
        transpose_b: bool,
        epilogue: MatMulEpilogue,
        operands: Vec<NodeId>,
    },
    /// The last node of an elementwise chain. Operands each have the output's shape or
    /// are scalars; the last step's value is the node's.
    Elementwise {
        steps: Vec<ElementwiseStep>,
        operands: Vec<NodeId>,
    },
    /// An attention whose keys (`int8[0]`) or values (`int8[1]`) are int8 rows scaled back
    /// by a float32 scale per row. Operands: the attention's, with those rows in place of the
    /// float keys or values, then the scales of the keys and of the values as present.
    Attention {
        int8: [bool; 2],
        operands: Vec<NodeId>,
    },
    /// The last of several `block_matmul`s of one input (`members`, in order, this node
    /// last), computed together here, each into its own output. Operands: the input, then
    /// each member's weight.
    Products {
        members: Vec<NodeId>,
        operands: Vec<NodeId>,
    },
    /// A `block_matmul` stored as itself but computed by the later [`Fusion::Products`] node.
    ProductOf(NodeId),
}

impl Fusion {
    /// The name it is printed and profiled with.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Fusion::Absorbed => "absorbed",
            Fusion::MatMul { .. } => "fused_matmul",
            Fusion::Elementwise { .. } => "fused_elementwise",
            Fusion::Attention { .. } => "fused_attention",
            Fusion::Products { .. } => "joined_block_matmul",
            Fusion::ProductOf(_) => "block_matmul_joined_later",
        }
    }

    /// The values the fused node reads.
    pub(crate) fn operands(&self) -> &[NodeId] {
        match self {
            Fusion::Absorbed | Fusion::ProductOf(_) => &[],
            Fusion::MatMul { operands, .. }
            | Fusion::Elementwise { operands, .. }
            | Fusion::Attention { operands, .. }
            | Fusion::Products { operands, .. } => operands,
        }
    }
}

impl fmt::Display for Fusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut attrs: Vec<&str> = Vec::new();
        match self {
            Fusion::Absorbed | Fusion::Products { .. } => {}
            Fusion::ProductOf(node) => return write!(f, "{}[{node}]", self.name()),
            Fusion::MatMul {
                transpose_a,
                transpose_b,
                epilogue,
                ..
            } => {
                if *transpose_a {
                    attrs.push("transpose_a");
                }
                if *transpose_b {
                    attrs.push("transpose_b");
                }
                if epilogue.bias {
                    attrs.push("+bias");
                }
                if let Some(kind) = epilogue.activation {
                    attrs.push(kind.name());
                }
                if epilogue.residual {
                    attrs.push("+residual");
                }
            }
            Fusion::Elementwise { steps, .. } => {
                attrs.extend(steps.iter().map(ElementwiseStep::name));
            }
            Fusion::Attention { int8, .. } => {
                if int8[0] {
                    attrs.push("int8_keys");
                }
                if int8[1] {
                    attrs.push("int8_values");
                }
            }
        }
        if !attrs.is_empty() {
            write!(f, "[{}]", attrs.join(", "))?;
        }
        Ok(())
    }
}

/// Per node of `graph`: how the CPU computes it, `None` for as itself. Matmul epilogues
/// are fused first, then elementwise chains of what is left, then attentions over int8 rows
/// (which take back the chains that scaled those rows).
pub(crate) fn fuse(graph: &Graph) -> Vec<Option<Fusion>> {
    let mut fusions = vec![None; graph.len()];
    matmul::fuse(graph, &mut fusions);
    elementwise::fuse(graph, &mut fusions);
    attention::fuse(graph, &mut fusions);
    fusions
}

/// Marks every member of a chain but its last as absorbed and gives the last `fusion`.
fn record(fusions: &mut [Option<Fusion>], members: &[NodeId], fusion: Fusion) {
    if let Some((last, covered)) = members.split_last() {
        for member in covered {
            fusions[member.index()] = Some(Fusion::Absorbed);
        }
        fusions[last.index()] = Some(fusion);
    }
}

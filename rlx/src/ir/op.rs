//! What every op shares: printing, leaf tests, dim binding, and the small types ops hold
//! (masks, custom attributes, the kinds of a family).
//!
//! The vocabulary itself, [`Op`], is the one list in `rlx/src/ops/mod.rs` (`registry!`),
//! beside each op's module: kept deliberately small, composites built from it by the
//! frontends, elementwise families one op with a kind.

use std::fmt;

use crate::ops::Op;

pub use super::kinds::{
    ArgReduceOp, BinaryOp, CompareOp, PoolKind, ReduceOp, SortOutput, UnaryOp, UpsampleMode,
};

/// Which keys a query may attend to.
///
/// For `Causal` and `SlidingWindow` the query and key sequences are aligned at their ends:
/// query `i` of `Sq` sits at key position `i + Sk - Sq`, which is what a decoder with a
/// key/value cache needs (and plain causal masking when `Sq == Sk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionMask {
    /// Every query sees every key.
    None,
    /// A query sees keys at its own position and before.
    Causal,
    /// Causal, and only the last `window` positions (including its own).
    SlidingWindow(usize),
    /// An extra operand: `bool` (true = may attend) or an additive float mask in the dtype
    /// of the queries, broadcastable to `[.., Sq, Sk]`.
    Tensor,
}

/// A value in a custom op's attribute map.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{v:?}"),
            AttrValue::Str(v) => write!(f, "{v:?}"),
            AttrValue::Ints(v) => write!(f, "{v:?}"),
            AttrValue::Floats(v) => write!(f, "{v:?}"),
        }
    }
}

impl Op {
    /// True for the leaves: inputs, params, states and constants.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input | Op::Param | Op::State | Op::Constant(_))
    }

    /// True for the ops whose value is their first operand's bytes, unchanged: a reshape,
    /// and the identities that only cut gradients, mark checkpoints or order a value
    /// behind another. A backend may give such a node its operand's storage.
    ///
    /// ```
    /// use rlx::ir::Op;
    /// assert!(Op::Checkpoint.shares_first_operand());
    /// assert!(!Op::Softmax(rlx::ir::Softmax { axis: 0, log: false }).shares_first_operand());
    /// ```
    pub fn shares_first_operand(&self) -> bool {
        matches!(
            self,
            Op::Reshape(_) | Op::StopGradient | Op::Checkpoint | Op::After
        )
    }

    /// This op with the dims its attributes hold (reshape and broadcast targets, upsampling
    /// sizes, a custom op's declared output) replaced by `out`, the node's output dims
    /// once its runtime dims are bound; ops without dims in their attributes are returned
    /// unchanged. Backends re-check each node's rules on bound shapes with it.
    ///
    /// ```
    /// use rlx::ir::{Dim, Op, Shape};
    /// let op = Op::Reshape(rlx::ir::Reshape { shape: Shape::new([Dim::sym("batch"), Dim::Static(4)]) });
    /// assert_eq!(op.bind_dims(&[2, 4]), Op::Reshape(rlx::ir::Reshape { shape: Shape::from([2, 4]) }));
    /// ```
    pub fn bind_dims(&self, out: &[usize]) -> Op {
        self.primitive().bind_dims(out)
    }
}

/// Writes `name` then the non-default attributes as `[k=v, ...]`.
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let mut attrs: Vec<String> = Vec::new();
        self.primitive().attrs(&mut attrs);
        if !attrs.is_empty() {
            write!(f, "[{}]", attrs.join(", "))?;
        }
        Ok(())
    }
}

//! The graph being built, seen through typed handles.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

use super::element::Element;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{Graph, NodeId, Op};

/// Every error of one build, in the order the ops were written.
#[derive(Clone, Debug, PartialEq)]
pub struct BuildErrors(pub Vec<BuildError>);

impl fmt::Display for BuildErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "{n} error{} building the graph:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BuildErrors {}

/// A graph under construction. Handles borrow it for the brand lifetime `'g`, which is
/// unique to one [`build`] call: a handle cannot leave its closure or meet a handle of
/// another graph (both are compile errors).
///
/// Ops do not return `Result`. A rejected op records its error (op, operand shapes, the
/// caller's `file:line`) and yields a poisoned handle; ops on poisoned handles add no
/// further errors; [`build`] returns every recorded error at once.
pub struct Scope<'g> {
    builder: RefCell<GraphBuilder>,
    errors: RefCell<Vec<BuildError>>,
    // Invariant in 'g: the brand can neither grow nor shrink to match another graph's.
    _brand: PhantomData<fn(&'g ()) -> &'g ()>,
}

/// Builds a graph with typed handles.
///
/// ```
/// use rlx::typed::{Const, Tensor, build};
/// rlx::dims!(Batch);
///
/// let graph = build(|g| {
///     let x: Tensor<(Batch, Const<4>)> = g.input("x");
///     let w: Tensor<(Const<4>, Const<2>)> = g.param("w");
///     let y = x.matmul(w).relu();
///     g.output("y", y);
/// })?;
/// assert!(graph.to_string().contains("f32[batch,2] = relu"));
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
pub fn build(f: impl for<'g> FnOnce(&'g Scope<'g>)) -> Result<Graph, BuildErrors> {
    let scope = Scope {
        builder: RefCell::new(GraphBuilder::new()),
        errors: RefCell::new(Vec::new()),
        _brand: PhantomData,
    };
    f(&scope);
    // The brand keeps `scope` borrowed for its whole life, so its parts are taken out
    // through the cells rather than moved.
    let mut errors = scope.errors.take();
    let builder = scope.builder.replace(GraphBuilder::new());
    if errors.is_empty() {
        match builder.finish() {
            Ok(graph) => return Ok(graph),
            Err(e) => errors.push(e),
        }
    }
    Err(BuildErrors(errors))
}

impl<'g> Scope<'g> {
    /// A graph input named `name` of shape `S` and element type `E`.
    #[track_caller]
    pub fn input<S: Shape, E: Element>(&'g self, name: &str) -> Tensor<'g, S, E> {
        let id = self.leaf(true, name, E::DTYPE, S::ir());
        Tensor::from_id(self, id)
    }

    /// A weight named `name` (bound once per executable).
    #[track_caller]
    pub fn param<S: Shape, E: Element>(&'g self, name: &str) -> Tensor<'g, S, E> {
        let id = self.leaf(false, name, E::DTYPE, S::ir());
        Tensor::from_id(self, id)
    }

    /// Declares `tensor` as the output `name`.
    #[track_caller]
    pub fn output<S: Shape, E: Element>(&'g self, name: &str, tensor: Tensor<'g, S, E>) {
        if let Some(id) = tensor.id() {
            let result = self.builder.borrow_mut().output(name, id);
            self.record(result.err());
        }
    }

    #[track_caller]
    fn leaf(
        &self,
        input: bool,
        name: &str,
        dtype: crate::ir::DType,
        shape: crate::ir::Shape,
    ) -> Option<NodeId> {
        let mut b = self.builder.borrow_mut();
        let result = if input {
            b.input(name, dtype, shape)
        } else {
            b.param(name, dtype, shape)
        };
        drop(b);
        self.ok(result)
    }

    /// Appends `op` on `inputs`; `None` if an operand is poisoned or the op is rejected.
    #[track_caller]
    pub(crate) fn apply(&self, op: Op, inputs: &[Option<NodeId>]) -> Option<NodeId> {
        let ids: Option<Vec<NodeId>> = inputs.iter().copied().collect();
        let ids = ids?;
        let result = self.builder.borrow_mut().op(op, &ids);
        self.ok(result)
    }

    /// A scalar constant of dtype `dtype`.
    #[track_caller]
    pub(crate) fn scalar(
        &self,
        value: crate::ir::Scalar,
        dtype: crate::ir::DType,
    ) -> Option<NodeId> {
        Some(self.builder.borrow_mut().scalar(value, dtype))
    }

    /// Records an error the typed layer finds itself; returns the poisoned id.
    #[track_caller]
    pub(crate) fn reject(
        &self,
        op: &str,
        operand: Option<NodeId>,
        reason: String,
    ) -> Option<NodeId> {
        let operands = operand
            .and_then(|id| self.builder.borrow().ty(id).cloned())
            .into_iter()
            .collect();
        let kind = crate::builder::BuildErrorKind::Infer(crate::ir::InferError::Attribute(reason));
        self.record(Some(BuildError::at_caller(op.to_string(), operands, kind)));
        None
    }

    fn ok(&self, result: Result<NodeId, BuildError>) -> Option<NodeId> {
        match result {
            Ok(id) => Some(id),
            Err(e) => {
                self.record(Some(e));
                None
            }
        }
    }

    fn record(&self, error: Option<BuildError>) {
        if let Some(e) = error {
            self.errors.borrow_mut().push(e);
        }
    }
}

//! Typed states: a value the graph reads at the start of each run and may replace when the
//! run ends (a key/value cache, a running count), held between runs by a
//! [`Context`](crate::backend::Context).

use std::marker::PhantomData;

use super::element::Element;
use super::scope::Scope;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::ir::NodeId;

/// A state of shape `S` and element type `E` in the graph being built. Its shape is fixed
/// when the graph is built (static or config dims: a cache's capacity), so a write of
/// another shape does not compile. A state is written at most once; a second write is a
/// build error at its line.
///
/// ```
/// use rlx::typed::{Axis, Const, State, Tensor, build};
/// let graph = build(|g| {
///     let cache: State<(Const<16>, Const<8>)> = g.state("cache");
///     let row: Tensor<(Const<1>, Const<8>)> = g.input("row");
///     let pos: Tensor<(), i32> = g.input("pos");
///     let filled = cache.read().slice_update(Axis::<0>, row, pos);
///     cache.write(filled);
///     g.output("sum", filled.sum::<0>());
/// })?;
/// assert_eq!(graph.writes()[0].name, "cache");
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
pub struct State<'g, S: Shape, E: Element = f32> {
    scope: &'g Scope<'g>,
    id: Option<NodeId>,
    name: String,
    _shape: PhantomData<(S, E)>,
}

impl<'g, S: Shape, E: Element> State<'g, S, E> {
    pub(super) fn new(scope: &'g Scope<'g>, id: Option<NodeId>, name: &str) -> Self {
        State {
            scope,
            id,
            name: name.to_string(),
            _shape: PhantomData,
        }
    }

    /// Its value from before the run (every read of a run sees that one).
    pub fn read(&self) -> Tensor<'g, S, E> {
        Tensor::from_id(self.scope, self.id)
    }

    /// Makes `value` the state's value once the run completes.
    #[track_caller]
    pub fn write(&self, value: Tensor<'g, S, E>) {
        if let (Some(_), Some(value)) = (self.id, value.id()) {
            self.scope.write_state(&self.name, value);
        }
    }
}

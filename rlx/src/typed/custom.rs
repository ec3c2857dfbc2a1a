//! Custom ops through typed handles: operands erased to [`Operand`], the result typed by
//! the caller.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use super::element::Element;
use super::scope::Scope;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::ir::{AttrValue, NodeId, Op, TensorType};

/// A handle of the graph `'g` with its shape and element type erased: an operand of
/// [`Scope::custom`]. Made by [`Tensor::operand`]; like a handle, it cannot leave its graph.
#[derive(Clone, Copy)]
pub struct Operand<'g> {
    id: Option<NodeId>,
    // The graph's brand, invariant as in `Tensor`: an operand cannot join another graph.
    _brand: PhantomData<&'g Scope<'g>>,
}

impl<'g, S: Shape, E: Element> Tensor<'g, S, E> {
    /// This handle as an operand of a custom op.
    pub fn operand(self) -> Operand<'g> {
        Operand {
            id: self.id(),
            _brand: PhantomData,
        }
    }
}

impl<'g> Scope<'g> {
    /// The custom op `name` on `operands`, with kernels registered per backend under that
    /// name (an unregistered name fails at compile). The result's shape and element type are
    /// the handle's type: its dims must be static, config-bound or named runtime dims.
    ///
    /// ```
    /// use rlx::ir::AttrValue;
    /// use rlx::typed::{Const, Tensor, build};
    /// rlx::dims!(Batch);
    /// let graph = build(|g| {
    ///     let x: Tensor<(Batch, Const<4>)> = g.input("x");
    ///     let y: Tensor<(Batch, Const<4>)> =
    ///         g.custom("scale", &[("factor", AttrValue::Float(2.0))], &[x.operand()]);
    ///     g.output("y", y);
    /// })?;
    /// assert!(graph.to_string().contains("custom"));
    /// # Ok::<(), rlx::typed::BuildErrors>(())
    /// ```
    #[track_caller]
    pub fn custom<S: Shape, E: Element>(
        &'g self,
        name: &str,
        attrs: &[(&str, AttrValue)],
        operands: &[Operand<'g>],
    ) -> Tensor<'g, S, E> {
        let Some(shape) = self.shape(S::DIMS) else {
            return Tensor::from_id(self, None);
        };
        let op = Op::Custom(crate::ir::Custom {
            name: name.to_string(),
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
            output: TensorType::new(E::DTYPE, shape),
        });
        let ids: Vec<Option<NodeId>> = operands.iter().map(|o| o.id).collect();
        Tensor::from_id(self, self.apply(op, &ids))
    }
}

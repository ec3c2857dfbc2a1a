//! The float64 reference: each op's value from its own module's definition, and a whole
//! graph evaluated with it. It is what the op table, the gradient checks and the random
//! graphs compare the backends with; it is written for clarity, not speed.

use std::collections::HashMap;

use super::array::{Array, Out};
use crate::ir::{EvalDimError, Graph, InferError, Node, NodeId, Op, Shape, Symbol, TensorType};
use crate::tensor::HostTensor;

/// Why the float64 reference has no value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    /// The operands do not fit the op.
    #[error(transparent)]
    Infer(#[from] InferError),
    /// The op's attributes hold dims that are not bound (see [`Op::bind_dims`]).
    #[error("{op} has unbound dims in its attributes; bind them first")]
    Unbound {
        /// The op, printed.
        op: String,
    },
    /// Inputs and params take their values from the caller, not from an op.
    #[error("a {op} node has no value of its own")]
    Leaf {
        /// `input` or `param`.
        op: &'static str,
    },
    /// The op is known only by its kernels (a custom op).
    #[error("custom op {op:?} has no float64 reference")]
    NoReference {
        /// The op's registry key.
        op: String,
    },
    /// An index operand points outside the axis it indexes.
    #[error("index {index} is out of range for an axis of {size}")]
    IndexOutOfRange {
        /// The index.
        index: i64,
        /// The axis' size.
        size: usize,
    },
    /// An offset of a dynamic slice or slice update puts its window outside the axis.
    #[error("offset {offset} puts a window of {window} outside an axis of {size}")]
    WindowOutOfRange {
        /// The offset.
        offset: i64,
        /// The window's size along the axis.
        window: usize,
        /// The axis' size.
        size: usize,
    },
    /// A value the graph needs was not given, or does not match its declaration.
    #[error("{0}")]
    Binding(String),
    /// A dim of the graph has no size under the binding.
    #[error(transparent)]
    Dim(#[from] EvalDimError),
}

impl Op {
    /// This op's value in float64 on `operands`, from its own definition rather than any
    /// backend's kernels: floats come back as `f64` tensors, unrounded; integers and `bool`
    /// in their dtype. Dims in the attributes must be bound ([`Op::bind_dims`]).
    ///
    /// ```
    /// use rlx::ir::{Op, UnaryOp};
    /// use rlx::tensor::HostTensor;
    /// let x = HostTensor::from_vec(vec![0.5f32, -1.0], [2]).unwrap();
    /// let y = Op::Unary(UnaryOp::Exp).reference(&[x]).unwrap();
    /// assert_eq!(y.as_slice::<f64>().unwrap(), &[0.5f64.exp(), (-1.0f64).exp()]);
    /// ```
    pub fn reference(&self, operands: &[HostTensor]) -> Result<HostTensor, ReferenceError> {
        let types: Vec<TensorType> = operands
            .iter()
            .map(|t| TensorType::new(t.dtype(), Shape::from(t.shape())))
            .collect();
        let x: Vec<Array> = operands.iter().map(Array::of).collect();
        self.reference_of(&x, &types).map(Array::into_tensor)
    }

    fn reference_of(&self, x: &[Array], types: &[TensorType]) -> Result<Array, ReferenceError> {
        let ty = self.infer(types)?;
        let shape = ty
            .shape
            .static_dims()
            .ok_or_else(|| ReferenceError::Unbound {
                op: self.to_string(),
            })?;
        let out = Out {
            dtype: ty.dtype,
            shape,
        };
        self.primitive().reference(x, &out)
    }
}

/// Every output of `graph` in float64 (see [`Op::reference`]), given its inputs, params and
/// the sizes of symbolic dims that the inputs' shapes do not fix.
///
/// ```
/// use rlx::ir::{DType, Dim, evaluate_reference};
/// use rlx::prelude::GraphBuilder;
/// use rlx::tensor::HostTensor;
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [Dim::sym("n")]).unwrap();
/// let y = b.mul(x, x).unwrap();
/// b.output("y", y).unwrap();
/// let g = b.finish().unwrap();
/// let x = HostTensor::from_vec(vec![1.5f32, 2.0], [2]).unwrap();
/// let out = evaluate_reference(&g, &[("x", &x)], &[], &[]).unwrap();
/// assert_eq!(out[0].as_slice::<f64>().unwrap(), &[2.25, 4.0]);
/// ```
pub fn evaluate_reference(
    graph: &Graph,
    inputs: &[(&str, &HostTensor)],
    params: &[(&str, &HostTensor)],
    dims: &[(&str, usize)],
) -> Result<Vec<HostTensor>, ReferenceError> {
    let mut bound: HashMap<Symbol, usize> =
        dims.iter().map(|(n, v)| (Symbol::new(n), *v)).collect();
    for (_, node) in graph.inputs().chain(graph.params()) {
        let given = given(
            node.name.as_deref().unwrap_or_default(),
            &node.op,
            inputs,
            params,
        )?;
        bind(&mut bound, &node.ty.shape, given.shape());
    }
    let leaf = |node: &Node, shape: &[usize]| {
        let name = node.name.as_deref().unwrap_or_default();
        let t = given(name, &node.op, inputs, params)?;
        if t.dtype() != node.ty.dtype || t.shape() != shape {
            return Err(ReferenceError::Binding(format!(
                "`{name}` is {:?}{:?}, declared {:?}{shape:?}",
                t.dtype(),
                t.shape(),
                node.ty.dtype
            )));
        }
        Ok(Array::of(t))
    };
    let values = run(graph, &bound, leaf)?;
    Ok(values.into_iter().map(Array::into_tensor).collect())
}

/// Every output of `graph` (no params) in float64, its inputs taking `inputs` in order and
/// its symbolic dims bound by their shapes.
pub(crate) fn evaluate_arrays(
    graph: &Graph,
    inputs: Vec<Array>,
) -> Result<Vec<Array>, ReferenceError> {
    let mut bound = HashMap::new();
    let declared: Vec<&Node> = graph.inputs().map(|(_, n)| n).collect();
    if declared.len() != inputs.len() {
        return Err(ReferenceError::Binding(format!(
            "{} inputs given for {}",
            inputs.len(),
            declared.len()
        )));
    }
    for (node, value) in declared.iter().zip(&inputs) {
        bind(&mut bound, &node.ty.shape, &value.shape);
    }
    let mut given = inputs.into_iter();
    let leaf = |node: &Node, _: &[usize]| match node.op {
        Op::Input => given
            .next()
            .ok_or_else(|| ReferenceError::Binding("too few inputs".into())),
        _ => Err(ReferenceError::Leaf { op: "param" }),
    };
    run(graph, &bound, leaf)
}

/// Binds each symbol `declared` names alone to its size in `sizes`, unless already bound.
fn bind(bound: &mut HashMap<Symbol, usize>, declared: &Shape, sizes: &[usize]) {
    for (dim, size) in declared.dims().iter().zip(sizes) {
        if let crate::ir::Dim::Sym(s) = dim {
            bound.entry(s.clone()).or_insert(*size);
        }
    }
}

/// Evaluates `graph` node by node under the binding `bound`, leaves from `leaf` (given the
/// node and its dims), freeing each value after its last use.
fn run(
    graph: &Graph,
    bound: &HashMap<Symbol, usize>,
    mut leaf: impl FnMut(&Node, &[usize]) -> Result<Array, ReferenceError>,
) -> Result<Vec<Array>, ReferenceError> {
    let mut values: Vec<Option<Array>> = vec![None; graph.len()];
    let users = last_uses(graph);
    for (id, node) in graph.iter() {
        let shape = node.ty.shape.eval(&mut |s| bound.get(s).copied())?;
        let value = match &node.op {
            Op::Input | Op::Param => leaf(node, &shape)?,
            op => {
                let x: Vec<Array> = node
                    .inputs
                    .iter()
                    .map(|i| values[i.index()].clone().expect("operands come first"))
                    .collect();
                let types: Vec<TensorType> = x
                    .iter()
                    .map(|a| TensorType::new(a.dtype, Shape::from(a.shape.as_slice())))
                    .collect();
                op.bind_dims(&shape).reference_of(&x, &types)?
            }
        };
        values[id.index()] = Some(value);
        for freed in &users[id.index()] {
            values[freed.index()] = None;
        }
    }
    Ok(graph
        .outputs()
        .iter()
        .map(|o| values[o.node.index()].clone().expect("outputs are kept"))
        .collect())
}

/// The tensor given for the input or param `name`.
fn given<'a>(
    name: &str,
    op: &Op,
    inputs: &[(&str, &'a HostTensor)],
    params: &[(&str, &'a HostTensor)],
) -> Result<&'a HostTensor, ReferenceError> {
    let (list, what) = match op {
        Op::Param => (params, "param"),
        _ => (inputs, "input"),
    };
    list.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| ReferenceError::Binding(format!("{what} `{name}` was not given")))
}

/// For each node, the values no later node or output reads once it has run.
fn last_uses(graph: &Graph) -> Vec<Vec<NodeId>> {
    let mut last: Vec<Option<usize>> = vec![None; graph.len()];
    for (id, node) in graph.iter() {
        for i in &node.inputs {
            last[i.index()] = Some(id.index());
        }
    }
    for o in graph.outputs() {
        last[o.node.index()] = None;
    }
    let mut frees = vec![Vec::new(); graph.len()];
    for (value, at) in last.iter().enumerate() {
        if let Some(at) = at {
            frees[*at].push(NodeId::new(value));
        }
    }
    frees
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;
    use crate::prelude::GraphBuilder;

    #[test]
    fn a_missing_input_is_an_error() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [2]).unwrap();
        let y = b.unary(crate::ir::UnaryOp::Neg, x).unwrap();
        b.output("y", y).unwrap();
        let g = b.finish().unwrap();
        let err = evaluate_reference(&g, &[], &[], &[]).unwrap_err();
        assert_eq!(err.to_string(), "input `x` was not given");
        let wrong = HostTensor::from_vec(vec![1.0f32; 3], [3]).unwrap();
        assert!(matches!(
            evaluate_reference(&g, &[("x", &wrong)], &[], &[]),
            Err(ReferenceError::Binding(_))
        ));
    }

    #[test]
    fn operands_that_do_not_fit_are_an_error() {
        let a = HostTensor::from_vec(vec![1.0f32; 3], [3]).unwrap();
        let b = HostTensor::from_vec(vec![1.0f32; 2], [2]).unwrap();
        assert!(matches!(
            Op::Binary(crate::ir::BinaryOp::Add).reference(&[a, b]),
            Err(ReferenceError::Infer(_))
        ));
    }

    #[test]
    fn integer_products_wrap_like_the_kernels() {
        let values = vec![63i64; 33];
        let x = HostTensor::from_vec(values, [33]).unwrap();
        let prod = Op::Reduce(crate::ir::Reduce {
            op: crate::ir::ReduceOp::Prod,
            axes: vec![0],
            keep_dims: false,
        });
        let got = prod.reference(&[x]).unwrap();
        let want = (0..33).fold(1i64, |p, _| p.wrapping_mul(63));
        // Exact up to float64's rounding of the wrapped product, which the kernels' value
        // meets too when both are read as float64.
        assert_eq!(got.to_f64_vec(), [want as f64]);
        assert_ne!(want as f64, 63f64.powi(33));
    }
}

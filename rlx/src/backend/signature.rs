//! What every backend checks the same way before it runs a graph: inputs matched by name,
//! runtime dims bound from `dims` and input shapes, dtypes, shapes and byte counts of inputs
//! and weights, and the concrete shape of every node under a binding.

use super::{BindingFailure, NodeSite, RunError, TensorRole};
use crate::ir::{DType, Dim, Graph, Node, NodeId, Shape, Symbol, TensorType};
use crate::tensor::TensorRef;

/// A graph input as a backend sees it.
pub(crate) struct InputSlot {
    pub node: NodeId,
    pub name: String,
    pub ty: TensorType,
}

/// The inputs and runtime dims of a graph.
pub(crate) struct Signature {
    pub inputs: Vec<InputSlot>,
    /// Every runtime dim, in name order.
    pub symbols: Vec<Symbol>,
    /// `(symbol, input, axis)`: an input axis that is exactly a symbol, so its size binds it.
    pub symbol_sources: Vec<(usize, usize, usize)>,
}

impl Signature {
    pub(crate) fn of(graph: &Graph) -> Signature {
        let inputs: Vec<InputSlot> = graph
            .inputs()
            .map(|(id, n)| InputSlot {
                node: id,
                name: n.name.clone().unwrap_or_default(),
                ty: n.ty.clone(),
            })
            .collect();
        let mut symbols: Vec<Symbol> = graph
            .nodes()
            .iter()
            .flat_map(|n| n.ty.shape.symbols())
            .collect();
        symbols.sort();
        symbols.dedup();
        let mut symbol_sources = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            for (axis, d) in input.ty.shape.dims().iter().enumerate() {
                if let Dim::Sym(s) = d {
                    let sym = symbols
                        .binary_search(s)
                        .expect("input symbols are collected");
                    symbol_sources.push((sym, i, axis));
                }
            }
        }
        Signature {
            inputs,
            symbols,
            symbol_sources,
        }
    }

    /// The declared shape of input `i` with bound values, e.g. `[batch,384] = [2,384]`.
    pub(crate) fn describe_input(&self, i: usize, bound: &[usize]) -> String {
        let shape: &Shape = &self.inputs[i].ty.shape;
        if shape.is_static() {
            shape.to_string()
        } else {
            format!("{shape} = {bound:?}")
        }
    }

    /// The bound values as text, e.g. `batch=2, seq=7`.
    pub(crate) fn bindings_text(&self, values: &[usize]) -> String {
        self.symbols
            .iter()
            .zip(values)
            .map(|(s, v)| format!("{s}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Checks each supplied input (matched by `binder`) against its slot and its dims
    /// `bound[i]` under the current binding.
    pub(crate) fn check_inputs<'s, G: Given>(
        &self,
        binder: &Binder,
        inputs: &[(&str, G)],
        bound: impl Fn(usize) -> &'s [usize],
    ) -> Result<(), RunError> {
        for (i, slot) in self.inputs.iter().enumerate() {
            let given = &inputs[binder.provided[i]].1;
            if given.dtype() != slot.ty.dtype {
                return Err(RunError::DType {
                    kind: TensorRole::Input,
                    name: slot.name.clone(),
                    expected: slot.ty.dtype,
                    got: given.dtype(),
                });
            }
            let dims = bound(i);
            if given.dims() != dims {
                return Err(RunError::Shape {
                    kind: TensorRole::Input,
                    name: slot.name.clone(),
                    expected: self.describe_input(i, dims),
                    got: given.dims().to_vec(),
                });
            }
            let expected = dims.iter().product::<usize>() * slot.ty.dtype.size_bytes();
            if given.byte_len() != expected {
                return Err(RunError::Bytes {
                    kind: TensorRole::Input,
                    name: slot.name.clone(),
                    dtype: slot.ty.dtype,
                    shape: given.dims().to_vec(),
                    expected,
                    got: given.byte_len(),
                });
            }
        }
        Ok(())
    }
}

/// What binding and checking read of a supplied input: a host tensor, or a backend's
/// own array.
pub(crate) trait Given {
    /// Its element type.
    fn dtype(&self) -> DType;
    /// Its dims.
    fn dims(&self) -> &[usize];
    /// How many bytes it holds.
    fn byte_len(&self) -> usize;
}

impl Given for TensorRef<'_> {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn dims(&self) -> &[usize] {
        self.shape
    }
    fn byte_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Where a runtime dim's value came from in this run, for error messages.
#[derive(Clone, Copy, Debug)]
enum Source {
    Dims,
    Input(usize, usize),
}

/// Per-run scratch for binding runtime dims, sized once so runs do not allocate.
pub(crate) struct Binder {
    values: Vec<Option<usize>>,
    sources: Vec<Source>,
    /// For each graph input, the index of the supplied tensor that feeds it.
    pub provided: Vec<usize>,
    /// The bound value of each symbol, in [`Signature::symbols`] order.
    pub key: Vec<usize>,
}

impl Binder {
    pub(crate) fn new(signature: &Signature) -> Binder {
        let n = signature.symbols.len();
        Binder {
            values: vec![None; n],
            sources: vec![Source::Dims; n],
            provided: vec![0; signature.inputs.len()],
            key: vec![0; n],
        }
    }

    /// Matches inputs by name into `provided`, then binds every runtime dim into `key`.
    pub(crate) fn bind<G: Given>(
        &mut self,
        signature: &Signature,
        inputs: &[(&str, G)],
        dims: &[(&str, usize)],
    ) -> Result<(), RunError> {
        self.match_inputs(signature, inputs)?;
        for (i, slot) in signature.inputs.iter().enumerate() {
            let given = &inputs[self.provided[i]].1;
            if given.dims().len() != slot.ty.shape.rank() {
                return Err(RunError::Rank {
                    kind: TensorRole::Input,
                    name: slot.name.clone(),
                    expected: slot.ty.shape.rank(),
                    got: given.dims().to_vec(),
                });
            }
        }
        self.values.fill(None);
        for &(name, value) in dims {
            let Some(s) = signature.symbols.iter().position(|s| s.name() == name) else {
                return Err(RunError::UnknownSymbol {
                    symbol: name.to_string(),
                    known: signature.symbols.iter().map(ToString::to_string).collect(),
                });
            };
            self.values[s] = Some(value);
            self.sources[s] = Source::Dims;
        }
        for &(s, input, axis) in &signature.symbol_sources {
            let given = &inputs[self.provided[input]].1;
            let Some(&value) = given.dims().get(axis) else {
                continue; // the rank is wrong; `check_inputs` names it
            };
            match self.values[s] {
                Some(first) if first != value => {
                    return Err(RunError::InconsistentSymbol {
                        symbol: signature.symbols[s].to_string(),
                        first,
                        first_source: source_text(signature, self.sources[s]),
                        second: value,
                        second_source: source_text(signature, Source::Input(input, axis)),
                    });
                }
                Some(_) => {}
                None => {
                    self.values[s] = Some(value);
                    self.sources[s] = Source::Input(input, axis);
                }
            }
        }
        for (s, v) in self.values.iter().enumerate() {
            match v {
                Some(v) => self.key[s] = *v,
                None => {
                    return Err(RunError::UnboundSymbol {
                        symbol: signature.symbols[s].to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    fn match_inputs<G>(
        &mut self,
        signature: &Signature,
        inputs: &[(&str, G)],
    ) -> Result<(), RunError> {
        for (i, slot) in signature.inputs.iter().enumerate() {
            self.provided[i] = inputs
                .iter()
                .position(|(name, _)| *name == slot.name)
                .ok_or_else(|| RunError::MissingInput {
                    name: slot.name.clone(),
                })?;
        }
        for (name, _) in inputs {
            if !signature.inputs.iter().any(|s| s.name == *name) {
                return Err(RunError::UnknownInput {
                    name: name.to_string(),
                    known: signature.inputs.iter().map(|s| s.name.clone()).collect(),
                });
            }
        }
        Ok(())
    }
}

fn source_text(signature: &Signature, source: Source) -> String {
    match source {
        Source::Dims => "`dims`".to_string(),
        Source::Input(i, axis) => format!("input {:?} axis {axis}", signature.inputs[i].name),
    }
}

/// Checks a weight offered for the param `name` declared as `dtype[shape]`.
/// Checks that a weight `name` of `dtype[shape]` may take a value of `got_dtype[got_shape]`.
pub(crate) fn check_weight_type(
    kind: TensorRole,
    name: &str,
    dtype: DType,
    shape: &[usize],
    got_dtype: DType,
    got_shape: &[usize],
) -> Result<(), RunError> {
    if got_dtype != dtype {
        return Err(RunError::DType {
            kind,
            name: name.to_string(),
            expected: dtype,
            got: got_dtype,
        });
    }
    if got_shape != shape {
        return Err(RunError::Shape {
            kind,
            name: name.to_string(),
            expected: format!("{shape:?}"),
            got: got_shape.to_vec(),
        });
    }
    Ok(())
}

pub(crate) fn check_weight(
    kind: TensorRole,
    name: &str,
    dtype: DType,
    shape: &[usize],
    value: &TensorRef<'_>,
) -> Result<(), RunError> {
    check_weight_type(kind, name, dtype, shape, value.dtype, value.shape)?;
    let expected = shape.iter().product::<usize>() * dtype.size_bytes();
    if value.bytes.len() != expected {
        return Err(RunError::Bytes {
            kind,
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            expected,
            got: value.bytes.len(),
        });
    }
    Ok(())
}

/// The concrete dims of every node of `graph` with its runtime dims bound to `values`,
/// each op re-checked now that sizes are known. `max_rank` is the backend's limit.
pub(crate) fn concrete_shapes(
    graph: &Graph,
    signature: &Signature,
    values: &[usize],
    max_rank: usize,
    backend: &'static str,
) -> Result<Vec<Vec<usize>>, RunError> {
    let fail = |id: NodeId, node: &Node, reason: BindingFailure| RunError::Binding {
        bindings: signature.bindings_text(values),
        at: NodeSite::of(id, node),
        reason: Box::new(reason),
    };
    let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(graph.len());
    for (id, node) in graph.iter() {
        let mut value_of = |s: &Symbol| {
            signature
                .symbols
                .iter()
                .position(|p| p == s)
                .map(|i| values[i])
        };
        let dims = node
            .ty
            .shape
            .eval(&mut value_of)
            .map_err(|e| fail(id, node, e.into()))?;
        if dims.len() > max_rank {
            let reason = BindingFailure::Rank {
                rank: dims.len(),
                limit: max_rank,
                backend,
            };
            return Err(fail(id, node, reason));
        }
        let bytes = dims
            .iter()
            .try_fold(node.ty.dtype.size_bytes(), |acc, d| acc.checked_mul(*d))
            .filter(|b| *b <= isize::MAX as usize);
        if bytes.is_none() {
            let reason = BindingFailure::TooLarge {
                dtype: node.ty.dtype,
                dims,
            };
            return Err(fail(id, node, reason));
        }
        if !node.op.is_leaf() {
            // Dims in attributes (reshape targets, upsampling sizes) are bound like node types.
            let op = node.op.bind_dims(&dims);
            let operands: Vec<TensorType> = node
                .inputs
                .iter()
                .map(|i| {
                    TensorType::new(
                        graph[*i].ty.dtype,
                        Shape::from(shapes[i.index()].as_slice()),
                    )
                })
                .collect();
            match op.infer(&operands) {
                Ok(t) if t.shape == Shape::from(dims.as_slice()) => {}
                Ok(t) => {
                    let reason = BindingFailure::ShapeDiffers {
                        inferred: t.shape,
                        dims,
                    };
                    return Err(fail(id, node, reason));
                }
                Err(e) => return Err(fail(id, node, e.into())),
            }
        }
        shapes.push(dims);
    }
    Ok(shapes)
}

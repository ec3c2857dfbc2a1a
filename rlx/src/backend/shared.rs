//! What every backend keeps the same way: its custom-op registry, its table of params and
//! its cache of per-binding plans.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::RunError;
use super::signature::check_weight;
use crate::ir::{DType, Graph, NodeId, Op};
use crate::tensor::TensorRef;

/// Kernels of custom ops registered by name; `K` is the backend's kernel trait.
pub(crate) struct CustomOps<K: ?Sized> {
    kernels: BTreeMap<String, Arc<K>>,
}

impl<K: ?Sized> Clone for CustomOps<K> {
    fn clone(&self) -> Self {
        CustomOps {
            kernels: self.kernels.clone(),
        }
    }
}

impl<K: ?Sized> Default for CustomOps<K> {
    fn default() -> Self {
        CustomOps {
            kernels: BTreeMap::new(),
        }
    }
}

impl<K: ?Sized> std::fmt::Debug for CustomOps<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kernels.keys()).finish()
    }
}

impl<K: ?Sized> CustomOps<K> {
    pub(crate) fn insert(&mut self, name: &str, kernel: Arc<K>) {
        self.kernels.insert(name.to_string(), kernel);
    }

    /// Whether the backend can run `op`: every built-in op, and custom ops registered here.
    pub(crate) fn supports(&self, op: &Op) -> bool {
        match op {
            Op::Custom { name, .. } => self.kernels.contains_key(name),
            _ => true,
        }
    }

    /// The kernel of each node of `graph` that is a custom op.
    pub(crate) fn per_node(&self, graph: &Graph) -> Vec<Option<Arc<K>>> {
        graph
            .nodes()
            .iter()
            .map(|n| match &n.op {
                Op::Custom { name, .. } => self.kernels.get(name).cloned(),
                _ => None,
            })
            .collect()
    }
}

/// One param of a compiled graph.
#[derive(Clone, Debug)]
pub(crate) struct ParamSpec {
    /// The param's node (MLX passes params to its compiled functions in this order).
    #[cfg_attr(not(feature = "mlx"), allow(dead_code))]
    pub node: NodeId,
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// The params of a compiled graph in graph order, which of them are bound, and the checks
/// of `set_weight` and `weight` against them. Backends keep the values, indexed alike.
#[derive(Clone, Debug)]
pub(crate) struct ParamTable {
    pub specs: Vec<ParamSpec>,
    bound: Vec<bool>,
}

impl ParamTable {
    pub(crate) fn of(graph: &Graph) -> ParamTable {
        let specs: Vec<ParamSpec> = graph
            .params()
            .map(|(node, n)| ParamSpec {
                node,
                name: n.name.clone().unwrap_or_default(),
                dtype: n.ty.dtype,
                shape: n.ty.shape.static_dims().unwrap_or_default(),
            })
            .collect();
        ParamTable {
            bound: vec![false; specs.len()],
            specs,
        }
    }

    /// The index of the param `name`.
    pub(crate) fn find(&self, name: &str) -> Result<usize, RunError> {
        self.specs
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| RunError::UnknownWeight {
                name: name.to_string(),
            })
    }

    /// The index of the param `name` after checking `value` against it; the caller stores
    /// the value and then calls [`ParamTable::mark_bound`].
    pub(crate) fn check(&self, name: &str, value: &TensorRef<'_>) -> Result<usize, RunError> {
        let i = self.find(name)?;
        let spec = &self.specs[i];
        check_weight(name, spec.dtype, &spec.shape, value)?;
        Ok(i)
    }

    pub(crate) fn mark_bound(&mut self, i: usize) {
        self.bound[i] = true;
    }

    /// The index of the bound param `name`.
    pub(crate) fn find_bound(&self, name: &str) -> Result<usize, RunError> {
        let i = self.find(name)?;
        if self.bound[i] {
            Ok(i)
        } else {
            Err(RunError::MissingWeight {
                name: name.to_string(),
            })
        }
    }

    /// Every param is bound, or the first that is not is named.
    pub(crate) fn all_bound(&self) -> Result<(), RunError> {
        match self.bound.iter().position(|b| !b) {
            None => Ok(()),
            Some(i) => Err(RunError::MissingWeight {
                name: self.specs[i].name.clone(),
            }),
        }
    }
}

/// Plans made per binding of the runtime dims, found by comparing the bound values (few
/// bindings are live at once, so a list beats hashing).
pub(crate) struct PlanCache<P> {
    entries: Vec<(Vec<usize>, P)>,
}

impl<P> Default for PlanCache<P> {
    fn default() -> Self {
        PlanCache {
            entries: Vec::new(),
        }
    }
}

impl<P> PlanCache<P> {
    /// The index of the plan for `values`, made by `make` if there is none yet.
    pub(crate) fn index_for<E>(
        &mut self,
        values: &[usize],
        make: impl FnOnce() -> Result<P, E>,
    ) -> Result<usize, E> {
        if let Some(i) = self.entries.iter().position(|(v, _)| v == values) {
            return Ok(i);
        }
        let plan = make()?;
        self.entries.push((values.to_vec(), plan));
        Ok(self.entries.len() - 1)
    }

    pub(crate) fn get(&self, i: usize) -> &P {
        &self.entries[i].1
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

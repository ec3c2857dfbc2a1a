//! Lowering a graph, with its runtime dims bound, to lazy MLX arrays.
//!
//! Each op's lowering is its impl of [`Lower`] in `ops.rs`, found from the op by
//! `ops::lowering_of!` (a primitive without one does not compile). Some nodes are lowered
//! together with the node that reads them (`together.rs`): a matmul with its bias add, a
//! residual add with its RMS norm.

mod ops;
mod products;
mod readers;
mod rotations;
mod together;

use crate::ir::{self as ir, DynamicSlice, Gather, ScatterAdd, SliceUpdate};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::MlxCustomOp;
use super::array::{Array, MlxError};
use super::device::Device;
use crate::backend::{NodeSite, RunError};
use crate::ir::{ConstantData, DType, Graph, Node, NodeId, Op, ReduceOp};
use crate::tensor::TensorRef;
pub(crate) use rotations::HeadRopes;
use together::BiasAdd;
pub(crate) use together::{BiasAdds, GatedProducts, ResidualNorms};

/// Everything fixed once per binding that lowering reads. Shared with the `mlx::compile`
/// callback, so it owns its data.
pub(crate) struct Lowering {
    pub graph: Arc<Graph>,
    /// The adds of a bias to a matmul, lowered together as one GEMM.
    pub bias_adds: Arc<BiasAdds>,
    /// Residual adds lowered with the RMS norm that reads them.
    pub residual_norms: Arc<ResidualNorms>,
    /// Rotations of queries and keys lowered in pairs from the product that made them.
    pub head_ropes: Arc<HeadRopes>,
    /// Gated feed-forwards lowered at the node that multiplies gate and up.
    pub gated_products: Arc<GatedProducts>,
    /// Concrete dims of every node.
    pub shapes: Vec<Vec<usize>>,
    /// The array of each constant node.
    pub constants: Arc<Constants>,
    /// The kernel of each custom node.
    pub custom: Arc<Vec<Option<Arc<dyn MlxCustomOp>>>>,
    /// Leaves in call order: the graph's params, then its inputs.
    pub leaves: Vec<NodeId>,
    /// Per node: where a block weight's MLX form lies among a call's leaves (after
    /// `leaves`), made when the weight was bound.
    pub prepared: Arc<Vec<Option<PreparedWeight>>>,
    /// Per node: where a grouped product's joined weight lies among a call's leaves (after
    /// the block weights' MLX forms), see [`ProductGroup`](crate::mlx::layout::ProductGroup).
    pub fused: Arc<Vec<Option<crate::mlx::layout::FusedSlot>>>,
    /// Evaluate every node as soon as it is built (eager mode).
    pub eager: bool,
    /// Where the arrays the lowering makes from host bytes are put.
    pub device: Device,
    /// A lowering has checked every node's dtype and dims against the graph; they are
    /// the same for every run of this binding, so later runs skip the check.
    pub verified: AtomicBool,
    /// Small `i64` arrays the lowering needs that depend only on the binding (the key
    /// positions of an attention over a run-time length), made on the first run and
    /// reused, so later runs upload nothing for them.
    pub index_arrays: IndexArrays,
    /// Per node: the earlier node whose index check (and, for an attention over a key
    /// length, whose mask) is this node's too (see [`repeated_sites`]).
    pub repeats: Vec<Option<NodeId>>,
}

/// Where a param's form made when it is bound lies in a call's leaves: `count` arrays from
/// `first`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreparedWeight {
    pub first: usize,
    pub count: usize,
    pub form: PreparedForm,
}

/// What a [`PreparedWeight`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PreparedForm {
    /// A block weight's MLX form (`Array::block_prepare`), for products in this format.
    Blocks(crate::gguf::GgmlType),
    /// A float weight as the operand of products of a block of rows.
    Rows(crate::mlx::layout::RowOperand),
}

/// Evaluated `i64` arrays by their values and dims (see [`Lowering::index_arrays`]).
#[derive(Default)]
pub(crate) struct IndexArrays(std::sync::Mutex<Vec<IndexArray>>);

/// One array of [`IndexArrays`]: its dtype, its values (a float's bits for `f32`), its
/// dims, the array.
struct IndexArray {
    dtype: DType,
    values: Vec<i64>,
    dims: Vec<usize>,
    array: Array,
}

// SAFETY: every array is evaluated before it is stored and never changed afterwards, as
// `Constants`'; the lock guards the list, and sharing an array only lets other threads build
// ops that read it.
unsafe impl Sync for IndexArrays {}

impl IndexArrays {
    /// The array of `values` with `dims` on `device`: made and evaluated the first time.
    pub(crate) fn get(
        &self,
        values: Vec<i64>,
        dims: &[usize],
        device: Device,
    ) -> Result<Array, MlxError> {
        self.made(DType::I64, values, dims, device, |v| {
            crate::tensor::HostTensor::from_vec(v.to_vec(), dims.to_vec())
        })
    }

    /// The `f32` array of `values` with `dims` on `device`, as [`get`](Self::get) makes
    /// `i64` ones.
    pub(crate) fn get_f32(
        &self,
        values: &[f32],
        dims: &[usize],
        device: Device,
    ) -> Result<Array, MlxError> {
        let bits = values.iter().map(|v| i64::from(v.to_bits())).collect();
        self.made(DType::F32, bits, dims, device, |_| {
            crate::tensor::HostTensor::from_vec(values.to_vec(), dims.to_vec())
        })
    }

    fn made(
        &self,
        dtype: DType,
        values: Vec<i64>,
        dims: &[usize],
        device: Device,
        host: impl FnOnce(&[i64]) -> Result<crate::tensor::HostTensor, crate::tensor::TensorError>,
    ) -> Result<Array, MlxError> {
        let mut made = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let same = |a: &&IndexArray| a.dtype == dtype && a.values == values && a.dims == dims;
        if let Some(known) = made.iter().find(same) {
            return Ok(known.array.clone());
        }
        let t = host(&values).map_err(|e| MlxError::new(e.to_string()))?;
        let array = Array::from_tensor_on(t.view(), device)?;
        Array::eval(&[&array])?;
        made.push(IndexArray {
            dtype,
            values,
            dims: dims.to_vec(),
            array: array.clone(),
        });
        Ok(array)
    }
}

/// The arrays of a graph's constant nodes, indexed by node.
pub(crate) struct Constants(pub Vec<Option<Array>>);

// SAFETY: each array was made from host bytes at compile time (so it is already evaluated)
// and is never changed afterwards; sharing it only lets other threads build ops that read
// it, which copies MLX's internally synchronized `shared_ptr`.
unsafe impl Sync for Constants {}

/// A gather, scatter or window at run-time offsets whose indices must be checked after
/// evaluation.
pub(crate) struct IndexCheck {
    pub node: NodeId,
    /// `bool` scalar: some index was out of range.
    pub bad: Array,
    /// The indices as given.
    pub indices: Array,
}

pub(crate) struct Lowered {
    pub outputs: Vec<Array>,
    pub checks: Vec<IndexCheck>,
    /// A `u8` scalar, nonzero when some index is out of range (`None` without checks):
    /// one read per run, part of the traced function in compiled mode.
    pub any_bad: Option<Array>,
}

/// The flag of [`Lowered::any_bad`] over `checks`.
fn any_flag(checks: &[IndexCheck]) -> Result<Option<Array>, MlxError> {
    if checks.len() < 2 {
        return Ok(checks.first().map(|c| c.bad.clone()));
    }
    let flags = checks
        .iter()
        .map(|c| c.bad.cast(DType::U8)?.reshape(&[1]))
        .collect::<Result<Vec<Array>, MlxError>>()?;
    let flags: Vec<&Array> = flags.iter().collect();
    Ok(Some(Array::concat(&flags, 0)?.reduce(
        ReduceOp::Max,
        &[0],
        false,
    )?))
}

/// `%3 \`matmul\` (built at src/main.rs:4:9)`: a node for error messages.
fn describe_node(id: NodeId, node: &Node) -> String {
    let origin = node
        .origin
        .map(|o| format!(" (built at {o})"))
        .unwrap_or_default();
    format!("{id} `{}`{origin}", node.op)
}

/// The error of a failure at `node`.
pub(crate) fn node_error(id: NodeId, node: &Node, e: MlxError) -> RunError {
    RunError::Backend {
        backend: super::NAME,
        message: format!("{}: {}", describe_node(id, node), e.message),
    }
}

/// The error of a failed evaluation of `graph`, or of its node `at` alone (eager mode).
/// LAPACK failing inside MLX's solve (its LU factorization or triangular inversion) means a
/// singular matrix, as on the CPU backend.
pub(crate) fn eval_error(graph: &Graph, at: Option<(NodeId, &Node)>, e: MlxError) -> RunError {
    let lapack =
        e.message.contains("inversion failed") || e.message.contains("factorization failed");
    let solve = match at {
        Some((id, node)) => Some((id, node)).filter(|(_, n)| n.op == Op::Solve),
        None => graph.iter().find(|(_, n)| n.op == Op::Solve),
    };
    match (solve, at) {
        (Some((id, node)), _) if lapack => RunError::Singular {
            at: NodeSite::of(id, node),
        },
        (_, Some((id, node))) => node_error(id, node, e),
        _ => RunError::Backend {
            backend: super::NAME,
            message: e.message,
        },
    }
}

impl Lowering {
    /// The gathers, scatters and non-empty windows at run-time offsets, in graph order: each
    /// lowering makes one [`IndexCheck`] per node here.
    pub(crate) fn index_nodes(&self) -> Vec<NodeId> {
        self.graph
            .iter()
            .filter(|(id, n)| {
                checked_operand(n, &self.shapes[id.index()]).is_some()
                    && self.repeats[id.index()].is_none()
            })
            .map(|(id, _)| id)
            .collect()
    }

    /// Builds the graph's outputs from `leaves` (one array per entry of `self.leaves`).
    pub(crate) fn lower(&self, leaves: &[Array]) -> Result<Lowered, RunError> {
        self.lower_timed(leaves, None)
    }

    /// [`Lowering::lower`]; with `timings`, each node is also evaluated as soon as it is
    /// built, and the time of building and evaluating it is recorded (a profile).
    pub(crate) fn lower_timed(
        &self,
        leaves: &[Array],
        mut timings: Option<&mut Vec<(NodeId, std::time::Duration)>>,
    ) -> Result<Lowered, RunError> {
        let graph = &*self.graph;
        let mut values: Vec<Option<Array>> = vec![None; graph.len()];
        for (id, leaf) in self.leaves.iter().zip(leaves) {
            values[id.index()] = Some(leaf.clone());
        }
        let verify = !self.verified.load(Ordering::Relaxed);
        let mut checks = Vec::new();
        let mut shared = Vec::new();
        for (id, node) in graph.iter() {
            // (Gated products are built node by node when profiling: each node's own time
            // is wanted then.)
            let gated_folded = timings.is_none() && self.gated_products.folded[id.index()];
            if values[id.index()].is_some() || self.bias_adds.folded[id.index()] || gated_folded {
                continue;
            }
            let gated = self.gated_products.of[id.index()]
                .as_ref()
                .filter(|_| timings.is_none());
            let inputs: &[NodeId] = match (&self.bias_adds.of[id.index()], gated) {
                (Some(add), _) => &add.operands,
                // Its operands are folded: it reads what their products read.
                (None, Some(g)) => std::slice::from_ref(&g.operand),
                (None, None) => &node.inputs,
            };
            let operands: Vec<&Array> = inputs
                .iter()
                .map(|i| values[i.index()].as_ref().expect("operands come first"))
                .collect();
            let at = |e: MlxError| node_error(id, node, e);
            let started = std::time::Instant::now();
            let dims = &self.shapes[id.index()];
            // A residual add and its norm, together (not when profiling: each node's own
            // time is wanted then).
            let residual = self.residual_norms.of[id.index()]
                .as_ref()
                .filter(|_| timings.is_none() && !dims.contains(&0));
            // A query and key rotation, together (likewise not when profiling).
            let rotated = match &self.head_ropes.of[id.index()] {
                Some(pair) if timings.is_none() && !dims.contains(&0) => self
                    .head_rope(id, pair, &values, leaves, &shared)
                    .map_err(at)?
                    .map(|r| (pair, r)),
                _ => None,
            };
            // An empty result is made here, never by MLX's kernels: several of them
            // (CUDA launches of empty grids, CPU reductions of empty arrays) fail, stall
            // or crash on empty operands. Gathers and scatters still go through MLX, for
            // their index checks. (The shim's own guards cover what this cannot: empty
            // operands with non-empty results, and custom ops calling `Array` methods.)
            let value =
                if dims.contains(&0) && !matches!(node.op, Op::Gather(_) | Op::ScatterAdd(_)) {
                    let empty = crate::tensor::HostTensor::zeros(node.ty.dtype, dims.clone());
                    Array::from_tensor_on(empty.view(), self.device).map_err(at)?
                } else if let Some((pair, made)) = rotated {
                    // The values' heads, made with them (the views built before unread).
                    let value_heads = pair.values.as_ref().map(|v| v.heads).zip(made.v);
                    for (node, value) in std::iter::once((pair.second, made.k)).chain(value_heads) {
                        if verify {
                            self.verify(node, &graph[node], &value)?;
                        }
                        values[node.index()] = Some(value);
                    }
                    made.q
                } else if let Some(gated) = gated {
                    match self.gated_product(id, gated, operands[0], leaves, &mut shared) {
                        Ok(v) => v,
                        Err(NodeFailure::Mlx(e)) => return Err(at(e)),
                        Err(NodeFailure::Run(e)) => return Err(e),
                    }
                } else if let Some(r) = residual {
                    let weight = values[r.weight.index()]
                        .as_ref()
                        .expect("the weight precedes the add (ResidualNorms::of)");
                    let (sum, normed) = operands[0]
                        .add_rms_norm(operands[1], weight, r.eps)
                        .map_err(at)?;
                    let norm_node = &graph[r.norm];
                    if verify {
                        self.verify(r.norm, norm_node, &normed)?;
                    }
                    values[r.norm.index()] = Some(normed);
                    sum
                } else {
                    match self.node(id, node, &operands, leaves, &mut checks, &mut shared) {
                        Ok(v) => v,
                        Err(NodeFailure::Mlx(e)) => return Err(at(e)),
                        Err(NodeFailure::Run(e)) => return Err(e),
                    }
                };
            if verify {
                self.verify(id, node, &value)?;
            }
            if self.eager || timings.is_some() {
                Array::eval(&[&value]).map_err(|e| eval_error(graph, Some((id, node)), e))?;
                if let Some(check) = checks.last().filter(|c: &&IndexCheck| c.node == id) {
                    self.verify_indices(check)?;
                }
            }
            if let Some(timings) = timings.as_deref_mut() {
                timings.push((id, started.elapsed()));
            }
            values[id.index()] = Some(value);
        }
        let outputs = graph
            .outputs()
            .iter()
            .chain(graph.writes())
            .map(|o| {
                values[o.node.index()]
                    .clone()
                    .expect("every node is lowered")
            })
            .collect();
        self.verified.store(true, Ordering::Relaxed);
        let any_bad = any_flag(&checks).map_err(|e| RunError::Backend {
            backend: super::NAME,
            message: e.message,
        })?;
        Ok(Lowered {
            outputs,
            checks,
            any_bad,
        })
    }

    /// Checks MLX produced the dtype and dims the IR promises.
    fn verify(&self, id: NodeId, node: &Node, value: &Array) -> Result<(), RunError> {
        let at = |e: MlxError| node_error(id, node, e);
        let dtype = value.dtype().map_err(at)?;
        let shape = value.shape().map_err(at)?;
        if dtype != node.ty.dtype || shape != self.shapes[id.index()] {
            return Err(at(MlxError::new(format!(
                "MLX made {dtype}{shape:?}, the graph expects {}{:?}",
                node.ty.dtype,
                self.shapes[id.index()]
            ))));
        }
        Ok(())
    }

    /// A rotation's frequencies of its own as MLX takes them: periods (their reciprocals,
    /// in f32), made once per binding.
    pub(super) fn rope_periods(&self, rope: &crate::ir::Rope) -> Result<Option<Array>, MlxError> {
        let Some(freqs) = &rope.freqs else {
            return Ok(None);
        };
        let periods: Vec<f32> = freqs.iter().map(|f| (1.0 / f) as f32).collect();
        let periods = self
            .index_arrays
            .get_f32(&periods, &[periods.len()], self.device)?;
        Ok(Some(periods))
    }

    fn node(
        &self,
        id: NodeId,
        node: &Node,
        x: &[&Array],
        leaves: &[Array],
        checks: &mut Vec<IndexCheck>,
        shared: &mut Vec<(NodeId, Array)>,
    ) -> Result<Array, NodeFailure> {
        if let Some(BiasAdd { product: p, .. }) = &self.bias_adds.of[id.index()] {
            return Ok(x[0].matmul_bias(x[1], x[2], p.transpose_a, p.transpose_b)?);
        }
        if let Some(slot) = &self.fused[id.index()] {
            return self.grouped_product(id, slot, x[0], leaves, shared);
        }
        let prepared = node.inputs.get(1).and_then(|w| self.prepared[w.index()]);
        match (&node.op, prepared) {
            (Op::BlockMatMul(product), Some(p))
                if p.form == PreparedForm::Blocks(product.format) =>
            {
                let parts = &leaves[p.first..p.first + p.count];
                return Ok(x[0].block_matmul_prepared(parts, product.format.id())?);
            }
            (Op::MatMul(product), Some(p)) if self.reads_rows(node, product, p.form) => {
                return Ok(x[0].matmul(&leaves[p.first], false, false)?);
            }
            _ => {}
        }
        let lowering = lowering(&node.op).ok_or_else(|| {
            MlxError::new(format!(
                "{} has no MLX kernel and was not decomposed",
                node.op
            ))
        })?;
        lowering.lower(&mut NodeInput {
            lowering: self,
            id,
            node,
            x,
            shape: &self.shapes[id.index()],
            checks,
            shared,
        })
    }
}

/// The operand whose indices node `n` (of output dims `dims`) checks after evaluation, if
/// it checks any: gathers and scatters (and their products) their indices, windows their offsets, an attention
/// over a run-time length that length. An empty result is made without MLX, and an empty
/// window is never out of range.
fn checked_operand(n: &Node, dims: &[usize]) -> Option<usize> {
    let empty = dims.contains(&0);
    match n.op {
        Op::Gather(_) | Op::ScatterAdd(_) => Some(1),
        Op::DynamicSlice(_) if !empty => Some(1),
        Op::SliceUpdate(_) if !empty => Some(2),
        Op::GatherMatMul(_) | Op::ScatterMatMul(_) if !empty => Some(2),
        Op::Attention(ir::Attention {
            key_length: true, ..
        }) if !empty => Some(n.inputs.len() - 1),
        _ => None,
    }
}

/// Per node that checks indices, the first earlier node computing the same check: the same
/// op (attributes included), the same node at the checked operand, and operands of the
/// same dims. Its flag says it all, and for an attention over a key length its mask is
/// this one's too (unless a mask tensor enters it). A decoder's blocks all write their
/// caches at one offset and attend over one length: building (and running) those once
/// instead of per block saves a few kernels a block. Found once per binding.
pub(crate) fn repeated_sites(graph: &Graph, shapes: &[Vec<usize>]) -> Vec<Option<NodeId>> {
    let mut repeats = vec![None; graph.len()];
    let mut firsts: Vec<(NodeId, usize)> = Vec::new();
    for (id, n) in graph.iter() {
        let Some(operand) = checked_operand(n, &shapes[id.index()]) else {
            continue;
        };
        let same = |&(first, at): &(NodeId, usize)| {
            let f = &graph[first];
            at == operand
                && f.op == n.op
                && f.inputs[at] == n.inputs[at]
                && f.inputs.len() == n.inputs.len()
                && f.inputs
                    .iter()
                    .zip(&n.inputs)
                    .all(|(x, y)| shapes[x.index()] == shapes[y.index()])
        };
        match firsts.iter().find(|f| same(f)) {
            Some(&(first, _)) => repeats[id.index()] = Some(first),
            None => firsts.push((id, operand)),
        }
    }
    repeats
}

/// How MLX computes one op: the arrays of its operands in, its array out (lazy).
pub(crate) trait Lower {
    fn lower(&self, n: &mut NodeInput<'_>) -> Result<Array, NodeFailure>;
}

/// What an op's [`Lower::lower`] reads.
pub(crate) struct NodeInput<'a> {
    pub lowering: &'a Lowering,
    pub id: NodeId,
    pub node: &'a Node,
    /// The operands' arrays.
    pub x: &'a [&'a Array],
    /// Concrete dims of the output.
    pub shape: &'a [usize],
    checks: &'a mut Vec<IndexCheck>,
    /// Arrays built so far this run that repeats of their node reuse ([`repeated_sites`]):
    /// attention masks over a key length, windows' checked starts.
    shared: &'a mut Vec<(NodeId, Array)>,
}

impl NodeInput<'_> {
    /// Records the flag `bad` of the indices (or window offsets) at `operand`, read after
    /// evaluation; unless an earlier node checks the very same indices against the same
    /// bounds ([`repeated_sites`]), whose flag says it all (this one is then never
    /// computed).
    pub(crate) fn check_indices(&mut self, bad: Array, operand: usize) {
        if self.repeats_earlier() {
            return;
        }
        self.checks.push(IndexCheck {
            node: self.id,
            bad,
            indices: self.x[operand].clone(),
        });
    }

    /// Whether an earlier node computes this node's index check ([`repeated_sites`]).
    pub(crate) fn repeats_earlier(&self) -> bool {
        self.lowering.repeats[self.id.index()].is_some()
    }

    /// The array an earlier node of this run that this one repeats ([`repeated_sites`])
    /// built for both: an attention's key-length mask, a window's start.
    pub(crate) fn known_shared(&self) -> Option<Array> {
        let first = self.lowering.repeats[self.id.index()]?;
        self.shared
            .iter()
            .find(|(node, _)| *node == first)
            .map(|(_, array)| array.clone())
    }

    /// Keeps an array this node built for the nodes that repeat it.
    pub(crate) fn remember_shared(&mut self, array: &Array) {
        self.shared.push((self.id, array.clone()));
    }

    /// Where this node's window of dims `window` starts along `axes` at the offsets of
    /// operand `offsets`, inside operand 0: checked after evaluation, and built once for
    /// every node that repeats this one (a decoder's blocks all write their caches at one
    /// position).
    pub(crate) fn window_start(
        &mut self,
        offsets: usize,
        window: &[usize],
        axes: &[usize],
    ) -> Result<Array, NodeFailure> {
        if let Some(start) = self.known_shared() {
            return Ok(start);
        }
        let shape = &self.lowering.shapes[self.node.inputs[0].index()];
        let (start, bad) = Array::window_start(self.x[offsets], shape, window, axes)?;
        self.check_indices(bad, offsets);
        self.remember_shared(&start);
        Ok(start)
    }
}

/// MLX's lowering of `op`: every primitive's (`ops.rs`), and the composites' that MLX has
/// a call for (the others are decomposed at compile time).
fn lowering(op: &Op) -> Option<&dyn Lower> {
    crate::ops::lowering_of!(op, Lower).or(match op {
        Op::Softmax(op) => Some(op),
        Op::LayerNorm(op) => Some(op),
        Op::RmsNorm(op) => Some(op),
        Op::Rope(op) => Some(op),
        _ => None,
    })
}

/// Whether MLX lowers `op` by a call of its own: every primitive, and the composites
/// [`lowering`] names.
pub(crate) fn has_kernel(op: &Op) -> bool {
    lowering(op).is_some()
}

pub(crate) enum NodeFailure {
    Mlx(MlxError),
    Run(RunError),
}

impl From<MlxError> for NodeFailure {
    fn from(e: MlxError) -> NodeFailure {
        NodeFailure::Mlx(e)
    }
}

impl Lowering {
    /// After evaluation: an out-of-range index (or window offset) is an error naming the op
    /// and the index.
    pub(crate) fn verify_indices(&self, check: &IndexCheck) -> Result<(), RunError> {
        let node = &self.graph[check.node];
        let at = |e: MlxError| node_error(check.node, node, e);
        let bad = check.bad.to_host().map_err(at)?;
        if bad.as_slice::<bool>().map(|b| b.iter().any(|v| *v)) != Ok(true) {
            return Ok(());
        }
        let given: Vec<i64> = check
            .indices
            .to_host()
            .map_err(at)?
            .to_f64_vec()
            .into_iter()
            .map(|v| v as i64)
            .collect();
        let shape = &self.shapes[node.inputs[0].index()];
        let site = NodeSite::of(check.node, node);
        let (axes, window) = match &node.op {
            Op::Gather(Gather { axis }) | Op::ScatterAdd(ScatterAdd { axis }) => {
                let size = shape[*axis];
                let index = given
                    .into_iter()
                    .find(|v| *v < 0 || *v >= size as i64)
                    .unwrap_or(-1);
                return Err(RunError::IndexOutOfRange {
                    at: site,
                    index,
                    size,
                });
            }
            Op::GatherMatMul(_) | Op::ScatterMatMul(_) => {
                let size = match &node.op {
                    Op::ScatterMatMul(op) => op.groups,
                    _ => self.shapes[node.inputs[1].index()][0],
                };
                let index = given
                    .into_iter()
                    .find(|v| *v < 0 || *v >= size as i64)
                    .unwrap_or(-1);
                return Err(RunError::IndexOutOfRange {
                    at: site,
                    index,
                    size,
                });
            }
            Op::DynamicSlice(DynamicSlice { axes, .. }) => (axes, &self.shapes[check.node.index()]),
            Op::SliceUpdate(SliceUpdate { axes }) => (axes, &self.shapes[node.inputs[1].index()]),
            Op::Attention(_) => {
                let size = &self.shapes[node.inputs[1].index()];
                let size = size[size.len() - 2];
                let n = given
                    .iter()
                    .copied()
                    .find(|n| !(0..=size as i64).contains(n))
                    .unwrap_or(-1);
                return Err(RunError::WindowOutOfRange {
                    at: site,
                    offset: n.min(0),
                    window: n.max(0) as usize,
                    size,
                });
            }
            _ => {
                return Err(at(MlxError::new(
                    "an index check on an op that indexes nothing",
                )));
            }
        };
        // Offsets per row of axis 0 repeat the axes row after row.
        let (offset, axis) = given
            .into_iter()
            .zip(axes.iter().cycle())
            .find(|(o, a)| *o < 0 || *o + window[**a] as i64 > shape[**a] as i64)
            .unwrap_or((-1, &axes[0]));
        Err(RunError::WindowOutOfRange {
            at: site,
            offset,
            window: window[*axis],
            size: shape[*axis],
        })
    }
}

/// Uploads the constants of `graph` for `device`, indexed by node.
pub(crate) fn upload_constants(graph: &Graph, device: Device) -> Result<Constants, MlxError> {
    graph
        .nodes()
        .iter()
        .map(|n| match &n.op {
            Op::Constant(c) => constant(c, device).map(Some),
            _ => Ok(None),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Constants)
}

fn constant(c: &ConstantData, device: Device) -> Result<Array, MlxError> {
    let dims = c.ty().shape.static_dims().unwrap_or_default();
    Array::from_tensor_on(
        TensorRef {
            dtype: c.ty().dtype,
            shape: &dims,
            bytes: c.bytes(),
        },
        device,
    )
}

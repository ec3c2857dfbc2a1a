//! The graph being built, seen through typed handles.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::marker::PhantomData;

use super::dim::{Dim, DimKind, Dyn, Sizes, describe, symbol_name};
use super::element::Element;
use super::shape::Shape;
use super::tensor::Tensor;
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{self, Graph, NodeId, Op};
use crate::params::{Manifest, ParamPath, ParamSpec, Params};

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
    sizes: Sizes,
    manifest: RefCell<Manifest>,
    /// Dropout on adapters' inputs from here on: the probability and the seed.
    adapter_dropout: Cell<Option<(f64, Option<NodeId>)>>,
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
    build_with(&Sizes::new(), f)
}

/// Builds a graph whose config dims have the values in `sizes`.
///
/// ```
/// use rlx::typed::{Sizes, Tensor, build_with};
/// rlx::config_dims!(Hidden);
/// rlx::dims!(Batch);
///
/// let sizes = Sizes::new().with::<Hidden>(16);
/// let graph = build_with(&sizes, |g| {
///     let x: Tensor<(Batch, Hidden)> = g.input("x");
///     let w: Tensor<(Hidden, Hidden)> = g.param("w");
///     g.output("y", x.matmul(w));
/// })?;
/// assert!(graph.to_string().contains("f32[batch,16] = matmul"));
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
pub fn build_with(
    sizes: &Sizes,
    f: impl for<'g> FnOnce(&'g Scope<'g>),
) -> Result<Graph, BuildErrors> {
    build_model(sizes, f).map(|(graph, _)| graph)
}

/// Builds a graph and the manifest of the weights it declared.
pub fn build_model(
    sizes: &Sizes,
    f: impl for<'g> FnOnce(&'g Scope<'g>),
) -> Result<(Graph, Manifest), BuildErrors> {
    let scope = Scope {
        builder: RefCell::new(GraphBuilder::new()),
        errors: RefCell::new(Vec::new()),
        sizes: sizes.clone(),
        manifest: RefCell::new(Manifest::default()),
        adapter_dropout: Cell::new(None),
        _brand: PhantomData,
    };
    f(&scope);
    // The brand keeps `scope` borrowed for its whole life, so its parts are taken out
    // through the cells rather than moved.
    let mut errors = scope.errors.take();
    let builder = scope.builder.replace(GraphBuilder::new());
    if errors.is_empty() {
        match builder.finish() {
            Ok(graph) => return Ok((graph, scope.manifest.take())),
            Err(e) => errors.push(e),
        }
    }
    Err(BuildErrors(errors))
}

impl<'g> Scope<'g> {
    /// A graph input named `name` of shape `S` and element type `E`.
    /// Each [`Dyn`](super::Dyn) axis gets its own runtime symbol, `name.axis`.
    #[track_caller]
    pub fn input<S: Shape, E: Element>(&'g self, name: &str) -> Tensor<'g, S, E> {
        let mut dims = Vec::with_capacity(S::RANK);
        for (axis, &kind) in S::DIMS.iter().enumerate() {
            dims.push(match kind {
                DimKind::Anonymous => Some(ir::Dim::sym(&format!("{name}.{axis}"))),
                _ => self.dim(kind),
            });
        }
        let id = dims
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .and_then(|dims| self.leaf(true, name, E::DTYPE, ir::Shape::new(dims)));
        Tensor::from_id(self, id)
    }

    /// A state named `name` (see [`State`](super::State)): its dims must be static or
    /// config-bound.
    #[track_caller]
    pub fn state<S: Shape, E: Element>(&'g self, name: &str) -> super::State<'g, S, E> {
        let id = self.shape(S::DIMS).and_then(|shape| {
            let result = self.builder.borrow_mut().state(name, E::DTYPE, shape);
            self.ok(result)
        });
        super::State::new(self, id, name)
    }

    /// Records that the state `name` takes `value` when a run ends.
    #[track_caller]
    pub(crate) fn write_state(&self, name: &str, value: NodeId) {
        let result = self.builder.borrow_mut().write(name, value);
        self.record(result.err());
    }

    /// A weight named `name` (bound once per executable). Its dims must be static or
    /// config-bound.
    #[track_caller]
    pub fn param<S: Shape, E: Element>(&'g self, name: &str) -> Tensor<'g, S, E> {
        self.param_at(&ParamPath::root().field(name))
    }

    /// The weights of `P`, declared at the top level (see [`Params`]).
    #[track_caller]
    pub fn params<P: Params<'g>>(&'g self) -> P {
        P::declare(self, &ParamPath::root())
    }

    /// The size of `D` when the graph is built: its value if static, its configured value
    /// if config-bound, `None` for a runtime dim.
    pub fn dim_value<D: Dim>(&self) -> Option<usize> {
        self.sizes.get::<D>()
    }

    /// The GGUF block format the config keeps the weight of checkpoint key `key` in
    /// ([`Sizes::with_block_format`]), if any.
    pub fn block_format(&self, key: &str) -> Option<crate::gguf::GgmlType> {
        self.sizes.block_format(key)
    }

    /// The scale of the low-rank adapter the config gives the weight of checkpoint key
    /// `key` ([`Sizes::with_adapter`]), if any.
    pub fn adapter(&self, key: &str) -> Option<f64> {
        self.sizes.adapter(key)
    }

    /// From here on, every adapter a [`Projection`](crate::nn::Projection) adds drops its
    /// input with probability `p` ([`Tensor::dropout`], a stream per projection), the masks
    /// drawn from `seed`: what a fine-tuning loss sets; graphs for inference never do.
    pub fn drop_adapter_inputs(&self, p: f64, seed: Tensor<'g, (), i64>) {
        self.adapter_dropout.set(Some((p, seed.id())));
    }

    /// The dropout on adapters' inputs set by [`Scope::drop_adapter_inputs`], if any.
    pub fn adapter_dropout(&'g self) -> Option<(f64, Tensor<'g, (), i64>)> {
        self.adapter_dropout
            .get()
            .map(|(p, seed)| (p, Tensor::from_id(self, seed)))
    }

    /// How products with weights kept in blocks take their activations
    /// ([`Sizes::with_block_activations`]).
    pub fn block_activations(&self) -> crate::ir::ActivationPrecision {
        self.sizes.block_activations()
    }

    /// A weight kept in GGUF block `format`, declared at `at`: `rows` rows of the blocks of
    /// `values` values each (`u8`, `[rows, values / 32 * block bytes]`), bound from the
    /// file's bytes as they are. `values` must be a multiple of the format's block.
    #[track_caller]
    pub fn block_param_at<R: Dim>(
        &'g self,
        at: &ParamPath,
        values: usize,
        format: crate::gguf::GgmlType,
    ) -> Tensor<'g, (R, Dyn), u8> {
        let block = format.block_values();
        if block == 0 || !values.is_multiple_of(block) {
            let reason = format!(
                "`{}`: {values} values are not whole {} blocks",
                at.key(),
                format.name()
            );
            return Tensor::from_id(self, self.reject("param", None, reason));
        }
        let bytes = values / block * format.block_bytes();
        let id = self.declare_spec(
            at,
            ir::DType::U8,
            &[R::KIND, DimKind::Static(bytes)],
            Some(format),
        );
        Tensor::from_id(self, id)
    }

    /// A weight declared at `at`, recorded in the manifest with its checkpoint layout.
    #[track_caller]
    pub fn param_at<S: Shape, E: Element>(&'g self, at: &ParamPath) -> Tensor<'g, S, E> {
        let id = self.declare_param(at, E::DTYPE, S::DIMS);
        Tensor::from_id(self, id)
    }

    /// A tensor of shape `S` with every element `value` (a broadcast scalar: no data is
    /// stored, and runtime dims are fine).
    #[track_caller]
    pub fn full<S: Shape, E: Element + Into<crate::ir::Scalar>>(
        &'g self,
        value: E,
    ) -> Tensor<'g, S, E> {
        let scalar = self.scalar(value.into(), E::DTYPE);
        Tensor::<(), E>::from_id(self, scalar).broadcast()
    }

    /// The size of `D` in this graph: a static dim's value or a config dim's value. A
    /// runtime dim, or a config dim without a value, records an error and gives 0.
    #[track_caller]
    pub fn size<D: Dim>(&self) -> usize {
        match self.sizes.resolve(D::KIND) {
            Some(n) => n,
            None => {
                self.unsized_dim(D::KIND);
                0
            }
        }
    }

    /// The config flag `name` of this graph (see [`Sizes::with_flag`]); a flag the config
    /// did not set records an error and reads as off.
    #[track_caller]
    pub fn flag(&self, name: &str) -> bool {
        match self.sizes.flag(name) {
            Some(on) => on,
            None => {
                self.reject(
                    "flag",
                    None,
                    format!("the config flag `{name}` is not set: give it with `Sizes::with_flag(\"{name}\", ..)`"),
                );
                false
            }
        }
    }

    /// Resolves typed dims to an IR shape; `None` (with the error recorded) if a config dim
    /// has no value.
    #[track_caller]
    pub(crate) fn shape(&self, dims: &[DimKind]) -> Option<ir::Shape> {
        let mut out = Vec::with_capacity(dims.len());
        for &kind in dims {
            out.push(self.dim(kind)?);
        }
        Some(ir::Shape::new(out))
    }

    /// One typed dim in the IR.
    #[track_caller]
    pub(crate) fn dim(&self, kind: DimKind) -> Option<ir::Dim> {
        match kind {
            DimKind::Static(n) => Some(ir::Dim::Static(n)),
            DimKind::Runtime(name) => Some(ir::Dim::sym(&symbol_name(name))),
            DimKind::Config(_) => match self.sizes.resolve(kind) {
                Some(n) => Some(ir::Dim::Static(n)),
                None => {
                    self.unsized_dim(kind);
                    None
                }
            },
            DimKind::Anonymous => {
                self.unsized_dim(kind);
                None
            }
        }
    }

    /// The IR type of a node.
    pub(crate) fn ty(&self, id: NodeId) -> Option<ir::TensorType> {
        self.builder.borrow().ty(id).cloned()
    }

    /// Checks that the node `id`, made by `op` from `operand`, has the dims its typed handle
    /// declares (`Dyn` accepts any size): for ops whose result dims the types cannot compute.
    #[track_caller]
    pub(crate) fn declared(
        &self,
        op: &str,
        operand: Option<NodeId>,
        id: Option<NodeId>,
        dims: &[DimKind],
    ) -> Option<NodeId> {
        let ty = self.ty(id?)?;
        // `None` stands for `Dyn`, which accepts any size.
        let mut expected = Vec::with_capacity(dims.len());
        for &kind in dims {
            expected.push(match kind {
                DimKind::Anonymous => None,
                _ => Some(self.dim(kind)?),
            });
        }
        let agrees = ty.shape.rank() == dims.len()
            && expected
                .iter()
                .zip(ty.shape.dims())
                .all(|(want, dim)| want.as_ref().is_none_or(|w| w == dim));
        if agrees {
            return id;
        }
        let reason = format!(
            "the result is {} but its type says {}",
            ty.shape,
            describe(dims)
        );
        self.reject(op, operand, reason)
    }

    /// The static size of `kind` for `op` on `operand`: a runtime dim is rejected with
    /// "`op` needs a static `what`"; a config dim without a size or `Dyn` records its own
    /// error. `None` after an error.
    #[track_caller]
    pub(crate) fn static_size(
        &self,
        op: &str,
        operand: Option<NodeId>,
        kind: DimKind,
        what: &str,
    ) -> Option<usize> {
        if let DimKind::Runtime(_) = kind {
            let reason = format!("{op} needs a static {what}, but `{kind}` is a runtime dim");
            self.reject(op, operand, reason);
            return None;
        }
        self.dim(kind)?.as_static()
    }

    #[track_caller]
    fn unsized_dim(&self, kind: DimKind) {
        let reason = match kind {
            DimKind::Runtime(name) => {
                format!("`{name}` is a runtime dim: its size is known only when the graph runs")
            }
            DimKind::Anonymous => "a `Dyn` dim has no size to give here: name the dim with \
                                   `rlx::dims!` or make it static"
                .to_string(),
            _ => format!(
                "the config dim `{kind}` has no size: give it with `Sizes::with::<{kind}>(..)`"
            ),
        };
        self.reject("dim", None, reason);
    }

    #[track_caller]
    fn declare_param(&self, at: &ParamPath, dtype: ir::DType, dims: &[DimKind]) -> Option<NodeId> {
        self.declare_spec(at, dtype, dims, None)
    }

    #[track_caller]
    fn declare_spec(
        &self,
        at: &ParamPath,
        dtype: ir::DType,
        dims: &[DimKind],
        format: Option<crate::gguf::GgmlType>,
    ) -> Option<NodeId> {
        let shape = self.shape(dims)?;
        if at.key().is_empty() {
            return self.reject("param", None, "a param needs a name".to_string());
        }
        if at.splits().len() > 1 {
            let reason = format!("`{}` is split twice; only one split is supported", at.key());
            return self.reject("param", None, reason);
        }
        let split = at.splits().first().copied();
        let spec = ParamSpec {
            name: ParamSpec::name_for(at.key(), split),
            key: at.key().to_string(),
            dtype,
            shape: shape.clone(),
            transpose: at.is_transposed(),
            split,
            format,
        };
        if let Err(reason) = self.check_layout(&spec) {
            return self.reject("param", None, reason);
        }
        let id = self.leaf(false, &spec.name, dtype, shape)?;
        self.manifest.borrow_mut().params.push(spec);
        Some(id)
    }

    /// A param's checkpoint layout must be possible and agree with the other params read from
    /// the same checkpoint tensor.
    fn check_layout(&self, spec: &ParamSpec) -> Result<(), String> {
        let key = &spec.key;
        if let Some(shape) = spec.static_shape() {
            if spec.transpose && shape.len() < 2 {
                return Err(format!("`{key}` is transposed but has fewer than 2 dims"));
            }
            if spec.file_shape().is_none() {
                return Err(format!("`{key}`: the split axis is out of range"));
            }
        }
        if let Some(split) = spec.split
            && (split.parts == 0 || split.index >= split.parts)
        {
            return Err(format!(
                "`{key}`: split part {} of {} does not exist",
                split.index, split.parts
            ));
        }
        let manifest = self.manifest.borrow();
        for other in manifest.params.iter().filter(|p| &p.key == key) {
            let agree = other.dtype == spec.dtype
                && other.file_shape() == spec.file_shape()
                && other.split.map(|s| (s.axis, s.parts)) == spec.split.map(|s| (s.axis, s.parts))
                && other.split.is_some();
            if !agree {
                return Err(format!(
                    "`{key}` is read by two params that do not split it the same way"
                ));
            }
            if other.split.map(|s| s.index) == spec.split.map(|s| s.index) {
                return Err(format!(
                    "`{key}` part {:?} is declared twice",
                    spec.split.map(|s| s.index).unwrap_or(0)
                ));
            }
        }
        Ok(())
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

//! Random instances of each op, for differential testing: an op's module says how to make
//! a valid random node of it from a graph under construction ([`OpKind::sample`]); the
//! driver that owns the graph, the randomness and the values implements [`Sampler`]
//! (`rlx_testkit::fuzz` does).

use crate::ir::{ConstantData, DType, Dim, NodeId, Op, Scalar, TensorType};

/// What an op's random-case generator draws on: randomness, the nodes made so far (to pick
/// operands from), and new inputs, params and constants.
///
/// ```
/// use rlx::ir::{DType, Dim, NodeId, OpKind, Sampler, TensorType, ConstantData};
/// /// A sampler with one `f32[3, 4]` input and no randomness.
/// struct One(Vec<TensorType>);
/// impl Sampler for One {
///     fn below(&mut self, _: usize) -> usize { 0 }
///     fn uniform(&mut self, lo: f64, _: f64) -> f64 { lo }
///     fn ty(&self, id: NodeId) -> TensorType { self.0[id.index()].clone() }
///     fn sizes(&self, id: NodeId) -> Vec<usize> { self.0[id.index()].shape.static_dims().unwrap() }
///     fn operand(&mut self, accept: &dyn Fn(&TensorType) -> bool) -> Option<NodeId> {
///         accept(&self.0[0]).then(|| NodeId::new(0))
///     }
///     fn dim(&mut self) -> Dim { Dim::from(2) }
///     fn input(&mut self, dtype: DType, dims: Vec<Dim>) -> Option<NodeId> {
///         self.0.push(TensorType::new(dtype, dims));
///         Some(NodeId::new(self.0.len() - 1))
///     }
///     fn param(&mut self, dtype: DType, dims: &[usize], _: Option<&[f64]>) -> Option<NodeId> {
///         self.input(dtype, dims.iter().map(|d| Dim::from(*d)).collect())
///     }
///     fn constant(&mut self, data: ConstantData) -> Option<NodeId> {
///         self.0.push(data.ty().clone());
///         Some(NodeId::new(self.0.len() - 1))
///     }
/// }
/// let mut s = One(vec![TensorType::new(DType::F32, [3, 4])]);
/// let (op, operands) = OpKind::Softmax.sample(&mut s).unwrap();
/// assert_eq!(op.to_string(), "log_softmax[axis=0]");
/// assert_eq!(operands, [NodeId::new(0)]);
/// ```
pub trait Sampler {
    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize;
    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f64, hi: f64) -> f64;
    /// The type of a node made so far.
    fn ty(&self, id: NodeId) -> TensorType;
    /// The sizes of a node's dims under the case's binding of its symbols.
    fn sizes(&self, id: NodeId) -> Vec<usize>;
    /// A node made so far whose type `accept`s, if one turns up.
    fn operand(&mut self, accept: &dyn Fn(&TensorType) -> bool) -> Option<NodeId>;
    /// A random dim: 0, 1, a small size, or one of the case's symbols.
    fn dim(&mut self) -> Dim;
    /// A new input of `dtype` and `dims` with random values.
    fn input(&mut self, dtype: DType, dims: Vec<Dim>) -> Option<NodeId>;
    /// A new param of `dtype` and `dims` holding `values` (rounded to the dtype), or random
    /// ones.
    fn param(&mut self, dtype: DType, dims: &[usize], values: Option<&[f64]>) -> Option<NodeId>;
    /// A new constant.
    fn constant(&mut self, data: ConstantData) -> Option<NodeId>;
}

/// A random op node: the op and its operands.
pub type Sampled = Option<(Op, Vec<NodeId>)>;

/// True with probability `p`.
pub(crate) fn chance(s: &mut dyn Sampler, p: f64) -> bool {
    s.uniform(0.0, 1.0) < p
}

/// One of `items` (not empty).
pub(crate) fn pick<T: Copy>(s: &mut dyn Sampler, items: &[T]) -> T {
    items[s.below(items.len())]
}

/// The dims of a node made so far.
pub(crate) fn dims(s: &dyn Sampler, id: NodeId) -> Vec<Dim> {
    s.ty(id).shape.dims().to_vec()
}

/// A random dtype, mostly `f32`.
pub(crate) fn dtype(s: &mut dyn Sampler) -> DType {
    match s.below(12) {
        0..=5 => DType::F32,
        6 => DType::F64,
        7 => DType::F16,
        8 => DType::BF16,
        9 => DType::I32,
        10 => DType::I64,
        _ => DType::Bool,
    }
}

/// The float dtypes, `f32` twice as likely.
pub(crate) const FLOATS: [DType; 4] = [DType::F32, DType::F32, DType::F16, DType::BF16];

/// An operand of rank at least 1 whose dtype `admits`, and one of its axes.
pub(crate) fn axis_of(s: &mut dyn Sampler, admits: fn(DType) -> bool) -> Option<(NodeId, usize)> {
    let x = s.operand(&|t| admits(t.dtype) && t.rank() > 0)?;
    let axis = s.below(s.ty(x).rank());
    Some((x, axis))
}

/// A second operand for an elementwise op with `a`: `a` itself, another node of its type,
/// a new input with `a`'s dims or a suffix of them (broadcast), or a scalar.
pub(crate) fn partner(s: &mut dyn Sampler, a: NodeId) -> Option<NodeId> {
    let ty = s.ty(a);
    let (dtype, dims) = (ty.dtype, ty.shape.dims().to_vec());
    match s.below(5) {
        0 => Some(a),
        1 => s.operand(&|t| *t == ty),
        2 => {
            let keep = s.below(dims.len() + 1);
            let mut suffix = dims[dims.len() - keep..].to_vec();
            if !suffix.is_empty() && chance(s, 0.3) {
                suffix[0] = Dim::from(1);
            }
            s.input(dtype, suffix)
        }
        3 => {
            let value = if dtype.is_float() {
                Scalar::Float(s.uniform(-2.0, 2.0))
            } else {
                Scalar::Int(s.below(7) as i64 - 3)
            };
            s.constant(ConstantData::scalar(value, dtype))
        }
        _ => s.input(dtype, dims),
    }
}

/// `(before, after)` padding per axis of a window of `kernel`, each at most half of it.
pub(crate) fn window_padding(s: &mut dyn Sampler, kernel: &[usize]) -> Vec<(usize, usize)> {
    kernel
        .iter()
        .map(|k| (s.below(k / 2 + 1), s.below(k / 2 + 1)))
        .collect()
}

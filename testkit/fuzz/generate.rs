//! Random well-typed graphs: each step picks an op kind and lets the op's own module
//! propose a node of it ([`OpKind::sample`]) over the nodes made so far, and the builder's
//! inference accepts or rejects it, so every graph is one the IR admits. Shapes mix static
//! dims (including 0 and 1) with two symbols whose values are chosen with the case, which
//! also lets index operands and slice bounds be valid.

use rlx::ir::TensorType;
use rlx::ir::{BinaryOp, ConstantData, DType, Dim, Graph, NodeId, Op, OpKind, Sampler};
use rlx::prelude::GraphBuilder;
use rlx::tensor::HostTensor;

use crate::rng::Rng;

/// One generated case: a graph whose every computed node is an output, its inputs, params
/// and states with values, and the values of its runtime dims. Some graphs write their
/// states (often a `slice_update` of the state itself, which the CPU plans in place).
#[derive(Clone, Debug)]
pub struct Case {
    /// The seed it was generated from.
    pub seed: u64,
    /// The graph.
    pub graph: Graph,
    /// Values of the graph's inputs.
    pub inputs: Vec<(String, HostTensor)>,
    /// Values of the graph's params.
    pub params: Vec<(String, HostTensor)>,
    /// Values of the graph's states before the run, in graph order.
    pub states: Vec<(String, HostTensor)>,
    /// Values of the runtime dims.
    pub dims: Vec<(String, usize)>,
}

const SYMBOLS: [&str; 2] = ["n", "m"];
const FLOATS: [DType; 4] = [DType::F32, DType::F32, DType::F16, DType::BF16];

/// How often a step proposes each kind, relative to 1: the elementwise families hold many
/// functions, and products are where the kernels' blocking lives.
fn weight(kind: OpKind) -> usize {
    match kind {
        OpKind::Unary | OpKind::Binary => 3,
        OpKind::MatMul => 2,
        _ => 1,
    }
}

struct Generator {
    rng: Rng,
    b: GraphBuilder,
    /// Value of each symbol in `SYMBOLS`.
    values: [usize; 2],
    inputs: Vec<(String, HostTensor)>,
    params: Vec<(String, HostTensor)>,
    states: Vec<(String, HostTensor, NodeId)>,
    nodes: Vec<NodeId>,
    /// The input and state nodes (not outputs).
    input_nodes: Vec<NodeId>,
}

impl Sampler for Generator {
    fn below(&mut self, n: usize) -> usize {
        self.rng.below(n)
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.rng.uniform(lo, hi)
    }

    fn ty(&self, id: NodeId) -> TensorType {
        self.b.ty(id).expect("a built node").clone()
    }

    fn sizes(&self, id: NodeId) -> Vec<usize> {
        let values = self.values;
        self.b
            .ty(id)
            .expect("a built node")
            .shape
            .dims()
            .iter()
            .map(|d| {
                d.eval(&mut |s: &rlx::ir::Symbol| {
                    SYMBOLS
                        .iter()
                        .position(|n| *n == s.name())
                        .map(|i| values[i])
                })
                .unwrap_or(0)
            })
            .collect()
    }

    /// More often a recent node (chains) than an old one (shared subexpressions).
    fn operand(&mut self, accept: &dyn Fn(&TensorType) -> bool) -> Option<NodeId> {
        for _ in 0..8 {
            let len = self.nodes.len();
            let back = self.rng.below(len.min(4)).min(len - 1);
            let id = if self.rng.chance(0.6) {
                self.nodes[len - 1 - back]
            } else {
                self.nodes[self.rng.below(len)]
            };
            if accept(self.b.ty(id).expect("a built node")) {
                return Some(id);
            }
        }
        None
    }

    fn dim(&mut self) -> Dim {
        match self.rng.below(20) {
            0 => Dim::from(0),
            1..=4 => Dim::from(1),
            5..=7 => Dim::sym(SYMBOLS[0]),
            8..=9 => Dim::sym(SYMBOLS[1]),
            _ => Dim::from(2 + self.rng.below(3)),
        }
    }

    fn input(&mut self, dtype: DType, dims: Vec<Dim>) -> Option<NodeId> {
        let name = format!("x{}", self.inputs.len());
        let id = self.b.input(&name, dtype, dims).ok()?;
        let value = self.values(dtype, &self.sizes(id));
        self.inputs.push((name, value));
        self.input_nodes.push(id);
        Some(id)
    }

    fn param(&mut self, dtype: DType, dims: &[usize], values: Option<&[f64]>) -> Option<NodeId> {
        let name = format!("w{}", self.params.len());
        let id = self.b.param(&name, dtype, dims).ok()?;
        let value = match values {
            Some(v) => tensor(dtype, dims, v),
            None => self.values(dtype, dims),
        };
        self.params.push((name, value));
        Some(id)
    }

    fn constant(&mut self, data: ConstantData) -> Option<NodeId> {
        Some(self.b.constant(data))
    }
}

impl Generator {
    /// A state of static dims (a state's shape is fixed), read by the ops that follow.
    fn state(&mut self) {
        let rank = self.rng.below(4);
        let dims: Vec<usize> = (0..rank).map(|_| self.rng.below(5)).collect();
        let dtype = if self.rng.chance(0.8) {
            self.rng.pick(&FLOATS)
        } else {
            self.rng.pick(&[DType::F64, DType::I32, DType::Bool])
        };
        let name = format!("s{}", self.states.len());
        let Ok(id) = self.b.state(&name, dtype, dims.as_slice()) else {
            return;
        };
        let value = self.values(dtype, &dims);
        self.states.push((name, value, id));
        self.nodes.push(id);
        self.input_nodes.push(id);
    }

    /// What the state `state` is written, if anything: mostly a window of new values over
    /// the state itself (`slice_update`), else a computed node of its type.
    fn write(&mut self, state: NodeId) -> Option<NodeId> {
        let ty = self.ty(state);
        if self.rng.chance(0.3) {
            return None;
        }
        if ty.rank() > 0 && self.rng.chance(0.7) {
            let sizes = self.sizes(state);
            let axis = self.rng.below(ty.rank());
            let window = self.rng.below(sizes[axis] + 1);
            let mut dims = ty.shape.dims().to_vec();
            dims[axis] = Dim::from(window);
            let update = self.input(ty.dtype, dims)?;
            let offset = self.rng.below(sizes[axis] - window + 1) as i64;
            let offset = self.constant(ConstantData::scalar(
                rlx::ir::Scalar::Int(offset),
                DType::I64,
            ))?;
            let op = Op::SliceUpdate(rlx::ir::SliceUpdate { axes: vec![axis] });
            let id = self.b.op(op, &[state, update, offset]).ok()?;
            self.nodes.push(id);
            return Some(id);
        }
        let same: Vec<NodeId> = self
            .nodes
            .iter()
            .copied()
            .filter(|&id| id != state && self.ty(id) == ty)
            .collect();
        (!same.is_empty()).then(|| same[self.rng.below(same.len())])
    }

    /// Random values for a tensor of `dtype` and `dims`: floats mostly in [-2, 2] with a few
    /// zeros, infinities, NaNs, tiny and large values; small integers; booleans.
    fn values(&mut self, dtype: DType, dims: &[usize]) -> HostTensor {
        let n: usize = dims.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|_| {
                if dtype.is_float() {
                    match self.rng.below(100) {
                        0 => 0.0,
                        1 => f64::INFINITY,
                        2 => f64::NEG_INFINITY,
                        3 => f64::NAN,
                        4 => 1e-30,
                        5 => -3e3,
                        _ => self.rng.uniform(-2.0, 2.0),
                    }
                } else if dtype == DType::Bool {
                    f64::from(u8::from(self.rng.chance(0.5)))
                } else {
                    self.rng.below(11) as f64 - 5.0
                }
            })
            .collect();
        tensor(dtype, dims, &v)
    }

    /// One proposed node: a kind drawn by [`weight`] and sampled by its own module, or
    /// (one step in twenty-odd) a value used twice by one op, which shares a subexpression.
    fn step(&mut self) -> Option<(Op, Vec<NodeId>)> {
        let total: usize = OpKind::ALL.iter().map(|k| weight(*k)).sum();
        let mut draw = self.rng.below(total + 1);
        for kind in OpKind::ALL {
            if draw < weight(*kind) {
                return kind.sample(self);
            }
            draw -= weight(*kind);
        }
        let x = self.operand(&|t| t.dtype.is_float())?;
        let ty = self.ty(x);
        let y = self.input(ty.dtype, ty.shape.dims().to_vec())?;
        let shared = self.b.add(x, y).ok()?;
        self.nodes.push(shared);
        Some((Op::Binary(BinaryOp::Mul), vec![shared, shared]))
    }
}

/// A tensor of `dtype` holding `values` (converted as `as` would).
pub fn tensor(dtype: DType, dims: &[usize], values: &[f64]) -> HostTensor {
    let dims = dims.to_vec();
    let t = match dtype {
        DType::F32 => HostTensor::from_vec(values.iter().map(|&v| v as f32).collect(), dims),
        DType::F64 => HostTensor::from_vec(values.to_vec(), dims),
        DType::F16 => HostTensor::from_vec(
            values.iter().map(|&v| half::f16::from_f64(v)).collect(),
            dims,
        ),
        DType::BF16 => HostTensor::from_vec(
            values.iter().map(|&v| half::bf16::from_f64(v)).collect(),
            dims,
        ),
        DType::I32 => HostTensor::from_vec(values.iter().map(|&v| v as i32).collect(), dims),
        DType::I64 => HostTensor::from_vec(values.iter().map(|&v| v as i64).collect(), dims),
        DType::I8 => HostTensor::from_vec(values.iter().map(|&v| v as i8).collect(), dims),
        DType::U8 => HostTensor::from_vec(values.iter().map(|&v| v as u8).collect(), dims),
        DType::Bool => HostTensor::from_vec(values.iter().map(|&v| v != 0.0).collect(), dims),
    };
    t.expect("values fill the dims")
}

/// The case of `seed`: one to three inputs, then up to `steps` ops; every op node is an
/// output.
pub fn generate(seed: u64, steps: usize) -> Case {
    let mut rng = Rng(seed);
    let values = [rng.pick(&[0, 1, 1, 2, 3, 3, 4]), rng.pick(&[1, 2, 3, 5])];
    let mut g = Generator {
        rng,
        b: GraphBuilder::new(),
        values,
        inputs: Vec::new(),
        params: Vec::new(),
        states: Vec::new(),
        nodes: Vec::new(),
        input_nodes: Vec::new(),
    };
    // One case in eight starts from inputs with large axes, which cross the kernels'
    // blocking and threading thresholds (GEMM panels, parallel splits above 32k elements).
    let large = g.rng.chance(0.125);
    for _ in 0..1 + g.rng.below(3) {
        let rank = g.rng.below(4);
        let mut dims: Vec<Dim> = (0..rank).map(|_| g.dim()).collect();
        if large {
            for d in dims.iter_mut() {
                if g.rng.chance(0.5) {
                    *d = Dim::from(g.rng.pick(&[33, 64, 130, 257, 700]));
                }
            }
        }
        let numel = |d: &[Dim]| {
            d.iter()
                .map(|d| d.as_static().unwrap_or(5))
                .product::<usize>()
        };
        while numel(&dims) > 60_000 {
            let biggest = (0..dims.len())
                .max_by_key(|&i| dims[i].as_static().unwrap_or(0))
                .unwrap_or(0);
            dims[biggest] = Dim::from(3);
        }
        let dtype = if g.rng.chance(0.7) {
            g.rng.pick(&FLOATS)
        } else {
            g.rng
                .pick(&[DType::F64, DType::I32, DType::I64, DType::Bool])
        };
        if let Some(id) = g.input(dtype, dims) {
            g.nodes.push(id);
        }
    }
    // One case in four reads a state.
    if g.rng.chance(0.25) {
        g.state();
    }
    let mut made = 0;
    for _ in 0..steps * 4 {
        if made == steps {
            break;
        }
        let Some((op, operands)) = g.step() else {
            continue;
        };
        if let Ok(id) = g.b.op(op, &operands) {
            g.nodes.push(id);
            made += 1;
        }
    }
    let writes: Vec<(String, NodeId)> = g
        .states
        .clone()
        .into_iter()
        .filter_map(|(name, _, state)| Some((name, g.write(state)?)))
        .collect();
    let mut outputs = 0;
    let computed: Vec<NodeId> = g
        .nodes
        .iter()
        .copied()
        .filter(|id| !g.input_nodes.contains(id))
        .collect();
    for id in computed {
        if g.b.output(&format!("v{}", id.index()), id).is_ok() {
            outputs += 1;
        }
    }
    if outputs == 0 {
        let first = g.nodes[0];
        let _ = g.b.output("v_input", first);
    }
    let dims: Vec<(String, usize)> = SYMBOLS
        .iter()
        .zip(values)
        .map(|(s, v)| (s.to_string(), v))
        .collect();
    for (name, value) in writes {
        g.b.write(&name, value)
            .expect("a write of the state's type");
    }
    let graph = g.b.finish().expect("every node was accepted by inference");
    // Only the symbols the graph uses may be given.
    let used: Vec<String> = graph
        .nodes()
        .iter()
        .flat_map(|n| n.ty.shape.dims().iter().flat_map(|d| d.symbols()))
        .map(|s| s.name().to_string())
        .collect();
    let dims: Vec<(String, usize)> = dims.into_iter().filter(|(s, _)| used.contains(s)).collect();
    Case {
        seed,
        graph,
        inputs: g.inputs,
        params: g.params,
        states: g.states.into_iter().map(|(n, v, _)| (n, v)).collect(),
        dims,
    }
}

//! The emitter gradient rules build with: the forward graph's nodes, then backward nodes
//! appended with their types inferred (and checked) as the builder does, each carrying the
//! origin of the forward node whose rule made it.

use crate::ir::{Broadcast, Cumsum, Reduce, Reshape};
use std::panic::Location;

use super::GradError;
use crate::backend::NodeSite;
use crate::ir::{
    BinaryOp, ConstantData, DType, Dim, Graph, Node, NodeId, Op, Output, ReduceOp, Scalar, Shape,
    TensorType, UnaryOp,
};

pub(crate) struct Emitter<'f> {
    forward: &'f Graph,
    nodes: Vec<Node>,
    /// The forward node whose rule is running.
    at: NodeId,
    origin: Option<&'static Location<'static>>,
}

impl<'f> Emitter<'f> {
    pub fn new(forward: &'f Graph) -> Emitter<'f> {
        Emitter {
            forward,
            nodes: forward.nodes().to_vec(),
            at: NodeId::new(0),
            origin: None,
        }
    }

    /// Attributes the nodes emitted next to the rule of forward node `id`.
    pub fn at(&mut self, id: NodeId) {
        self.at = id;
        self.origin = self.forward[id].origin;
    }

    /// The forward node a rule runs for.
    pub fn node(&self, id: NodeId) -> &'f Node {
        &self.forward[id]
    }

    pub fn site(&self) -> NodeSite {
        NodeSite::of(self.at, &self.forward[self.at])
    }

    pub fn ty(&self, id: NodeId) -> &TensorType {
        &self.nodes[id.index()].ty
    }

    pub fn shape(&self, id: NodeId) -> Shape {
        self.ty(id).shape.clone()
    }

    pub fn dtype(&self, id: NodeId) -> DType {
        self.ty(id).dtype
    }

    pub fn finish(self, outputs: Vec<Output>) -> Result<Graph, GradError> {
        let site = self.site();
        let writes = self.forward.writes().to_vec();
        Graph::assemble(self.nodes, outputs, writes).map_err(|e| GradError::Rule {
            at: site,
            message: e.to_string(),
        })
    }

    /// Appends `op(inputs)`.
    pub fn op(&mut self, op: Op, inputs: &[NodeId]) -> Result<NodeId, GradError> {
        let types: Vec<TensorType> = inputs.iter().map(|i| self.ty(*i).clone()).collect();
        let ty = op.infer(&types).map_err(|e| GradError::Rule {
            at: self.site(),
            message: format!("`{op}`: {e}"),
        })?;
        let id = NodeId::new(self.nodes.len());
        let mut node = Node::new(op, inputs.to_vec(), ty);
        node.origin = self.origin;
        self.nodes.push(node);
        Ok(id)
    }

    /// Appends forward node `id`'s op again over `inputs`, with its origin: a value
    /// computed again for the backward pass.
    pub fn copy(&mut self, id: NodeId, inputs: &[NodeId]) -> Result<NodeId, GradError> {
        let (at, origin) = (self.at, self.origin);
        self.at(id);
        let copy = self.op(self.forward[id].op.clone(), inputs);
        self.at = at;
        self.origin = origin;
        copy
    }

    pub fn constant(&mut self, data: ConstantData) -> NodeId {
        let id = NodeId::new(self.nodes.len());
        let mut node = Node::new(Op::Constant(data.clone()), vec![], data.ty().clone());
        node.origin = self.origin;
        self.nodes.push(node);
        id
    }

    /// A rank-0 constant of `dtype`.
    pub fn scalar(&mut self, value: f64, dtype: DType) -> NodeId {
        self.constant(ConstantData::scalar(Scalar::Float(value), dtype))
    }

    pub fn unary(&mut self, kind: UnaryOp, x: NodeId) -> Result<NodeId, GradError> {
        self.op(Op::Unary(kind), &[x])
    }

    pub fn binary(&mut self, kind: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId, GradError> {
        self.op(Op::Binary(kind), &[a, b])
    }

    pub fn add(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, GradError> {
        self.binary(BinaryOp::Add, a, b)
    }

    pub fn sub(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, GradError> {
        self.binary(BinaryOp::Sub, a, b)
    }

    pub fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, GradError> {
        self.binary(BinaryOp::Mul, a, b)
    }

    pub fn div(&mut self, a: NodeId, b: NodeId) -> Result<NodeId, GradError> {
        self.binary(BinaryOp::Div, a, b)
    }

    pub fn neg(&mut self, x: NodeId) -> Result<NodeId, GradError> {
        self.unary(UnaryOp::Neg, x)
    }

    /// `x * value` with `value` a scalar of `x`'s dtype.
    pub fn scale(&mut self, x: NodeId, value: f64) -> Result<NodeId, GradError> {
        let c = self.scalar(value, self.dtype(x));
        self.mul(x, c)
    }

    /// `x + value` with `value` a scalar of `x`'s dtype.
    pub fn shift(&mut self, x: NodeId, value: f64) -> Result<NodeId, GradError> {
        let c = self.scalar(value, self.dtype(x));
        self.add(x, c)
    }

    /// `cond ? x : 0`.
    pub fn keep_where(&mut self, cond: NodeId, x: NodeId) -> Result<NodeId, GradError> {
        let zero = self.scalar(0.0, self.dtype(x));
        self.op(Op::Where, &[cond, x, zero])
    }

    pub fn reshape(&mut self, x: NodeId, shape: Shape) -> Result<NodeId, GradError> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        self.op(Op::Reshape(Reshape { shape }), &[x])
    }

    pub fn broadcast(&mut self, x: NodeId, shape: Shape) -> Result<NodeId, GradError> {
        if self.shape(x) == shape {
            return Ok(x);
        }
        self.op(Op::Broadcast(Broadcast { shape }), &[x])
    }

    pub fn reduce(
        &mut self,
        op: ReduceOp,
        x: NodeId,
        axes: Vec<usize>,
        keep_dims: bool,
    ) -> Result<NodeId, GradError> {
        if axes.is_empty() {
            return Ok(x);
        }
        self.op(
            Op::Reduce(Reduce {
                op,
                axes,
                keep_dims,
            }),
            &[x],
        )
    }

    /// Zeros of `shape` and `dtype` (a broadcast scalar, so symbolic dims work).
    pub fn zeros(&mut self, dtype: DType, shape: Shape) -> Result<NodeId, GradError> {
        let zero = self.scalar(0.0, dtype);
        self.broadcast(zero, shape)
    }

    pub fn zeros_like(&mut self, x: NodeId) -> Result<NodeId, GradError> {
        self.zeros(self.dtype(x), self.shape(x))
    }

    /// Sums `g` (broadcast from an operand) back to the operand's `shape`: over the leading
    /// axes it lacks and the axes where it has a static 1.
    pub fn unbroadcast(&mut self, g: NodeId, shape: &Shape) -> Result<NodeId, GradError> {
        let from = self.shape(g);
        if &from == shape {
            return Ok(g);
        }
        let lead = from.rank() - shape.rank();
        let axes: Vec<usize> = (0..from.rank())
            .filter(|&a| a < lead || (shape[a - lead].is_one() && !from[a].is_one()))
            .collect();
        let summed = self.reduce(ReduceOp::Sum, g, axes, true)?;
        self.reshape(summed, shape.clone())
    }

    /// The number of elements `axes` of `shape` hold, as a rank-0 tensor of `dtype`: a
    /// constant when static, else counted at run time (a sum of broadcast ones).
    pub fn count(
        &mut self,
        shape: &Shape,
        axes: &[usize],
        dtype: DType,
    ) -> Result<NodeId, GradError> {
        let dims: Vec<Dim> = axes.iter().map(|a| shape[*a].clone()).collect();
        if let Some(n) = Dim::product(&dims).as_static() {
            return Ok(self.scalar(n as f64, dtype));
        }
        let one = self.scalar(1.0, dtype);
        let ones = self.broadcast(one, Shape::new(dims.clone()))?;
        self.reduce(ReduceOp::Sum, ones, (0..dims.len()).collect(), false)
    }

    /// `0, 1, …, len − 1` as `i64`; a symbolic `len` works (an exclusive running sum of
    /// broadcast ones).
    pub fn iota(&mut self, len: Dim) -> Result<NodeId, GradError> {
        let one = self.constant(ConstantData::scalar(Scalar::Int(1), DType::I64));
        let ones = self.broadcast(one, Shape::new([len]))?;
        let cumsum = Op::Cumsum(Cumsum {
            axis: 0,
            exclusive: true,
            reverse: false,
        });
        self.op(cumsum, &[ones])
    }

    /// A rank-0 `i64` constant.
    pub fn int(&mut self, value: i64) -> NodeId {
        self.constant(ConstantData::scalar(Scalar::Int(value), DType::I64))
    }
}

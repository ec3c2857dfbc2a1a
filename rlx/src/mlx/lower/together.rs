//! Nodes the MLX lowering builds together with the node that reads them: a matmul with
//! the bias added to it (one GEMM), and a residual add with the RMS norm of its sum (one
//! kernel on an NVIDIA GPU).

use crate::ir::{self as ir, DType, Graph, MatMul, NodeId, Op};

/// The adds of a `[N]` bias to a matmul nothing else reads: each is lowered as one GEMM
/// with the bias (a cuBLASLt epilogue on a GPU), and the matmul alone is not built. MLX's
/// compiled mode fuses the elementwise ops that follow by itself.
pub(crate) struct BiasAdds {
    /// Per add node: its product and its bias.
    pub(super) of: Vec<Option<BiasAdd>>,
    /// Per node: a matmul its add computes.
    pub(super) folded: Vec<bool>,
}

/// `a·b + bias`, with the matmul's operands read as its transposes say.
pub(super) struct BiasAdd {
    /// `a`, `b` and the bias.
    pub(super) operands: [NodeId; 3],
    pub(super) product: MatMul,
}

impl BiasAdds {
    /// Per node: whether it is a matmul its bias add computes.
    pub(crate) fn folded(&self) -> &[bool] {
        &self.folded
    }

    pub(crate) fn of(graph: &Graph) -> BiasAdds {
        let mut folded = vec![false; graph.len()];
        let of = crate::passes::epilogue::matmul_bias_adds(graph)
            .into_iter()
            .map(|add| {
                let (matmul, bias) = add?;
                let Op::MatMul(product) = &graph[matmul].op else {
                    return None;
                };
                folded[matmul.index()] = true;
                let x = &graph[matmul].inputs;
                Some(BiasAdd {
                    operands: [x[0], x[1], bias],
                    product: product.clone(),
                })
            })
            .collect();
        BiasAdds { of, folded }
    }
}

/// Float32 adds of two operands of one shape whose sum an RMS norm with a weight reads: a
/// decoder block's residual add and the next sublayer's norm. Each is lowered with its
/// norm ([`Array::add_rms_norm`]: one kernel on an NVIDIA GPU instead of two, and one MLX
/// node fewer for a decoding step to build), the sum still the add's value for its other
/// readers.
pub(crate) struct ResidualNorms {
    /// Per add node: the norm lowered with it.
    pub(super) of: Vec<Option<ResidualNorm>>,
}

/// The RMS norm node a residual add is lowered with, and what the norm needs.
pub(super) struct ResidualNorm {
    pub(super) norm: NodeId,
    pub(super) weight: NodeId,
    pub(super) eps: f64,
}

impl ResidualNorms {
    pub(crate) fn of(graph: &Graph, bias_adds: &BiasAdds) -> ResidualNorms {
        let mut of: Vec<Option<ResidualNorm>> = (0..graph.len()).map(|_| None).collect();
        for (id, node) in graph.iter() {
            let Op::RmsNorm(norm) = &node.op else {
                continue;
            };
            let Some(&sum) = node.inputs.first().filter(|_| norm.has_weight) else {
                continue;
            };
            let add = &graph[sum];
            let same_shape = |i: &NodeId| graph[*i].ty == add.ty;
            if add.op != Op::Binary(ir::BinaryOp::Add)
                || add.ty.dtype != DType::F32
                || !add.inputs.iter().all(same_shape)
                || bias_adds.of[sum.index()].is_some()
                || of[sum.index()].is_some()
                // Lowered with the add, so the weight must be there by then.
                || node.inputs[1].index() > sum.index()
            {
                continue;
            }
            of[sum.index()] = Some(ResidualNorm {
                norm: id,
                weight: node.inputs[1],
                eps: norm.eps,
            });
        }
        ResidualNorms { of }
    }
}

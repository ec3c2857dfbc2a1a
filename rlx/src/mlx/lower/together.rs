//! Nodes the MLX lowering builds together: a matmul with the bias added to it (one GEMM), a
//! residual add with the RMS norm of its sum, and a gated feed-forward's gate and up products
//! with its activation (each one kernel on an NVIDIA GPU). A block's rotations are in
//! `rotations`.

use super::Lowering;
use super::readers::{Readers, group_members};
use crate::ir::{self as ir, BinaryOp, DType, Graph, MatMul, NodeId, Op, UnaryOp};
use crate::mlx::layout::FusedSlot;
use crate::mlx::{Array, MlxError};

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

/// Gated feed-forwards: `act(gate) * up`, `gate` and `up` float32 products that are the only
/// two members of one product group (a block's joined gate and up weight), `act` SiLU or
/// tanh GELU, and nothing else reading the products or the activation. Each is lowered at
/// the node that multiplies them, as one [`Array::gated_product`] (one kernel on an NVIDIA
/// GPU in place of the joined product, two column slices and the activation's product:
/// three fewer MLX nodes a block for a decoding step to build), the three nodes before it
/// not built; where the kernel does not apply, that node builds them itself.
///
/// [`Array::gated_product`]: crate::mlx::Array
pub(crate) struct GatedProducts {
    /// Per node multiplying a gate by an up product: the nodes it reads.
    pub(super) of: Vec<Option<Gated>>,
    /// Per node: a gate, up or activation node the multiplying node builds.
    pub(super) folded: Vec<bool>,
}

/// The nodes a gated product reads.
pub(super) struct Gated {
    /// The left operand both products multiply (a group's members share it).
    pub(super) operand: NodeId,
    pub(super) gate: NodeId,
    pub(super) up: NodeId,
    /// `act(gate)`.
    pub(super) activated: NodeId,
    pub(super) activation: UnaryOp,
}

impl GatedProducts {
    pub(crate) fn of(graph: &Graph, fused: &[Option<FusedSlot>]) -> GatedProducts {
        let readers = Readers::of(graph);
        let members = group_members(fused);
        let mut of: Vec<Option<Gated>> = (0..graph.len()).map(|_| None).collect();
        let mut folded = vec![false; graph.len()];
        for (id, node) in graph.iter() {
            let (Op::Binary(BinaryOp::Mul), [a, b]) = (&node.op, node.inputs.as_slice()) else {
                continue;
            };
            if node.ty.dtype != DType::F32 {
                continue;
            }
            for (activated, up) in [(*a, *b), (*b, *a)] {
                let act = &graph[activated];
                let Op::Unary(activation @ (UnaryOp::Silu | UnaryOp::GeluTanh)) = act.op else {
                    continue;
                };
                let gate = act.inputs[0];
                let (Some(g), Some(u), Some(&operand)) = (
                    &fused[gate.index()],
                    &fused[up.index()],
                    graph[gate].inputs.first(),
                ) else {
                    continue;
                };
                let fits = gate != up
                    && g.leader == u.leader
                    && members.get(&g.leader).map(Vec::len) == Some(2)
                    && graph[gate].ty == node.ty
                    && graph[up].ty == node.ty
                    && u.columns.len() == g.columns.len()
                    && readers.only(gate, activated)
                    && readers.only(activated, id)
                    && readers.only(up, id);
                if !fits {
                    continue;
                }
                for n in [gate, up, activated] {
                    folded[n.index()] = true;
                }
                of[id.index()] = Some(Gated {
                    operand,
                    gate,
                    up,
                    activated,
                    activation,
                });
                break;
            }
        }
        GatedProducts { of, folded }
    }
}

impl Lowering {
    /// The gated product `gated` (node `id`'s) of `x`, the operand its products share: one
    /// kernel where it applies, else the joined product, its slices and the activation as
    /// the folded nodes would have built them.
    pub(super) fn gated_product(
        &self,
        id: NodeId,
        gated: &Gated,
        x: &Array,
        leaves: &[Array],
        shared: &mut Vec<(NodeId, Array)>,
    ) -> Result<Array, super::NodeFailure> {
        let graph = &*self.graph;
        let (Some(g), Some(u)) = (
            &self.fused[gated.gate.index()],
            &self.fused[gated.up.index()],
        ) else {
            return Err(MlxError::new("a gated product's products are not grouped").into());
        };
        // A float group's product reads its joined weight alone (the view for rows
        // follows it); a block format's, every part of its form.
        let parts = match g.format {
            Some(_) => &leaves[g.first..g.first + g.count],
            None => &leaves[g.first..g.first + 1],
        };
        let columns = [g.columns.start, u.columns.start];
        let format = g.format.map(|f| f.id());
        let width = g.columns.len();
        if self.shapes[id.index()].last() == Some(&width)
            && let Some(out) = x.gated_product(parts, format, columns, width, gated.activation)?
        {
            return Ok(out);
        }
        let gate = self.grouped_product(gated.gate, g, x, leaves, shared)?;
        let up = self.grouped_product(gated.up, u, x, leaves, shared)?;
        let activated = gate.unary(gated.activation)?;
        // The operands in the graph's order.
        Ok(if graph[id].inputs[0] == gated.activated {
            activated.binary(BinaryOp::Mul, &up)?
        } else {
            up.binary(BinaryOp::Mul, &activated)?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::GraphBuilder;

    /// `count` products of `x` by `[8, 4]` weights.
    fn products(b: &mut GraphBuilder, x: NodeId, count: usize) -> Vec<NodeId> {
        (0..count)
            .map(|i| {
                let w = b.param(&format!("w{i}"), DType::F32, [8, 4]).unwrap();
                b.matmul(x, w).unwrap()
            })
            .collect()
    }

    #[test]
    fn a_gated_product_folds_its_two_grouped_products_and_activation() {
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [1, 1, 8]).unwrap();
        let members = products(&mut b, x, 5);
        let gated = |b: &mut GraphBuilder, gate: NodeId, up: NodeId, act: UnaryOp| {
            let activated = b.unary(act, gate).unwrap();
            (activated, b.mul(up, activated).unwrap())
        };
        // Two pairs of one group's products (each product read twice), a pair whose group
        // has a third member, an activation also returned: none folds.
        let (_, first) = gated(&mut b, members[0], members[1], UnaryOp::GeluTanh);
        let (_, second) = gated(&mut b, members[2], members[3], UnaryOp::Silu);
        let (shared, third) = gated(&mut b, members[0], members[1], UnaryOp::Silu);
        for (i, n) in [first, second, third, shared].iter().enumerate() {
            b.output(&format!("o{i}"), *n).unwrap();
        }
        let graph = b.finish().unwrap();
        let mut fused = vec![None; graph.len()];
        let leaders = [members[0], members[0], members[2], members[2], members[2]];
        for (i, (member, leader)) in members.iter().zip(leaders).enumerate() {
            fused[member.index()] = Some(FusedSlot {
                first: 0,
                count: 1,
                leader,
                columns: 4 * (i % 2)..4 * (i % 2) + 4,
                format: None,
            });
        }
        // m0 and m1 are read twice (by both of their pairs): nothing folds; alone they do.
        let gates = GatedProducts::of(&graph, &fused);
        assert!(gates.of.iter().all(Option::is_none));
        let mut b = GraphBuilder::new();
        let x = b.input("x", DType::F32, [1, 1, 8]).unwrap();
        let m = products(&mut b, x, 2);
        let activated_alone = b.unary(UnaryOp::Silu, m[0]).unwrap();
        let product = b.mul(activated_alone, m[1]).unwrap();
        b.output("o", product).unwrap();
        let graph = b.finish().unwrap();
        let mut fused = vec![None; graph.len()];
        for (i, member) in m.iter().enumerate() {
            fused[member.index()] = Some(FusedSlot {
                first: 0,
                count: 1,
                leader: m[0],
                columns: 4 * i..4 * i + 4,
                format: None,
            });
        }
        let gates = GatedProducts::of(&graph, &fused);
        let found = gates.of[product.index()].as_ref().expect("folded");
        assert_eq!(
            (found.gate, found.up, found.activated),
            (m[0], m[1], activated_alone)
        );
        assert_eq!(found.activation, UnaryOp::Silu);
        let folded: Vec<usize> = (0..graph.len()).filter(|&i| gates.folded[i]).collect();
        assert_eq!(
            folded,
            [m[0].index(), m[1].index(), activated_alone.index()]
        );
    }
}

//! Nodes the MLX lowering builds together: a matmul with the bias added to it (one GEMM), a
//! residual add with the RMS norm of its sum, the rotations of a block's queries and keys
//! from the product that made them, and a gated feed-forward's gate and up products with its
//! activation (each one kernel on an NVIDIA GPU).

use super::Lowering;
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

/// Pairs of rotary embeddings of heads split from the columns of one array, at one offset
/// and with one rotation: a decoder block's queries and keys, read from its joined q/k/v
/// product. Each pair is lowered at its first rotation as one [`Array::rope_heads`] (one
/// kernel on an NVIDIA GPU, in place of two column slices, two head splits, two transposes,
/// two copies and two ropes), its second rotation's value set there too.
///
/// [`Array::rope_heads`]: crate::mlx::Array
pub(crate) struct HeadRopes {
    /// Per first rotation of a pair: the pair.
    pub(super) of: Vec<Option<HeadRope>>,
}

/// The second rotation of a pair, and what both read.
pub(super) struct HeadRope {
    pub(super) second: NodeId,
    /// The product group's leader: its whole product by the joined weights holds the
    /// columns of both.
    pub(super) product: NodeId,
    /// Each rotation's first column in the whole product.
    pub(super) columns: [usize; 2],
    /// Each rotation's `[B, S, C]` array before its split into heads.
    pub(super) split_from: [NodeId; 2],
    pub(super) offset: NodeId,
    pub(super) rope: ir::Rope,
}

impl HeadRopes {
    pub(crate) fn of(graph: &Graph, fused: &[Option<FusedSlot>]) -> HeadRopes {
        let mut of: Vec<Option<HeadRope>> = (0..graph.len()).map(|_| None).collect();
        // Rotations waiting for a partner.
        let mut unpaired: Vec<(NodeId, Rotation<'_>)> = Vec::new();
        for (id, _) in graph.iter() {
            let Some(second) = rotation(graph, fused, id) else {
                continue;
            };
            let partner = unpaired.iter().position(|(_, first)| {
                (first.product, first.offset, first.rope)
                    == (second.product, second.offset, second.rope)
            });
            match partner {
                Some(at) => {
                    let (first_id, first) = unpaired.swap_remove(at);
                    of[first_id.index()] = Some(HeadRope {
                        second: id,
                        product: second.product,
                        columns: [first.column, second.column],
                        split_from: [first.split_from, second.split_from],
                        offset: second.offset,
                        rope: second.rope.clone(),
                    });
                }
                None => unpaired.push((id, second)),
            }
        }
        HeadRopes { of }
    }
}

impl Lowering {
    /// The two rotations of `pair` (the first at node `first`) from the whole product their
    /// heads are columns of, or `None` where the dims do not fit one `rope_heads` (or the
    /// product was not made as a group's) and each is lowered alone.
    pub(super) fn head_rope(
        &self,
        first: NodeId,
        pair: &HeadRope,
        values: &[Option<Array>],
        shared: &[(NodeId, Array)],
    ) -> Result<Option<(Array, Array)>, MlxError> {
        let source = shared
            .iter()
            .find(|(n, _)| *n == pair.product)
            .map(|s| &s.1);
        let (Some(source), Some(offset)) = (source, values[pair.offset.index()].as_ref()) else {
            return Ok(None);
        };
        let width = match source.shape()?.as_slice() {
            [_, _, width] => *width,
            _ => return Ok(None),
        };
        let heads = |rope: NodeId, split: NodeId, column: usize| {
            let (out, rows) = (&self.shapes[rope.index()], &self.shapes[split.index()]);
            let fits = out.len() == 4
                && rows.as_slice() == [out[0], out[2], out[1] * out[3]]
                && column + rows[2] <= width;
            fits.then(|| (out[0], out[1], out[2], out[3]))
        };
        let q = heads(first, pair.split_from[0], pair.columns[0]);
        let k = heads(pair.second, pair.split_from[1], pair.columns[1]);
        let rope = &pair.rope;
        let (Some(q), Some(k)) = (q, k) else {
            return Ok(None);
        };
        let no_heads = q.1 == 0 || k.1 == 0;
        if no_heads || (q.0, q.2, q.3) != (k.0, k.2, k.3) || rope.dims > q.3 {
            return Ok(None);
        }
        if rope.dims < 2 || !rope.dims.is_multiple_of(2) {
            return Ok(None);
        }
        let periods = self.rope_periods(rope)?;
        let groups = crate::mlx::ops::HeadGroups {
            q: (pair.columns[0], q.1),
            k: (pair.columns[1], k.1),
            head_dim: q.3,
            dims: rope.dims,
            base: rope.base,
            scale: rope.scale,
            traditional: rope.traditional,
        };
        source
            .rope_heads(&groups, offset, periods.as_ref())
            .map(Some)
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
        let users = graph.users();
        let returned = graph.returned();
        let mut members = std::collections::HashMap::<NodeId, usize>::new();
        for slot in fused.iter().flatten() {
            *members.entry(slot.leader).or_default() += 1;
        }
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
                let only_reader = |n: NodeId, reader: NodeId| {
                    users[n.index()] == [reader] && !returned[n.index()]
                };
                let fits = gate != up
                    && g.leader == u.leader
                    && members.get(&g.leader) == Some(&2)
                    && graph[gate].ty == node.ty
                    && graph[up].ty == node.ty
                    && u.columns.len() == g.columns.len()
                    && only_reader(gate, activated)
                    && only_reader(activated, id)
                    && only_reader(up, id);
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

/// A float32 rope with an offset of heads split from the `[B, S, C]` columns of a grouped
/// product (the last axis split into heads, then heads first).
struct Rotation<'g> {
    /// The group's leader.
    product: NodeId,
    /// The first column in the group's whole product.
    column: usize,
    /// The member split into heads.
    split_from: NodeId,
    offset: NodeId,
    rope: &'g ir::Rope,
}

/// Node `id` as a [`Rotation`], if it is one.
fn rotation<'g>(graph: &'g Graph, fused: &[Option<FusedSlot>], id: NodeId) -> Option<Rotation<'g>> {
    let node = &graph[id];
    let (Op::Rope(rope), [heads, offset]) = (&node.op, node.inputs.as_slice()) else {
        return None;
    };
    let permute = &graph[*heads];
    let Op::Permute(ir::Permute { perm }) = &permute.op else {
        return None;
    };
    let split = &graph[permute.inputs[0]];
    if node.ty.dtype != DType::F32
        || perm.as_slice() != [0, 2, 1, 3]
        || !matches!(split.op, Op::Reshape(_))
    {
        return None;
    }
    let from = split.inputs[0];
    if graph[from].ty.shape.rank() != 3 || graph[from].ty.dtype != DType::F32 {
        return None;
    }
    let slot = fused[from.index()].as_ref()?;
    Some(Rotation {
        product: slot.leader,
        column: slot.columns.start,
        split_from: from,
        offset: *offset,
        rope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::GraphBuilder;

    /// A rope of heads split from `from`'s `[1, 2, 8]` columns at `offset`.
    fn rotation(b: &mut GraphBuilder, from: NodeId, offset: NodeId, base: f64) -> NodeId {
        let split = b.reshape(from, [1, 2, 2, 4]).unwrap();
        let heads = b.permute(split, &[0, 2, 1, 3]).unwrap();
        let rope = ir::Rope {
            dims: 4,
            base,
            scale: 1.0,
            traditional: false,
            freqs: None,
        };
        b.op(Op::Rope(rope), &[heads, offset]).unwrap()
    }

    #[test]
    fn rotations_of_one_products_columns_at_one_offset_pair_up() {
        let mut b = GraphBuilder::new();
        let pos = b.input("pos", DType::I64, [0usize; 0]).unwrap();
        let other = b.input("other", DType::I64, [0usize; 0]).unwrap();
        let members: Vec<NodeId> = (0..6)
            .map(|i| b.input(&format!("m{i}"), DType::F32, [1, 2, 8]).unwrap())
            .collect();
        let ropes = [
            rotation(&mut b, members[0], pos, 1e4),
            rotation(&mut b, members[1], pos, 1e4),
            // Another product; then another offset; then another rotation.
            rotation(&mut b, members[2], pos, 1e4),
            rotation(&mut b, members[3], other, 1e4),
            rotation(&mut b, members[4], pos, 5e5),
            rotation(&mut b, members[5], pos, 1e4),
        ];
        for (i, rope) in ropes.iter().enumerate() {
            b.output(&format!("r{i}"), *rope).unwrap();
        }
        let graph = b.finish().unwrap();
        let mut fused = vec![None; graph.len()];
        let leaders = [
            members[0], members[0], members[2], members[0], members[0], members[2],
        ];
        for (i, (member, leader)) in members.iter().zip(leaders).enumerate() {
            fused[member.index()] = Some(FusedSlot {
                first: 0,
                count: 1,
                leader,
                columns: 8 * i..8 * (i + 1),
                format: None,
            });
        }
        let pairs = HeadRopes::of(&graph, &fused);
        let first = pairs.of[ropes[0].index()].as_ref().expect("paired");
        assert_eq!(first.second, ropes[1]);
        assert_eq!((first.product, first.columns), (members[0], [0, 8]));
        assert_eq!(first.split_from, [members[0], members[1]]);
        // The third pairs with the sixth (one product, offset and rotation); the fourth
        // and fifth with nothing.
        let third = pairs.of[ropes[2].index()].as_ref().expect("paired");
        assert_eq!((third.second, third.columns), (ropes[5], [16, 40]));
        assert_eq!(pairs.of.iter().flatten().count(), 2);
    }

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

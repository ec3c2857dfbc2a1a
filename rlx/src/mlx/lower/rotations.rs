//! A decoder block's query and key rotations lowered together, from the product that made
//! them: with the product itself and the values' heads where the whole q/k/v group feeds
//! them alone (one kernel on an NVIDIA GPU for a decoding step's rows), else from the
//! product's columns (one kernel for the two rotations).

use std::collections::HashMap;

use super::Lowering;
use super::readers::{Readers, group_members};
use crate::ir::{self as ir, DType, Graph, NodeId, Op};
use crate::mlx::layout::FusedSlot;
use crate::mlx::ops::HeadGroups;
use crate::mlx::{Array, MlxError};

/// Pairs of rotary embeddings of heads split from the columns of one array, at one offset
/// and with one rotation: a decoder block's queries and keys, read from its joined q/k/v
/// product. Each pair is lowered at its first rotation, its second rotation's value set
/// there too: where the group is the queries, keys and values alone
/// ([`ValueHeads`]), as one [`Array::rotated_product`] (unless `RLX_MLX_ROTATED_ROWS=0`, one
/// kernel on an NVIDIA GPU for the rows of a decoding step, in place of the product, the
/// rotations' kernel and the values' slice, head split and transpose); else, or where that
/// does not apply, as one
/// [`Array::rope_heads`] of the product (one kernel on an NVIDIA GPU, in place of two column
/// slices, two head splits, two transposes, two copies and two ropes).
///
/// [`Array::rotated_product`]: crate::mlx::Array
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
    /// The group's third member, the values, where the pair may make them too.
    pub(super) values: Option<ValueHeads>,
}

/// The values of a q/k/v product group that has no other member, where nothing but the
/// rotations reads the queries' and keys' columns on their way there and nothing but a
/// split into heads and its heads-first view reads the values': the pair's lowering may
/// then make the whole product's outputs itself, the product and the views built before
/// it left unread.
pub(super) struct ValueHeads {
    /// The values' heads-first view (`[B, heads, S, D]`), whose value the pair sets.
    pub(super) heads: NodeId,
    /// The values' first column in the whole product.
    pub(super) column: usize,
    /// The left operand the group's products share.
    pub(super) operand: NodeId,
}

impl HeadRopes {
    pub(crate) fn of(graph: &Graph, fused: &[Option<FusedSlot>]) -> HeadRopes {
        let readers = Readers::of(graph);
        let members = group_members(fused);
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
                    // Each member's views lead to its rotation alone.
                    let chains_alone =
                        [(&first, first_id), (&second, id)].iter().all(|(r, rope)| {
                            let [split, heads] = r.views;
                            readers.only(r.split_from, split)
                                && readers.only(split, heads)
                                && readers.only(heads, *rope)
                        });
                    let values = if chains_alone {
                        value_heads(
                            graph,
                            fused,
                            &readers,
                            &members,
                            first_id,
                            [&first, &second],
                        )
                    } else {
                        None
                    };
                    of[first_id.index()] = Some(HeadRope {
                        second: id,
                        product: second.product,
                        columns: [first.column, second.column],
                        split_from: [first.split_from, second.split_from],
                        offset: second.offset,
                        rope: second.rope.clone(),
                        values,
                    });
                }
                None => unpaired.push((id, second)),
            }
        }
        HeadRopes { of }
    }
}

/// The values of the rotations `pair` (the first at node `first`), if their group's third
/// and last member is split into heads and viewed heads-first alone, that view read only
/// after `first` (whose lowering sets it).
fn value_heads(
    graph: &Graph,
    fused: &[Option<FusedSlot>],
    readers: &Readers,
    members: &HashMap<NodeId, Vec<NodeId>>,
    first: NodeId,
    pair: [&Rotation<'_>; 2],
) -> Option<ValueHeads> {
    let group = members.get(&pair[0].product)?;
    let mut others = group
        .iter()
        .filter(|m| !pair.iter().any(|r| r.split_from == **m));
    let (Some(&member), None, 3) = (others.next(), others.next(), group.len()) else {
        return None;
    };
    let slot = fused[member.index()].as_ref()?;
    if graph[member].ty.dtype != DType::F32 {
        return None;
    }
    let split = readers.sole(member)?;
    let heads = readers.sole(split)?;
    let split_into_heads =
        matches!(graph[split].op, Op::Reshape(_)) && graph[split].ty.shape.rank() == 4;
    let heads_first =
        matches!(&graph[heads].op, Op::Permute(p) if p.perm.as_slice() == [0, 2, 1, 3]);
    let read_after = readers
        .of_node(heads)
        .iter()
        .all(|u| u.index() > first.index());
    let operand = *graph[member].inputs.first()?;
    (split_into_heads && heads_first && read_after).then_some(ValueHeads {
        heads,
        column: slot.columns.start,
        operand,
    })
}

/// What a pair's lowering made: its two rotations' values, and its values' heads where it
/// made the whole product's outputs.
pub(super) struct Rotated {
    pub(super) q: Array,
    pub(super) k: Array,
    pub(super) v: Option<Array>,
}

impl Lowering {
    /// The two rotations of `pair` (the first at node `first`), with the values' heads
    /// where the pair may make them and the kernel applies, else from the whole product
    /// their heads are columns of; `None` where the dims do not fit one `rope_heads` (or
    /// the product was not made as a group's) and each is lowered alone.
    pub(super) fn head_rope(
        &self,
        first: NodeId,
        pair: &HeadRope,
        values: &[Option<Array>],
        leaves: &[Array],
        shared: &[(NodeId, Array)],
    ) -> Result<Option<Rotated>, MlxError> {
        let Some(offset) = values[pair.offset.index()].as_ref() else {
            return Ok(None);
        };
        let Some(groups) = self.head_groups(first, pair) else {
            return Ok(None);
        };
        let periods = self.rope_periods(&pair.rope)?;
        let periods = periods.as_ref();
        if let Some(made) = self.rotated_product(pair, &groups, values, leaves, offset, periods)? {
            return Ok(Some(made));
        }
        let source = shared
            .iter()
            .find(|(n, _)| *n == pair.product)
            .map(|s| &s.1);
        let Some(source) = source else {
            return Ok(None);
        };
        let width = match source.shape()?.as_slice() {
            [_, _, width] => *width,
            _ => return Ok(None),
        };
        let fits = |(column, heads): (usize, usize)| column + heads * groups.head_dim <= width;
        if !fits(groups.q) || !fits(groups.k) {
            return Ok(None);
        }
        let (q, k) = source.rope_heads(&groups, offset, periods)?;
        Ok(Some(Rotated { q, k, v: None }))
    }

    /// The heads of `pair`'s rotations (the first at node `first`), if each is its
    /// `[B, S, heads * D]` columns split into `[B, heads, S, D]`, both of one batch, length
    /// and head size, and the rotation turns an even number of their features.
    fn head_groups(&self, first: NodeId, pair: &HeadRope) -> Option<HeadGroups> {
        let heads = |rope: NodeId, split: NodeId| {
            let (out, rows) = (&self.shapes[rope.index()], &self.shapes[split.index()]);
            let fits = out.len() == 4 && rows.as_slice() == [out[0], out[2], out[1] * out[3]];
            fits.then(|| (out[0], out[1], out[2], out[3]))
        };
        let q = heads(first, pair.split_from[0])?;
        let k = heads(pair.second, pair.split_from[1])?;
        let rope = &pair.rope;
        let no_heads = q.1 == 0 || k.1 == 0;
        if no_heads || (q.0, q.2, q.3) != (k.0, k.2, k.3) || rope.dims > q.3 {
            return None;
        }
        if rope.dims < 2 || !rope.dims.is_multiple_of(2) {
            return None;
        }
        Some(HeadGroups {
            q: (pair.columns[0], q.1),
            k: (pair.columns[1], k.1),
            head_dim: q.3,
            dims: rope.dims,
            base: rope.base,
            scale: rope.scale,
            traditional: rope.traditional,
        })
    }

    /// The queries, keys and values of `pair`'s group as one [`Array::rotated_product`] of
    /// their shared operand, where the pair may make the values (`pair.values`) and the
    /// kernel applies.
    ///
    /// [`Array::rotated_product`]: crate::mlx::Array
    fn rotated_product(
        &self,
        pair: &HeadRope,
        groups: &HeadGroups,
        values: &[Option<Array>],
        leaves: &[Array],
        offset: &Array,
        periods: Option<&Array>,
    ) -> Result<Option<Rotated>, MlxError> {
        let (Some(v), Some(slot)) = (&pair.values, &self.fused[pair.split_from[0].index()]) else {
            return Ok(None);
        };
        let Some(x) = values[v.operand.index()].as_ref() else {
            return Ok(None);
        };
        // The values' heads are the keys' in count and shape.
        let keys = &self.shapes[pair.second.index()];
        if self.shapes[v.heads.index()] != *keys {
            return Ok(None);
        }
        // A float group's product reads its joined weight alone; a block format's, every
        // part of its form.
        let parts = match slot.format {
            Some(_) => &leaves[slot.first..slot.first + slot.count],
            None => &leaves[slot.first..slot.first + 1],
        };
        let format = slot.format.map(|f| f.id());
        let made = x.rotated_product(parts, format, groups, v.column, offset, periods)?;
        Ok(made.map(|(q, k, v)| Rotated { q, k, v: Some(v) }))
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
    /// The member's split into heads and that split's heads-first view.
    views: [NodeId; 2],
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
        views: [permute.inputs[0], *heads],
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

    /// What may be read besides the q/k/v chains of [`qkv_block`].
    #[derive(Clone, Copy, PartialEq)]
    enum Extra {
        Nothing,
        /// The query product is also an output.
        QueryReturned,
        /// The group has a fourth member.
        FourthMember,
        /// The values' heads are read before the rotations.
        ValuesReadEarly,
    }

    /// A q/k/v group of `[8, 8]` products of `x` (`[1, 2, 8]`), its queries and keys rotated
    /// at `pos`; returns the graph, the group's slots, the first rotation and the values'
    /// heads.
    fn qkv_block(extra: Extra) -> (Graph, Vec<Option<FusedSlot>>, NodeId, NodeId) {
        let mut b = GraphBuilder::new();
        let pos = b.input("pos", DType::I64, [0usize; 0]).unwrap();
        let x = b.input("x", DType::F32, [1, 2, 8]).unwrap();
        let count = if extra == Extra::FourthMember { 4 } else { 3 };
        let members: Vec<NodeId> = (0..count)
            .map(|i| {
                let w = b.param(&format!("w{i}"), DType::F32, [8, 8]).unwrap();
                b.matmul(x, w).unwrap()
            })
            .collect();
        let split = b.reshape(members[2], [1, 2, 2, 4]).unwrap();
        let values = b.permute(split, &[0, 2, 1, 3]).unwrap();
        if extra == Extra::ValuesReadEarly {
            let early = b.unary(crate::ir::UnaryOp::Neg, values).unwrap();
            b.output("early", early).unwrap();
        }
        let q = rotation(&mut b, members[0], pos, 1e4);
        let k = rotation(&mut b, members[1], pos, 1e4);
        let attended = b.mul(q, k).unwrap();
        let out = b.mul(attended, values).unwrap();
        b.output("out", out).unwrap();
        if extra == Extra::QueryReturned {
            b.output("query", members[0]).unwrap();
        }
        if extra == Extra::FourthMember {
            b.output("fourth", members[3]).unwrap();
        }
        let graph = b.finish().unwrap();
        let mut fused = vec![None; graph.len()];
        for (i, member) in members.iter().enumerate() {
            fused[member.index()] = Some(FusedSlot {
                first: 0,
                count: 1,
                leader: members[0],
                columns: 8 * i..8 * (i + 1),
                format: None,
            });
        }
        (graph, fused, q, values)
    }

    #[test]
    fn a_pair_makes_the_values_where_its_group_feeds_the_rotations_and_values_alone() {
        let (graph, fused, first, values) = qkv_block(Extra::Nothing);
        let pairs = HeadRopes::of(&graph, &fused);
        let found = pairs.of[first.index()].as_ref().expect("paired");
        let v = found
            .values
            .as_ref()
            .expect("the values made with the pair");
        assert_eq!((v.heads, v.column), (values, 16));
        assert_eq!(graph[v.operand].op, Op::Input);
        assert_eq!(graph[v.operand].ty.shape.rank(), 3);
        // Anything else reading a chain, another member, or the values read before the
        // pair's lowering: the pair rotates the product's columns alone.
        for extra in [
            Extra::QueryReturned,
            Extra::FourthMember,
            Extra::ValuesReadEarly,
        ] {
            let (graph, fused, first, _) = qkv_block(extra);
            let pairs = HeadRopes::of(&graph, &fused);
            let found = pairs.of[first.index()].as_ref().expect("paired");
            assert!(found.values.is_none());
        }
    }
}

//! Attention over int8 rows: `attention(q, cast(k8)·ks, cast(v8)·vs, ..)`, where a key or
//! value operand is int8 rows (`[.., S, D]`) scaled back by one float32 scale per row
//! (`[.., S, 1]`, broadcast), reads the int8 rows and their scales where they lie (an int8
//! key/value cache, say) instead of a float copy of every row: the kernel scales back only
//! the rows it attends, a block at a time.

use super::Fusion;
use crate::ir::{BinaryOp, DType, Dim, Graph, NodeId, Op};

/// Fuses every attention (of float32) whose key or value operand is such a product, when
/// the product, its cast and its broadcast feed nothing else and are not returned, and
/// the int8 rows and scales are values stored as themselves (not inside another fusion).
pub(super) fn fuse(graph: &Graph, fusions: &mut [Option<Fusion>]) {
    let users = graph.users();
    let returned = graph.returned();
    for (id, node) in graph.iter() {
        if !matches!(node.op, Op::Attention(_))
            || node.ty.dtype != DType::F32
            || fusions[id.index()].is_some()
        {
            continue;
        }
        let only_here = |x: NodeId, reader: NodeId| {
            !returned[x.index()] && users[x.index()].iter().all(|u| *u == reader)
        };
        let mut int8 = [false; 2];
        let mut operands = node.inputs.clone();
        let mut scales = Vec::new();
        let mut absorbed = Vec::new();
        for (slot, at) in [(0, 1), (1, 2)] {
            let product = node.inputs[at];
            // A value read twice by the attention (as keys and values alike) stays itself.
            let once = node.inputs.iter().filter(|x| **x == product).count() == 1;
            if !once || !only_here(product, id) {
                continue;
            }
            let Some((rows, scale, members)) = scaled_rows(graph, product) else {
                continue;
            };
            let stored = |x: NodeId| !matches!(fusions[x.index()], Some(Fusion::Absorbed));
            if members.iter().all(|m| only_here(*m, product)) && stored(rows) && stored(scale) {
                int8[slot] = true;
                operands[at] = rows;
                scales.push(scale);
                absorbed.push(product);
                absorbed.extend(members);
            }
        }
        if int8 == [false; 2] {
            continue;
        }
        operands.extend(scales);
        for member in absorbed {
            fusions[member.index()] = Some(Fusion::Absorbed);
        }
        fusions[id.index()] = Some(Fusion::Attention { int8, operands });
    }
}

/// If `product` is `cast(rows, f32) · broadcast(scale)` (either order) with `rows` int8
/// `[.., S, D]` and `scale` float32 `[.., S, 1]`: the rows, the scale, and the cast and
/// broadcast nodes between them and the product.
fn scaled_rows(graph: &Graph, product: NodeId) -> Option<(NodeId, NodeId, [NodeId; 2])> {
    let node = &graph[product];
    if node.op != Op::Binary(BinaryOp::Mul) || node.ty.dtype != DType::F32 {
        return None;
    }
    let [a, b] = node.inputs[..] else {
        return None;
    };
    let (cast, spread) = if matches!(graph[a].op, Op::Cast(_)) {
        (a, b)
    } else {
        (b, a)
    };
    let (Op::Cast(c), Op::Broadcast(_)) = (&graph[cast].op, &graph[spread].op) else {
        return None;
    };
    let (rows, scale) = (graph[cast].inputs[0], graph[spread].inputs[0]);
    let (r, s) = (&graph[rows].ty, &graph[scale].ty);
    let shape = &node.ty.shape;
    let rank = shape.rank();
    let fits = c.to == DType::F32
        && r.dtype == DType::I8
        && s.dtype == DType::F32
        && graph[cast].ty.shape == *shape
        && graph[spread].ty.shape == *shape
        && r.shape == *shape
        && s.shape.rank() == rank
        && rank >= 2
        && s.shape[rank - 1] == Dim::from(1)
        && (0..rank - 1).all(|axis| s.shape[axis] == shape[axis]);
    fits.then_some((rows, scale, [cast, spread]))
}

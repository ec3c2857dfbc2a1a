//! Products by weights bound in a form of their own ([`PreparedForm`], a group's joined
//! weight): which product reads which form, and a group member's columns of the one
//! product.

use super::{Array, Lowering, MlxError, Node, NodeFailure, NodeId, PreparedForm};
use crate::ir;

impl Lowering {
    /// Whether the product `node` multiplies a block of rows by the weight's view that `form`
    /// describes ([`RowOperand`](crate::mlx::layout::RowOperand): its left operand of that
    /// rank, leading dims 1; the weight read as stored).
    pub(super) fn reads_rows(&self, node: &Node, product: &ir::MatMul, form: PreparedForm) -> bool {
        let PreparedForm::Rows(rows) = form else {
            return false;
        };
        let lhs = &self.shapes[node.inputs[0].index()];
        !product.transpose_a
            && product.transpose_b == rows.transposed
            && node.inputs[0] != node.inputs[1]
            && lhs.len() == rows.rank
            && lhs[..lhs.len() - 2].iter().all(|&d| d == 1)
    }

    /// A grouped product: its columns of the group's one product by the joined weight,
    /// which the group's first member computes and the others find among `shared`.
    pub(super) fn grouped_product(
        &self,
        id: NodeId,
        slot: &crate::mlx::layout::FusedSlot,
        x: &Array,
        leaves: &[Array],
        shared: &mut Vec<(NodeId, Array)>,
    ) -> Result<Array, NodeFailure> {
        let whole = match shared.iter().find(|(node, _)| *node == slot.leader) {
            Some((_, whole)) => whole.clone(),
            None => {
                let joined = &leaves[slot.first..slot.first + slot.count];
                let whole = match slot.format {
                    Some(format) => x.block_matmul_prepared(joined, format.id())?,
                    // Stored as the right operand's view (`Weights::join`), and at the
                    // rows' rank when the group's left operand is a block of rows.
                    None => match joined.last() {
                        Some(weight) => x.matmul(weight, false, false)?,
                        None => {
                            return Err(MlxError::new("a product group without its weight").into());
                        }
                    },
                };
                shared.push((slot.leader, whole.clone()));
                whole
            }
        };
        let dims = &self.shapes[id.index()];
        let last = dims.len() - 1;
        let mut start = vec![0; dims.len()];
        let mut stop = dims.clone();
        start[last] = slot.columns.start;
        stop[last] = slot.columns.end;
        Ok(whole.slice(&start, &stop, &vec![1; dims.len()])?)
    }
}

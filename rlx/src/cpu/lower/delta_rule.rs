//! The gated delta rule and its backward pass (`delta_rule`, `delta_rule_grad`).

use super::geometry::numel;
use super::{Lower, LowerInput, Sizes, boxed};
use crate::backend::RunError;
use crate::cpu::kernels::delta_rule::{self, RuleDims, RuleOperands, backward_slot, forward_slot};
use crate::cpu::kernels::numeric::accumulator;
use crate::cpu::thunk::{Accesses, Kernel, Thunk, float_type};
use crate::cpu::view::{Memory, View};
use crate::ir::DType;

/// The sizes of a rule from its operands' dims (`q` first, `v` third).
fn rule_dims(operands: &[&[usize]]) -> RuleDims {
    let q = operands[0];
    let (t, k) = (q[q.len() - 2], q[q.len() - 1]);
    let v = *operands[2].last().unwrap_or(&0);
    RuleDims {
        lines: numel(&q[..q.len() - 2]),
        t,
        k,
        v,
    }
}

/// The rule's operand views: `q, k, v, g, beta` and the optional `s0`.
#[derive(Clone, Debug)]
pub(crate) struct RuleViews {
    pub q: View,
    pub k: View,
    pub v: View,
    pub g: View,
    pub beta: View,
    pub s0: Option<View>,
}

impl RuleViews {
    fn of(views: &[View], with_start: bool) -> RuleViews {
        RuleViews {
            q: views[0],
            k: views[1],
            v: views[2],
            g: views[3],
            beta: views[4],
            s0: with_start.then(|| views[5]),
        }
    }

    fn reads(&self, size: usize) -> Vec<(View, usize)> {
        let mut reads: Vec<(View, usize)> = [self.q, self.k, self.v, self.g, self.beta]
            .into_iter()
            .map(|view| (view, size))
            .collect();
        reads.extend(self.s0.map(|view| (view, size)));
        reads
    }

    fn operands<'m, T: bytemuck::Pod>(&self, mem: &'m Memory) -> RuleOperands<'m, T> {
        RuleOperands {
            q: mem.src(self.q),
            k: mem.src(self.k),
            v: mem.src(self.v),
            g: mem.src(self.g),
            beta: mem.src(self.beta),
            s0: self.s0.map(|view| mem.src(view)),
        }
    }
}

/// The rule: outputs, then the final state.
#[derive(Clone, Debug)]
pub(crate) struct DeltaRule {
    pub dtype: DType,
    pub dims: RuleDims,
    pub x: RuleViews,
    pub out: View,
    /// Per-worker accumulator slots.
    pub slots: View,
}

impl Kernel for DeltaRule {
    fn accesses(&self) -> Accesses {
        let size = self.dtype.size_bytes();
        Accesses {
            writes: vec![
                (self.out, size),
                (self.slots, accumulator(self.dtype).size_bytes()),
            ],
            reads: self.x.reads(size),
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| delta_rule::delta_rule::<T>(
            self.dims,
            self.x.operands(mem),
            mem.dst(self.out),
            mem.dst(self.slots)
        ));
        Ok(())
    }
}

/// Every operand's cotangent, packed.
#[derive(Clone, Debug)]
pub(crate) struct DeltaRuleGrad {
    pub dtype: DType,
    pub dims: RuleDims,
    pub x: RuleViews,
    pub cot: View,
    pub out: View,
    /// Per-worker accumulator slots.
    pub slots: View,
}

impl Kernel for DeltaRuleGrad {
    fn accesses(&self) -> Accesses {
        let size = self.dtype.size_bytes();
        let mut reads = self.x.reads(size);
        reads.push((self.cot, size));
        Accesses {
            writes: vec![
                (self.out, size),
                (self.slots, accumulator(self.dtype).size_bytes()),
            ],
            reads,
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        float_type!(self.dtype, |T| delta_rule::delta_rule_grad::<T>(
            self.dims,
            self.x.operands(mem),
            mem.src(self.cot),
            mem.dst(self.out),
            mem.dst(self.slots)
        ));
        Ok(())
    }
}

impl Lower for crate::ops::DeltaRule {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        let slot = forward_slot(rule_dims(n.operands));
        vec![(accumulator(n.dtype), n.threads.max(1) * slot)]
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(DeltaRule {
            dtype: n.dtype(),
            dims: rule_dims(&n.shapes),
            x: RuleViews::of(&n.views, n.views.len() > 5),
            out: n.out,
            slots: n.scratch[0],
        })]
    }
}

impl Lower for crate::ops::DeltaRuleGrad {
    fn scratch(&self, n: &Sizes<'_>) -> Vec<(DType, usize)> {
        let acc = accumulator(n.dtype);
        let slot = backward_slot(rule_dims(n.operands), acc.size_bytes());
        vec![(acc, n.threads.max(1) * slot)]
    }

    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        let last = n.views.len() - 1;
        vec![boxed(DeltaRuleGrad {
            dtype: n.dtype(),
            dims: rule_dims(&n.shapes),
            x: RuleViews::of(&n.views, last > 5),
            cot: n.views[last],
            out: n.out,
            slots: n.scratch[0],
        })]
    }
}

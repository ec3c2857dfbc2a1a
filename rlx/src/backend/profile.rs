//! Where the time of a run goes: one timed entry per step a backend runs.

use std::fmt;
use std::time::Duration;

use crate::ir::NodeId;

/// One timed step of a profiled run.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileStep {
    /// The op's name (`matmul`, `attention`), or `run` when the backend times only whole runs.
    pub op: &'static str,
    /// The node of the optimized graph the step computes, when the backend knows it.
    pub node: Option<NodeId>,
    /// Time spent in the step, summed over the profiled runs.
    pub time: Duration,
}

/// The time of one or more runs, split into the steps the backend ran.
///
/// ```
/// use rlx::prelude::*;
/// use rlx::backend::{Backend, Executable};
/// use rlx::cpu::CpuBackend;
/// use rlx::tensor::HostTensor;
///
/// let mut b = GraphBuilder::new();
/// let x = b.input("x", DType::F32, [4, 4])?;
/// let y = b.unary(UnaryOp::Exp, x)?;
/// let z = b.matmul(y, y)?;
/// b.output("z", z)?;
/// let exe = CpuBackend::default().compile(&b.finish()?)?;
/// let x = HostTensor::from_vec(vec![0.5f32; 16], [4, 4])?;
/// let profile = exe.profile(&[("x", x.view())], &[], 3)?;
/// let ops: Vec<&str> = profile.by_op().iter().map(|(op, ..)| *op).collect();
/// assert!(ops.contains(&"matmul") && ops.contains(&"exp"));
/// println!("{profile}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// Runs the times are summed over.
    pub runs: usize,
    /// Wall time of the runs, inputs and outputs included.
    pub total: Duration,
    /// The steps in execution order.
    pub steps: Vec<ProfileStep>,
}

impl Profile {
    /// Time per op name: `(op, time, steps)`, slowest first.
    pub fn by_op(&self) -> Vec<(&'static str, Duration, usize)> {
        let mut totals: Vec<(&'static str, Duration, usize)> = Vec::new();
        for step in &self.steps {
            match totals.iter_mut().find(|(op, ..)| *op == step.op) {
                Some((_, time, count)) => {
                    *time += step.time;
                    *count += 1;
                }
                None => totals.push((step.op, step.time, 1)),
            }
        }
        totals.sort_by_key(|t| std::cmp::Reverse(t.1));
        totals
    }
}

impl fmt::Display for Profile {
    /// A table of time per op, per run, with each op's share of the total.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs = self.runs.max(1) as f64;
        let total = self.total.as_secs_f64().max(f64::MIN_POSITIVE);
        writeln!(
            f,
            "{:<16} {:>10} {:>7} {:>6}",
            "op", "ms/run", "share", "kernels"
        )?;
        let mut listed = Duration::ZERO;
        for (op, time, steps) in self.by_op() {
            listed += time;
            writeln!(
                f,
                "{op:<16} {:>10.3} {:>6.1}% {:>6}",
                time.as_secs_f64() * 1e3 / runs,
                100.0 * time.as_secs_f64() / total,
                steps,
            )?;
        }
        let rest = self.total.saturating_sub(listed);
        writeln!(
            f,
            "{:<16} {:>10.3} {:>6.1}%",
            "(outside steps)",
            rest.as_secs_f64() * 1e3 / runs,
            100.0 * rest.as_secs_f64() / total,
        )?;
        write!(
            f,
            "{:<16} {:>10.3}",
            "total",
            self.total.as_secs_f64() * 1e3 / runs
        )
    }
}

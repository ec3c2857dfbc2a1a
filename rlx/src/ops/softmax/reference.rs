//! The float64 values of softmax and log-softmax.

use crate::ops::array::{Array, Out};

/// `e^(x - max) / Σ e^(x - max)` along `axis`, or its logarithm.
pub(super) fn softmax(axis: usize, log: bool, x: &Array, out: &Out) -> Array {
    out.fill(|o| {
        let line = x.line(o, axis);
        let max = line.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = line.iter().map(|v| (v - max).exp()).sum();
        let shifted = x.at(o) - max;
        if log {
            shifted - sum.ln()
        } else {
            shifted.exp() / sum
        }
    })
}

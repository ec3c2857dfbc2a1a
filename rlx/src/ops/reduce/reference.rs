//! The float64 values of reductions, arg-reductions and running sums.

use crate::ir::{ArgReduceOp, ReduceOp};
use crate::ops::array::{Array, Out, for_each_index};
use std::collections::HashMap;

/// `op` over `axes` of `x`. Over nothing: 0 for a sum, 1 for a product, NaN for a mean;
/// ∓∞ for a float max/min and 0 for an integer one (integers have no identity for them).
pub(super) fn reduce(op: ReduceOp, axes: &[usize], keep_dims: bool, x: &Array, out: &Out) -> Array {
    let float = x.dtype.is_float();
    let reduced: Vec<usize> = axes.iter().map(|a| x.shape[*a]).collect();
    // The input index an output index and an index of the reduced axes name.
    let source = |o: &[usize], r: &[usize]| -> Vec<usize> {
        let mut kept = o.iter();
        let mut red = r.iter();
        (0..x.shape.len())
            .map(|a| {
                if axes.contains(&a) {
                    if keep_dims {
                        kept.next();
                    }
                    *red.next().expect("one per reduced axis")
                } else {
                    *kept.next().expect("one per kept axis")
                }
            })
            .collect()
    };
    out.fill(|o| {
        let mut vals = Vec::new();
        for_each_index(&reduced, |r| vals.push(x.at(&source(o, r))));
        let nan = vals.iter().any(|v| v.is_nan());
        let ints = vals.iter().map(|v| *v as i64);
        match op {
            // Integers wrap exactly as two's complement does.
            ReduceOp::Sum if !float => ints.fold(0, i64::wrapping_add) as f64,
            ReduceOp::Prod if !float => ints.fold(1, i64::wrapping_mul) as f64,
            ReduceOp::Sum => vals.iter().sum(),
            ReduceOp::Mean => vals.iter().sum::<f64>() / vals.len() as f64,
            ReduceOp::Prod => vals.iter().product(),
            ReduceOp::Max | ReduceOp::Min if nan => f64::NAN,
            ReduceOp::Max if vals.is_empty() && !float => 0.0,
            ReduceOp::Min if vals.is_empty() && !float => 0.0,
            ReduceOp::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ReduceOp::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
        }
    })
}

/// The first position along `axis` of the largest (smallest) value, a NaN counting as
/// beyond every number.
pub(super) fn arg_reduce(
    op: ArgReduceOp,
    axis: usize,
    keep_dims: bool,
    x: &Array,
    out: &Out,
) -> Array {
    out.fill(|o| {
        let mut at = o.to_vec();
        if !keep_dims {
            at.insert(axis, 0);
        }
        let line = x.line(&at, axis);
        let mut best = 0;
        for (k, v) in line.iter().enumerate().skip(1) {
            let cur = line[best];
            let better = match op {
                ArgReduceOp::ArgMax => v > &cur,
                ArgReduceOp::ArgMin => v < &cur,
            };
            if !cur.is_nan() && (v.is_nan() || better) {
                best = k;
            }
        }
        best as f64
    })
}

/// The running sum along `axis`, from the end when `reverse`, without the current element
/// when `exclusive`.
pub(super) fn cumsum(axis: usize, exclusive: bool, reverse: bool, x: &Array, out: &Out) -> Array {
    // Each line is read once (its elements are not adjacent unless `axis` is last); every
    // element's sum is still its own, term by term.
    let mut lines: HashMap<Vec<usize>, Vec<f64>> = HashMap::new();
    out.fill(|o| {
        let mut start = o.to_vec();
        start[axis] = 0;
        let line = lines
            .entry(start)
            .or_insert_with_key(|start| x.line(start, axis));
        let k = o[axis];
        let range = match (reverse, exclusive) {
            (false, false) => 0..k + 1,
            (false, true) => 0..k,
            (true, false) => k..line.len(),
            (true, true) => k + 1..line.len(),
        };
        if x.dtype.is_float() {
            line[range].iter().sum()
        } else {
            line[range]
                .iter()
                .fold(0i64, |s, v| s.wrapping_add(*v as i64)) as f64
        }
    })
}

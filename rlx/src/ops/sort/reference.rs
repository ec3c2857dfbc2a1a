//! The float64 values of sort, argsort and top-k.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::ir::SortOutput;
use crate::ops::array::{Array, Out};

/// Positions along `axis` at `idx` ordered by value, stably (equal values keep their
/// order), NaN above every number.
fn order(x: &Array, idx: &[usize], axis: usize, descending: bool) -> (Vec<f64>, Vec<usize>) {
    let line = x.line(idx, axis);
    let mut positions: Vec<usize> = (0..line.len()).collect();
    positions.sort_by(|&a, &b| {
        let (p, q) = (line[a], line[b]);
        let ord = match (p.is_nan(), q.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => p.partial_cmp(&q).unwrap_or(Ordering::Equal),
        };
        if descending { ord.reverse() } else { ord }
    });
    (line, positions)
}

/// Element `o[axis]` of the line through `o` after ordering: its value or source position.
pub(super) fn sorted(
    axis: usize,
    descending: bool,
    output: SortOutput,
    x: &Array,
    out: &Out,
) -> Array {
    // Each line is ordered once (its elements are not adjacent unless `axis` is last).
    let mut lines: HashMap<Vec<usize>, (Vec<f64>, Vec<usize>)> = HashMap::new();
    out.fill(|o| {
        let mut start = o.to_vec();
        start[axis] = 0;
        let (line, positions) = lines
            .entry(start)
            .or_insert_with_key(|start| order(x, start, axis, descending));
        let p = positions[o[axis]];
        match output {
            SortOutput::Values => line[p],
            SortOutput::Indices => p as f64,
        }
    })
}

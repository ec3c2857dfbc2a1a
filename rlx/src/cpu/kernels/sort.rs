//! Sorting along an axis: `sort`, `argsort` and `topk`, over an input viewed as
//! `[outer, len, inner]`. Stable: equal values keep their order. NaN sorts as the largest
//! value (first when descending, last when ascending).

use std::cmp::Ordering;

use super::reduce::Axis3;

/// Total order with NaN above every number.
fn compare<K: PartialOrd>(a: &K, b: &K, is_nan: impl Fn(&K) -> bool) -> Ordering {
    match (is_nan(a), is_nan(b)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

/// For each line, sorts the positions `0..len` by value into `order` (scratch of `len`),
/// then calls `emit(o, i, order)` to write the first `keep` of them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sort_lines<T: Copy, K: PartialOrd>(
    s: Axis3,
    descending: bool,
    x: &[T],
    key: impl Fn(T) -> K,
    is_nan: impl Fn(&K) -> bool,
    order: &mut [u32],
    mut emit: impl FnMut(usize, usize, &[u32]),
) {
    let order = &mut order[..s.len];
    for o in 0..s.outer {
        for i in 0..s.inner {
            let at = |k: u32| x[(o * s.len + k as usize) * s.inner + i];
            for (k, slot) in order.iter_mut().enumerate() {
                *slot = k as u32;
            }
            // `sort_by` is stable, so ties keep ascending positions either way.
            order.sort_by(|a, b| {
                let ord = compare(&key(at(*a)), &key(at(*b)), &is_nan);
                if descending { ord.reverse() } else { ord }
            });
            emit(o, i, order);
        }
    }
}

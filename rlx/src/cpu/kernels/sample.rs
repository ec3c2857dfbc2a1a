//! One draw per row of logits ([`SampleToken`](crate::ir::SampleToken)'s meaning) without
//! sorting the vocabulary: the filters need only the top ranks in order, found by
//! selection over a growing prefix, and the draw walks the tokens in index order.

use std::cmp::Ordering;

use super::numeric::Real;

/// A row's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings<A> {
    pub uniform: A,
    pub temperature: A,
    pub top_k: i64,
    pub top_p: A,
    pub min_p: A,
}

/// The token drawn from `logits` (read through `logit`, `vocab` of them) under `s`;
/// `weight` and `order` are scratch of `vocab` elements each.
pub(crate) fn sample_row<A: Real>(
    vocab: usize,
    logit: impl Fn(usize) -> A,
    s: Settings<A>,
    weight: &mut [A],
    order: &mut [u32],
) -> i64 {
    // The most likely token: the first of equal maxima, a NaN winning (as argmax).
    let mut best = 0;
    for i in 1..vocab {
        let (c, b) = (logit(i), logit(best));
        if !b.is_nan() && (c.is_nan() || c > b) {
            best = i;
        }
    }
    // `!(t > 0)` rather than `t <= 0` would also send NaN here; the meaning does not.
    if vocab == 0 || s.temperature <= A::ZERO {
        return best as i64;
    }
    let max = logit(best);
    for (i, w) in weight[..vocab].iter_mut().enumerate() {
        *w = ((logit(i) - max) / s.temperature).exp();
    }
    // Rank order: larger logit first, equal logits by index; NaN ranks above every number
    // (as the argmax above takes it), so the order stays total for the sorts.
    let before = |a: &u32, b: &u32| -> Ordering {
        let (la, lb) = (logit(*a as usize), logit(*b as usize));
        match (la.is_nan(), lb.is_nan()) {
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            _ => match lb.partial_cmp(&la) {
                Some(Ordering::Equal) | None => a.cmp(b),
                Some(o) => o,
            },
        }
    };
    for (i, o) in order[..vocab].iter_mut().enumerate() {
        *o = i as u32;
    }
    let order = &mut order[..vocab];
    let weight = &weight[..vocab];

    let kept_k = if s.top_k > 0 && s.top_k as u64 <= vocab as u64 {
        s.top_k as usize
    } else {
        vocab
    };
    let kept_m = weight.iter().filter(|w| **w >= s.min_p).count().max(1);
    let kept_p = if s.top_p >= A::ONE {
        kept_k
    } else {
        nucleus(weight, order, kept_k, s.top_p, &before)
    };
    let kept = kept_k.min(kept_p).min(kept_m);

    // The kept tokens are the first `kept` ranks: those not after the last of them.
    let threshold = if kept < vocab {
        order.select_nth_unstable_by(kept - 1, before);
        Some(order[kept - 1])
    } else {
        None
    };
    let is_kept = |i: usize| match threshold {
        None => true,
        Some(t) => before(&(i as u32), &t) != Ordering::Greater,
    };
    let mut total = A::ZERO;
    for (i, w) in weight.iter().enumerate() {
        if is_kept(i) {
            total += *w;
        }
    }
    let uniform = if s.uniform > A::ZERO {
        s.uniform
    } else {
        A::ZERO
    };
    let point = uniform * total;
    let mut running = A::ZERO;
    for (i, w) in weight.iter().enumerate() {
        if is_kept(i) {
            running += *w;
            if running > point {
                return i as i64;
            }
        }
    }
    best as i64
}

/// How many of the first `kept_k` ranks top-p keeps: those whose weights before them sum
/// to less than `top_p` of the first `kept_k`'s (at least 1). Sorts a prefix of the ranks,
/// four times longer each time it falls short.
fn nucleus<A: Real>(
    weight: &[A],
    order: &mut [u32],
    kept_k: usize,
    top_p: A,
    before: &impl Fn(&u32, &u32) -> Ordering,
) -> usize {
    let vocab = weight.len();
    let mass = if kept_k == vocab {
        sum(weight.iter().copied())
    } else {
        order.select_nth_unstable_by(kept_k - 1, before);
        sum(order[..kept_k].iter().map(|&i| weight[i as usize]))
    };
    let needed = top_p * mass;
    let mut prefix = kept_k.min(64);
    loop {
        if prefix < kept_k {
            order[..kept_k].select_nth_unstable_by(prefix - 1, before);
        }
        order[..prefix].sort_unstable_by(before);
        let mut sum = A::ZERO;
        for (r, &i) in order[..prefix].iter().enumerate() {
            if sum >= needed {
                return r.max(1);
            }
            sum += weight[i as usize];
        }
        if prefix == kept_k {
            return kept_k;
        }
        prefix = (prefix * 4).min(kept_k);
    }
}

fn sum<A: Real>(values: impl Iterator<Item = A>) -> A {
    let mut total = A::ZERO;
    for v in values {
        total += v;
    }
    total
}

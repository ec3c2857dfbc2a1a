//! One draw per row of logits ([`SampleToken`](crate::ir::SampleToken)'s meaning) without
//! sorting the vocabulary: the filters need only the top ranks in order, found by
//! selection over a growing prefix, and the draw walks the tokens in index order.

use std::cmp::Ordering;

use super::numeric::{FloatStore, Real};
use super::reduce::first_extreme;
use super::simd::vectorized;

/// A row's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings<A> {
    pub uniform: A,
    pub temperature: A,
    pub top_k: i64,
    pub top_p: A,
    pub min_p: A,
}

/// The token drawn from `row` (`vocab` logits) under `s`; `weight` and `order` are
/// scratch of `vocab` elements each.
pub(crate) fn sample_row<S: FloatStore>(
    row: &[S],
    s: Settings<S::Acc>,
    weight: &mut [S::Acc],
    order: &mut [u32],
) -> i64 {
    let vocab = row.len();
    let logit = |i: usize| row[i].load();
    let weight = &mut weight[..vocab];
    // The passes over the whole vocabulary run at the vector width: the most likely token,
    // then the weights.
    let best = first_extreme::<S, true>(row);
    // `!(t > 0)` rather than `t <= 0` would also send NaN here; the meaning does not.
    if vocab == 0 || s.temperature <= S::Acc::ZERO {
        return best as i64;
    }
    let (max, temperature) = (logit(best), s.temperature);
    vectorized(|| {
        for (w, l) in weight.iter_mut().zip(row) {
            *w = ((l.load() - max) / temperature).exp();
        }
    });
    sample_weights(logit, weight, s, order, best)
}

/// [`sample_row`] once the weights `exp((logit - max) / temperature)` are made, `best`
/// the most likely token.
fn sample_weights<A: Real>(
    logit: impl Fn(usize) -> A,
    weight: &[A],
    s: Settings<A>,
    order: &mut [u32],
    best: usize,
) -> i64 {
    let vocab = weight.len();
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

    let kept_k = if s.top_k > 0 && s.top_k as u64 <= vocab as u64 {
        s.top_k as usize
    } else {
        vocab
    };
    let kept_m = weight.iter().filter(|w| **w >= s.min_p).count().max(1);
    // `order[..candidates]` holds the ranks the filters choose among (in no order): the
    // first `kept_k`, fewer where top-p can only keep the heaviest tokens.
    let mut candidates = vocab;
    if kept_k < vocab {
        order.select_nth_unstable_by(kept_k - 1, before);
        candidates = kept_k;
    }
    let kept_p = if s.top_p >= A::ONE {
        kept_k
    } else {
        let mass = sum(order[..candidates].iter().map(|&i| weight[i as usize]));
        let needed = s.top_p * mass;
        if candidates == vocab
            && let Some(heavy) = heavy_tokens(weight, order, needed)
        {
            candidates = heavy;
        }
        nucleus(weight, &mut order[..candidates], needed, &before)
    };
    let kept = kept_k.min(kept_p).min(kept_m);

    // The kept tokens are the first `kept` ranks (among the candidates: `kept` is at most
    // their count). Their weights are summed, and walked for the draw, in index order:
    // sorted by index when they are fewer than the vocabulary, so that a pass over the
    // vocabulary need not ask of each token whether it is kept.
    let kept_tokens = if kept < vocab {
        order[..candidates].select_nth_unstable_by(kept - 1, before);
        let kept_tokens = &mut order[..kept];
        kept_tokens.sort_unstable();
        Some(&*kept_tokens)
    } else {
        None
    };
    let uniform = if s.uniform > A::ZERO {
        s.uniform
    } else {
        A::ZERO
    };
    match kept_tokens {
        Some(tokens) => {
            let weights = tokens.iter().map(|&i| weight[i as usize]);
            draw(tokens.iter().map(|&i| i as usize).zip(weights), uniform)
        }
        None => draw(weight.iter().copied().enumerate(), uniform),
    }
    .unwrap_or(best) as i64
}

/// The token at `uniform` of the way through the total weight of `tokens` (index and
/// weight, in index order), if one is reached (rounding may leave the point past the end).
fn draw<A: Real>(tokens: impl Iterator<Item = (usize, A)> + Clone, uniform: A) -> Option<usize> {
    let total = sum(tokens.clone().map(|(_, w)| w));
    let point = uniform * total;
    let mut running = A::ZERO;
    for (i, w) in tokens {
        running += w;
        if running > point {
            return Some(i);
        }
    }
    None
}

/// How many of the first ranks top-p keeps: those whose weights before them sum to less
/// than `needed` (at least 1). `ranks` holds the first ranks, in no order; the count is at
/// most their number. Sorts a prefix of them, four times longer each time it falls short.
fn nucleus<A: Real>(
    weight: &[A],
    ranks: &mut [u32],
    needed: A,
    before: &impl Fn(&u32, &u32) -> Ordering,
) -> usize {
    let len = ranks.len();
    let mut prefix = len.min(64);
    loop {
        if prefix < len {
            ranks.select_nth_unstable_by(prefix - 1, before);
        }
        ranks[..prefix].sort_unstable_by(before);
        let mut sum = A::ZERO;
        for (r, &i) in ranks[..prefix].iter().enumerate() {
            if sum >= needed {
                return r.max(1);
            }
            sum += weight[i as usize];
        }
        if prefix == len {
            return len;
        }
        prefix = (prefix * 4).min(len);
    }
}

/// The tokens top-p can keep, written to `order`, and their count; `None` when no cut
/// applies. A token's weight grows with its logit, so the tokens of weight at least `t`
/// are the first ranks; once they weigh `needed`, the nucleus lies among them. Tries a few
/// `t` (the largest weight is 1) and asks for a margin over `needed` that covers the
/// rounding of summing the same weights in rank order. A NaN weight (a NaN or infinite
/// logit) makes every sum NaN, so it never cuts.
fn heavy_tokens<A: Real>(weight: &[A], order: &mut [u32], needed: A) -> Option<usize> {
    for shift in [6, 12, 20] {
        let t = A::from_f64((-f64::from(shift)).exp2());
        let (mut count, mut mass) = (0usize, A::ZERO);
        for w in weight {
            if *w >= t {
                count += 1;
                mass += *w;
            }
        }
        let margin = A::ONE + A::from_f64(4.0 * count as f64 * f64::from(f32::EPSILON));
        if mass >= needed * margin {
            let heavy = weight.iter().enumerate().filter(|(_, w)| **w >= t);
            for (slot, (i, _)) in order.iter_mut().zip(heavy) {
                *slot = i as u32;
            }
            return Some(count);
        }
        if count == weight.len() {
            return None;
        }
    }
    None
}

fn sum<A: Real>(values: impl Iterator<Item = A>) -> A {
    let mut total = A::ZERO;
    for v in values {
        total += v;
    }
    total
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use super::{heavy_tokens, nucleus};

    /// Top-p restricted to the heavy tokens keeps exactly the ranks it keeps over the whole
    /// vocabulary, with the same last kept token, over peaked and flat rows with ties.
    #[test]
    fn top_p_among_heavy_tokens_keeps_what_it_keeps_among_all() {
        let mut seed = 5u64;
        let mut uniform = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut cut = 0;
        for trial in 0..400 {
            let vocab = [7usize, 300, 3000][trial % 3];
            let spread = 0.2 + 12.0 * uniform();
            // Logits on a grid, so that ties (equal weights) happen.
            let logits: Vec<f32> = (0..vocab)
                .map(|_| ((uniform() - 0.5) * spread * 8.0).round() as f32 / 8.0)
                .collect();
            let temperature = 0.3 + uniform() as f32;
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weight: Vec<f32> = logits
                .iter()
                .map(|l| ((l - max) / temperature).exp())
                .collect();
            let before = |a: &u32, b: &u32| -> Ordering {
                let (la, lb) = (logits[*a as usize], logits[*b as usize]);
                lb.partial_cmp(&la).unwrap().then(a.cmp(b))
            };
            let top_p = [0.05f32, 0.5, 0.9, 0.95, 0.999][trial % 5];
            let needed = top_p * weight.iter().sum::<f32>();
            let mut all: Vec<u32> = (0..vocab as u32).collect();
            let kept = nucleus(&weight, &mut all, needed, &before);
            all.select_nth_unstable_by(kept - 1, before);
            let mut heavy: Vec<u32> = (0..vocab as u32).collect();
            let Some(count) = heavy_tokens(&weight, &mut heavy, needed) else {
                continue;
            };
            cut += usize::from(count < vocab);
            let ranks = &mut heavy[..count];
            assert_eq!(
                nucleus(&weight, ranks, needed, &before),
                kept,
                "trial {trial}"
            );
            ranks.select_nth_unstable_by(kept - 1, before);
            assert_eq!(ranks[kept - 1], all[kept - 1], "trial {trial}");
        }
        assert!(cut > 100, "only {cut} rows were cut");
    }
}

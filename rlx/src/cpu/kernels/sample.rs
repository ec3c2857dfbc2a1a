//! One draw per row of logits ([`SampleToken`](crate::ir::SampleToken)'s meaning) without
//! sorting the vocabulary: the filters need only the top ranks in order, found by
//! selection over a growing prefix, and the draw walks the tokens in index order. Ranks are
//! integer keys (a logit's order-preserving bits above its index), so the selections and
//! sorts compare integers instead of loading two logits per comparison.

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

/// A float's rank keys: integers whose ascending order is the rank order of (value, token)
/// pairs — larger value first, equal values (both zeros among them) by token, NaN above
/// every number (as the argmax takes it).
pub(crate) trait RankKey: Copy {
    /// Wide enough for the value's order and a token below 2^32.
    type Key: Ord + Copy + bytemuck::Pod;
    fn rank_key(self, token: usize) -> Self::Key;
    fn token(key: Self::Key) -> usize;
}

/// The rank key of a float whose bits are `$bits`, kept in `$key`.
macro_rules! rank_key {
    ($float:ty, $bits:ty, $key:ty) => {
        impl RankKey for $float {
            type Key = $key;
            fn rank_key(self, token: usize) -> $key {
                // Order-preserving bits of the value (`+ 0.0` turns -0 into +0), reversed;
                // every number's are at least 1, NaN's 0.
                let rank: $bits = if self.is_nan() {
                    0
                } else {
                    let bits = (self + 0.0).to_bits();
                    let top = <$bits>::BITS - 1;
                    !if bits >> top == 1 {
                        !bits
                    } else {
                        bits | 1 << top
                    }
                };
                <$key>::from(rank) << 32 | token as $key
            }
            fn token(key: $key) -> usize {
                (key & <$key>::from(u32::MAX)) as usize
            }
        }
    };
}

rank_key!(f32, u32, u64);
rank_key!(f64, u64, u128);

/// The token drawn from `row` (`vocab` logits) under `s`; `weight` and `keys` are
/// scratch of `vocab` elements each.
pub(crate) fn sample_row<S: FloatStore<Acc: RankKey>>(
    row: &[S],
    s: Settings<S::Acc>,
    weight: &mut [S::Acc],
    keys: &mut [<S::Acc as RankKey>::Key],
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
            // At most 0 (NaN stays NaN): the exponential of softmax, which vectorizes.
            *w = ((l.load() - max) / temperature).exp_nonpositive_fused();
        }
    });
    sample_weights(logit, weight, s, keys, best)
}

/// [`sample_row`] once the weights `exp((logit - max) / temperature)` are made, `best`
/// the most likely token.
fn sample_weights<A: Real + RankKey>(
    logit: impl Fn(usize) -> A,
    weight: &[A],
    s: Settings<A>,
    keys: &mut [A::Key],
    best: usize,
) -> i64 {
    let vocab = weight.len();
    let keys = &mut keys[..vocab];
    let fill = |keys: &mut [A::Key]| {
        for (i, k) in keys.iter_mut().enumerate() {
            *k = logit(i).rank_key(i);
        }
    };

    let kept_k = if s.top_k > 0 && s.top_k as u64 <= vocab as u64 {
        s.top_k as usize
    } else {
        vocab
    };
    let kept_m = weight.iter().filter(|w| **w >= s.min_p).count().max(1);
    // `keys[..candidates]` holds the ranks the filters choose among (in no order): the
    // first `kept_k`, fewer where top-p can only keep the heaviest tokens. Keys are made
    // only where a filter may cut.
    let mut candidates = vocab;
    let mut keyed = false;
    if kept_k < vocab {
        fill(keys);
        keys.select_nth_unstable(kept_k - 1);
        (candidates, keyed) = (kept_k, true);
    }
    let kept_p = if s.top_p >= A::ONE {
        kept_k
    } else {
        let mass = if keyed {
            sum(keys[..candidates].iter().map(|&k| weight[A::token(k)]))
        } else {
            sum(weight.iter().copied())
        };
        let needed = s.top_p * mass;
        if !keyed {
            match heavy_tokens(&logit, weight, keys, needed) {
                Some(heavy) => candidates = heavy,
                None => fill(keys),
            }
            keyed = true;
        }
        nucleus(weight, &mut keys[..candidates], needed)
    };
    let kept = kept_k.min(kept_p).min(kept_m);

    // The kept tokens are the first `kept` ranks (among the candidates: `kept` is at most
    // their count). Their weights are summed, and walked for the draw, in index order:
    // sorted by index when they are fewer than the vocabulary, so that a pass over the
    // vocabulary need not ask of each token whether it is kept.
    let kept_tokens = if kept < vocab {
        if !keyed {
            fill(keys);
        }
        keys[..candidates].select_nth_unstable(kept - 1);
        let kept_keys = &mut keys[..kept];
        // Keys of one rank bits order as their tokens.
        for k in kept_keys.iter_mut() {
            *k = A::ZERO.rank_key(A::token(*k));
        }
        kept_keys.sort_unstable();
        Some(&*kept_keys)
    } else {
        None
    };
    let uniform = if s.uniform > A::ZERO {
        s.uniform
    } else {
        A::ZERO
    };
    match kept_tokens {
        Some(keys) => {
            let tokens = keys.iter().map(|&k| A::token(k));
            draw(tokens.map(|i| (i, weight[i])), uniform)
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
/// than `needed` (at least 1). `keys` holds the first ranks, in no order; the count is at
/// most their number. Sorts a prefix of them, four times longer each time it falls short.
fn nucleus<A: Real + RankKey>(weight: &[A], keys: &mut [A::Key], needed: A) -> usize {
    let len = keys.len();
    let mut prefix = len.min(64);
    loop {
        if prefix < len {
            keys.select_nth_unstable(prefix - 1);
        }
        keys[..prefix].sort_unstable();
        let mut sum = A::ZERO;
        for (r, &k) in keys[..prefix].iter().enumerate() {
            if sum >= needed {
                return r.max(1);
            }
            sum += weight[A::token(k)];
        }
        if prefix == len {
            return len;
        }
        prefix = (prefix * 4).min(len);
    }
}

/// The tokens top-p can keep, their keys written to `keys`, and their count; `None` when
/// no cut applies. A token's weight grows with its logit, so the tokens of weight at least
/// `t` are the first ranks; once they weigh `needed`, the nucleus lies among them. Tries a
/// few `t` (the largest weight is 1) and asks for a margin over `needed` that covers the
/// rounding of summing the same weights in rank order. A NaN weight (a NaN or infinite
/// logit) makes every sum NaN, so it never cuts.
fn heavy_tokens<A: Real + RankKey>(
    logit: &impl Fn(usize) -> A,
    weight: &[A],
    keys: &mut [A::Key],
    needed: A,
) -> Option<usize> {
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
            for (slot, (i, _)) in keys.iter_mut().zip(heavy) {
                *slot = logit(i).rank_key(i);
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
    use super::{RankKey, heavy_tokens, nucleus};

    /// Rank keys order as the ranks: larger value first, equal values (both zeros among
    /// them) by token, NaN above everything, in both float widths.
    #[test]
    fn rank_keys_order_as_the_ranks() {
        let values = [
            f64::NAN,
            f64::INFINITY,
            3.5,
            1.0,
            f64::MIN_POSITIVE,
            0.0,
            -0.0,
            -f64::MIN_POSITIVE,
            -1.0,
            -3.5,
            f64::NEG_INFINITY,
        ];
        fn ranked<A: RankKey>(values: impl Iterator<Item = A>) -> Vec<usize> {
            let mut keys: Vec<A::Key> = values.enumerate().map(|(i, v)| v.rank_key(i)).collect();
            keys.sort_unstable();
            keys.into_iter().map(A::token).collect()
        }
        // As listed; the zeros tie and go by token, whichever sign comes first.
        let expected: Vec<usize> = (0..values.len()).collect();
        assert_eq!(ranked(values.iter().copied()), expected);
        assert_eq!(ranked(values.iter().map(|v| *v as f32)), expected);
        let zeros = [-0.0f32, 0.0, -0.0];
        assert_eq!(ranked(zeros.iter().copied()), [0, 1, 2]);
        assert!(f32::NAN.rank_key(9) < f32::INFINITY.rank_key(0));
        assert!(f32::NAN.rank_key(1) < (-f32::NAN).rank_key(2));
        assert!(f64::NAN.rank_key(1) < (-f64::NAN).rank_key(2));
        assert_eq!(f32::token(7.5f32.rank_key(123_456)), 123_456);
        assert_eq!(
            f64::token((-7.5f64).rank_key(u32::MAX as usize)),
            u32::MAX as usize
        );
    }

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
            let logit = |i: usize| logits[i];
            let top_p = [0.05f32, 0.5, 0.9, 0.95, 0.999][trial % 5];
            let needed = top_p * weight.iter().sum::<f32>();
            let mut all: Vec<u64> = (0..vocab).map(|i| logits[i].rank_key(i)).collect();
            let kept = nucleus(&weight, &mut all, needed);
            all.select_nth_unstable(kept - 1);
            let mut heavy = vec![0u64; vocab];
            let Some(count) = heavy_tokens(&logit, &weight, &mut heavy, needed) else {
                continue;
            };
            cut += usize::from(count < vocab);
            let ranks = &mut heavy[..count];
            assert_eq!(nucleus(&weight, ranks, needed), kept, "trial {trial}");
            ranks.select_nth_unstable(kept - 1);
            assert_eq!(ranks[kept - 1], all[kept - 1], "trial {trial}");
        }
        assert!(cut > 100, "only {cut} rows were cut");
    }
}

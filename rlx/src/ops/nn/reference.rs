//! The float64 values of attention and rotary position embedding.

use crate::ir::{AttentionMask, DType};
use crate::ops::array::{Array, Out};

/// `softmax(q kᵀ · scale + mask) v`, query heads sharing key/value heads in groups; a row
/// with no visible key is 0.
pub(super) fn attention(scale: f64, mask: AttentionMask, x: &[Array], out: &Out) -> Array {
    let (q, k, v) = (&x[0], &x[1], &x[2]);
    let r = q.shape.len();
    let (sq, d) = (q.shape[r - 2], q.shape[r - 1]);
    let sk = k.shape[r - 2];
    let group = if r >= 3 {
        q.shape[r - 3] / k.shape[r - 3].max(1)
    } else {
        1
    };
    let tensor_mask = x.get(3);
    let mut score_at = Vec::with_capacity(r);
    out.fill(|o| {
        let lead = &o[..r - 2];
        let mut kv_lead = lead.to_vec();
        if r >= 3 {
            kv_lead[r - 3] /= group.max(1);
        }
        let i = o[r - 2];
        // Queries and keys are aligned at their ends.
        let pos = i as i64 + sk as i64 - sq as i64;
        let row = |t: &Array, lead: &[usize], row: usize| -> usize {
            let mut flat = 0;
            for (a, dim) in t.shape[..r - 2].iter().enumerate() {
                flat = flat * dim + lead[a];
            }
            (flat * t.shape[r - 2] + row) * t.shape[r - 1]
        };
        let qi = row(q, lead, i);
        let scores: Vec<f64> = (0..sk)
            .map(|j| {
                let visible = match mask {
                    AttentionMask::Causal => (j as i64) <= pos,
                    AttentionMask::SlidingWindow(w) => {
                        (j as i64) <= pos && j as i64 + w as i64 > pos
                    }
                    AttentionMask::None | AttentionMask::Tensor => true,
                };
                if !visible {
                    return f64::NEG_INFINITY;
                }
                let kj = row(k, &kv_lead, j);
                let dot: f64 = (0..d).map(|c| q.data[qi + c] * k.data[kj + c]).sum();
                let mut s = dot * scale;
                if let Some(m) = tensor_mask {
                    score_at.clear();
                    score_at.extend_from_slice(lead);
                    score_at.extend([i, j]);
                    let mv = m.at_broadcast(&score_at);
                    if m.dtype == DType::Bool {
                        if mv == 0.0 {
                            return f64::NEG_INFINITY;
                        }
                    } else {
                        s += mv;
                    }
                }
                s
            })
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            return 0.0;
        }
        let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = weights.iter().sum();
        let c = o[r - 1];
        (0..sk)
            .map(|j| weights[j] / sum * v.data[row(v, &kv_lead, j) + c])
            .sum()
    })
}

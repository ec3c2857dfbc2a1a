//! The float64 values of layer and RMS normalization.

use crate::ops::array::{Array, Out};

/// Normalizes each row of the last axis: centred by its mean and divided by its standard
/// deviation (`centered`, layer norm) or divided by its root mean square (RMS norm), `eps`
/// added under the root; then times `weight` and plus `bias` when given.
pub(super) fn normalize(
    centered: bool,
    eps: f64,
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    out: &Out,
) -> Array {
    let n = *x.shape.last().expect("norms take rank 1 or more");
    let mut data = Vec::with_capacity(x.data.len());
    for row in x.data.chunks(n.max(1)).filter(|_| n > 0) {
        let mean = if centered {
            row.iter().sum::<f64>() / n as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for (i, v) in row.iter().enumerate() {
            let w = weight.map_or(1.0, |w| w.data[i]);
            let b = bias.map_or(0.0, |b| b.data[i]);
            data.push((v - mean) * inv * w + b);
        }
    }
    out.holding(data)
}

//! Learning-rate schedules: the factor applied to the base rate at each step.

/// How the learning rate changes with the step count (steps count from 0).
///
/// ```
/// use rlx::train::Schedule;
/// let s = Schedule::WarmupCosine { warmup: 10, total: 110, min_factor: 0.0 };
/// assert_eq!(s.factor(0), 0.1);           // linear warmup: (step + 1) / warmup
/// assert_eq!(s.factor(9), 1.0);
/// assert!((s.factor(60) - 0.5).abs() < 1e-12); // half-way down the cosine
/// assert_eq!(Schedule::Step { every: 5, gamma: 0.5 }.factor(10), 0.25);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    /// The base rate throughout.
    Constant,
    /// Multiplied by `gamma` every `every` steps (PyTorch's `StepLR`).
    Step {
        /// Steps between decays.
        every: u64,
        /// Decay factor.
        gamma: f64,
    },
    /// Linear warmup over `warmup` steps, then a cosine decay to `min_factor` of the base
    /// rate at step `total`, and `min_factor` after it.
    WarmupCosine {
        /// Warmup steps.
        warmup: u64,
        /// The step at which the decay ends.
        total: u64,
        /// The final factor.
        min_factor: f64,
    },
}

impl Schedule {
    /// The factor of the base learning rate at `step`.
    pub fn factor(&self, step: u64) -> f64 {
        match *self {
            Schedule::Constant => 1.0,
            Schedule::Step { every, gamma } => gamma.powf((step / every.max(1)) as f64),
            Schedule::WarmupCosine {
                warmup,
                total,
                min_factor,
            } => {
                if step < warmup {
                    return (step + 1) as f64 / warmup as f64;
                }
                if step >= total {
                    return min_factor;
                }
                let progress = (step - warmup) as f64 / (total - warmup).max(1) as f64;
                let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                min_factor + (1.0 - min_factor) * cosine
            }
        }
    }
}

//! Optimizers: their settings, their state, and the graph nodes of one update.

use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{BinaryOp, DType, NodeId, ReduceOp, Scalar, UnaryOp};

/// An optimizer and its settings, with PyTorch's semantics (`torch.optim.SGD`, `Adam`,
/// `AdamW`). The learning rate is the base rate; a [`Schedule`](super::Schedule) scales it
/// per step.
///
/// ```
/// use rlx::train::Optimizer;
/// let opt = Optimizer::adamw(1e-3).weight_decay(0.01);
/// assert_eq!(opt.lr(), 1e-3);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    /// Stochastic gradient descent, optionally with (Nesterov) momentum.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum factor (0 for plain SGD).
        momentum: f64,
        /// Nesterov momentum (needs `momentum > 0`).
        nesterov: bool,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
    },
    /// Adam; `weight_decay` is an L2 penalty added to the gradient.
    Adam(AdamSettings),
    /// Adam with decoupled weight decay: weights shrink by `lr · weight_decay` each step.
    AdamW(AdamSettings),
}

/// The settings Adam and AdamW share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamSettings {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// L2 penalty (Adam) or decoupled decay (AdamW).
    pub weight_decay: f64,
}

impl Optimizer {
    /// Plain SGD at learning rate `lr`.
    pub fn sgd(lr: f64) -> Optimizer {
        Optimizer::Sgd {
            lr,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        }
    }

    /// Adam with PyTorch's defaults (betas 0.9, 0.999; eps 1e-8; no weight decay).
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer::Adam(AdamSettings::new(lr, 0.0))
    }

    /// AdamW with PyTorch's defaults (betas 0.9, 0.999; eps 1e-8; weight decay 0.01).
    pub fn adamw(lr: f64) -> Optimizer {
        Optimizer::AdamW(AdamSettings::new(lr, 0.01))
    }

    /// SGD with `momentum`, Nesterov's variant when `nesterov`.
    pub fn momentum(self, momentum: f64, nesterov: bool) -> Optimizer {
        match self {
            Optimizer::Sgd {
                lr, weight_decay, ..
            } => Optimizer::Sgd {
                lr,
                momentum,
                nesterov,
                weight_decay,
            },
            other => other,
        }
    }

    /// The weight decay (an L2 penalty for SGD and Adam, decoupled for AdamW).
    pub fn weight_decay(self, decay: f64) -> Optimizer {
        match self {
            Optimizer::Sgd {
                lr,
                momentum,
                nesterov,
                ..
            } => Optimizer::Sgd {
                lr,
                momentum,
                nesterov,
                weight_decay: decay,
            },
            Optimizer::Adam(s) => Optimizer::Adam(AdamSettings {
                weight_decay: decay,
                ..s
            }),
            Optimizer::AdamW(s) => Optimizer::AdamW(AdamSettings {
                weight_decay: decay,
                ..s
            }),
        }
    }

    /// Adam's or AdamW's moment decays (unchanged for SGD).
    pub fn betas(self, beta1: f64, beta2: f64) -> Optimizer {
        match self {
            Optimizer::Adam(s) => Optimizer::Adam(AdamSettings {
                betas: (beta1, beta2),
                ..s
            }),
            Optimizer::AdamW(s) => Optimizer::AdamW(AdamSettings {
                betas: (beta1, beta2),
                ..s
            }),
            other => other,
        }
    }

    /// The base learning rate.
    pub fn lr(&self) -> f64 {
        match self {
            Optimizer::Sgd { lr, .. } => *lr,
            Optimizer::Adam(s) | Optimizer::AdamW(s) => s.lr,
        }
    }

    /// The state kept per weight, by suffix: `momentum_buffer` for SGD with momentum,
    /// `exp_avg` and `exp_avg_sq` for Adam(W) (PyTorch's names).
    pub fn state_names(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum != 0.0 => &["momentum_buffer"],
            Optimizer::Sgd { .. } => &[],
            Optimizer::Adam(_) | Optimizer::AdamW(_) => &["exp_avg", "exp_avg_sq"],
        }
    }

    /// Checks the settings.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let finite = |what: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{what} must be finite and non-negative, got {v}"))
            }
        };
        match self {
            Optimizer::Sgd {
                lr,
                momentum,
                nesterov,
                weight_decay,
            } => {
                finite("lr", *lr)?;
                finite("momentum", *momentum)?;
                finite("weight_decay", *weight_decay)?;
                if *nesterov && *momentum == 0.0 {
                    return Err("Nesterov momentum needs a momentum above 0".into());
                }
                Ok(())
            }
            Optimizer::Adam(s) | Optimizer::AdamW(s) => {
                finite("lr", s.lr)?;
                finite("eps", s.eps)?;
                finite("weight_decay", s.weight_decay)?;
                for beta in [s.betas.0, s.betas.1] {
                    if !(0.0..1.0).contains(&beta) {
                        return Err(format!("betas must be in [0, 1), got {beta}"));
                    }
                }
                Ok(())
            }
        }
    }
}

impl AdamSettings {
    fn new(lr: f64, weight_decay: f64) -> AdamSettings {
        AdamSettings {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay,
        }
    }
}

/// The per-step scalars an update reads, as graph inputs.
pub(crate) struct StepInputs {
    /// The scheduled learning rate.
    pub lr: NodeId,
    /// `1 − β1^t` and `1 − β2^t` (Adam only).
    pub bias_corrections: Option<(NodeId, NodeId)>,
}

/// Emits one weight's update: its new value, then its new state (in
/// [`Optimizer::state_names`] order).
pub(crate) fn update(
    b: &mut GraphBuilder,
    opt: &Optimizer,
    step: &StepInputs,
    weight: NodeId,
    grad: NodeId,
    state: &[NodeId],
) -> Result<(NodeId, Vec<NodeId>), BuildError> {
    let dtype = b.ty(weight).expect("the weight is a node").dtype;
    let lr = in_dtype(b, step.lr, dtype)?;
    let scalar = |b: &mut GraphBuilder, v: f64| b.scalar(Scalar::Float(v), dtype);
    let scale = |b: &mut GraphBuilder, x: NodeId, v: f64| {
        let c = scalar(b, v);
        b.mul(x, c)
    };
    match opt {
        Optimizer::Sgd {
            momentum,
            nesterov,
            weight_decay,
            ..
        } => {
            let mut g = grad;
            if *weight_decay != 0.0 {
                let decay = scale(b, weight, *weight_decay)?;
                g = b.add(g, decay)?;
            }
            let mut new_state = Vec::new();
            if *momentum != 0.0 {
                let kept = scale(b, state[0], *momentum)?;
                let buffer = b.add(kept, g)?;
                new_state.push(buffer);
                g = if *nesterov {
                    let ahead = scale(b, buffer, *momentum)?;
                    b.add(g, ahead)?
                } else {
                    buffer
                };
            }
            let delta = b.mul(g, lr)?;
            let new = b.binary(BinaryOp::Sub, weight, delta)?;
            Ok((new, new_state))
        }
        Optimizer::Adam(s) | Optimizer::AdamW(s) => {
            let decoupled = matches!(opt, Optimizer::AdamW(_));
            let (beta1, beta2) = s.betas;
            let mut g = grad;
            let mut w = weight;
            if s.weight_decay != 0.0 {
                if decoupled {
                    let lr_decay = scale(b, lr, s.weight_decay)?;
                    let shrink = b.mul(weight, lr_decay)?;
                    w = b.binary(BinaryOp::Sub, weight, shrink)?;
                } else {
                    let decay = scale(b, weight, s.weight_decay)?;
                    g = b.add(g, decay)?;
                }
            }
            let (bc1, bc2) = step
                .bias_corrections
                .expect("Adam's step inputs carry bias corrections");
            let (bc1, bc2) = (in_dtype(b, bc1, dtype)?, in_dtype(b, bc2, dtype)?);
            let m_old = scale(b, state[0], beta1)?;
            let m_new = scale(b, g, 1.0 - beta1)?;
            let m = b.add(m_old, m_new)?;
            let v_old = scale(b, state[1], beta2)?;
            let g2 = b.mul(g, g)?;
            let v_new = scale(b, g2, 1.0 - beta2)?;
            let v = b.add(v_old, v_new)?;
            // w − lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps), as PyTorch computes it.
            let root_v = b.unary(UnaryOp::Sqrt, v)?;
            let root_bc2 = b.unary(UnaryOp::Sqrt, bc2)?;
            let denom = b.binary(BinaryOp::Div, root_v, root_bc2)?;
            let eps = scalar(b, s.eps);
            let denom = b.add(denom, eps)?;
            let step_size = b.binary(BinaryOp::Div, lr, bc1)?;
            let ratio = b.binary(BinaryOp::Div, m, denom)?;
            let delta = b.mul(ratio, step_size)?;
            let new = b.binary(BinaryOp::Sub, w, delta)?;
            Ok((new, vec![m, v]))
        }
    }
}

/// `x` cast to `dtype` when it differs.
fn in_dtype(b: &mut GraphBuilder, x: NodeId, dtype: DType) -> Result<NodeId, BuildError> {
    if b.ty(x).is_some_and(|t| t.dtype == dtype) {
        Ok(x)
    } else {
        b.cast(x, dtype)
    }
}

/// Scales every gradient so their global L2 norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_`: factor `min(1, max_norm / (norm + 1e-6))`), in f32 or the
/// gradients' wider dtype.
pub(crate) fn clip_by_global_norm(
    b: &mut GraphBuilder,
    grads: &[NodeId],
    max_norm: f64,
) -> Result<Vec<NodeId>, BuildError> {
    let acc = if grads
        .iter()
        .any(|g| b.ty(*g).is_some_and(|t| t.dtype == DType::F64))
    {
        DType::F64
    } else {
        DType::F32
    };
    let mut total: Option<NodeId> = None;
    for &g in grads {
        let ty = b.ty(g).expect("gradients are nodes").clone();
        let g = in_dtype(b, g, acc)?;
        let sq = b.mul(g, g)?;
        let axes: Vec<usize> = (0..ty.rank()).collect();
        let sum = if axes.is_empty() {
            sq
        } else {
            b.reduce(ReduceOp::Sum, sq, &axes, false)?
        };
        total = Some(match total {
            Some(t) => b.add(t, sum)?,
            None => sum,
        });
    }
    let Some(total) = total else {
        return Ok(Vec::new());
    };
    let norm = b.unary(UnaryOp::Sqrt, total)?;
    let eps = b.scalar(Scalar::Float(1e-6), acc);
    let norm = b.add(norm, eps)?;
    let limit = b.scalar(Scalar::Float(max_norm), acc);
    let ratio = b.binary(BinaryOp::Div, limit, norm)?;
    let one = b.scalar(Scalar::Float(1.0), acc);
    let factor = b.binary(BinaryOp::Min, ratio, one)?;
    grads
        .iter()
        .map(|&g| {
            let dtype = b.ty(g).expect("gradients are nodes").dtype;
            let f = in_dtype(b, factor, dtype)?;
            b.mul(g, f)
        })
        .collect()
}

//! Gated DeltaNet, the linear attention of Qwen3-Next and Qwen3.5, on the gated delta rule
//! ([`Tensor::delta_rule`]).

use crate::typed::{Const, Dim, Tensor};

/// `x / |x|` along the last dim, as Gated DeltaNet normalizes queries and keys (with
/// `1e-6` added under the root, as the FLA kernels and transformers do).
#[track_caller]
fn unit_rows<'g, B: Dim, H: Dim, T: Dim, K: Dim>(
    x: Tensor<'g, (B, H, T, K)>,
) -> Tensor<'g, (B, H, T, K)> {
    let inverse = ((x * x).sum_keepdim::<3>() + 1e-6f32).rsqrt();
    x * inverse.broadcast::<(B, H, T, K)>()
}

/// Gated DeltaNet's recurrence from its projections, over `T` steps of `H` heads: queries
/// and keys made unit (queries also scaled by `1/√K`), the steps `β = sigmoid(b)` and the
/// log decays `g = −exp(a_log) · softplus(a + dt_bias)` (per head `a_log` and `dt_bias`, as
/// checkpoints store `A_log` and `dt_bias`), then the gated delta rule from `start` (zeros
/// when `None`). Returns the outputs and the state after the last step, which a decoder
/// carries to its next step. Where a checkpoint has fewer key heads than value heads,
/// repeat each key head's queries and keys over its consecutive value heads first. The
/// output gate and norm ([`gated_rms_norm`]) are the caller's.
///
/// ```
/// use rlx::nn::gated_delta_net;
/// use rlx::typed::{Const, Tensor, build};
/// rlx::dims!(Seq);
/// type Heads = Const<2>;
/// let graph = build(|g| {
///     let q: Tensor<(Const<1>, Heads, Seq, Const<16>)> = g.input("q");
///     let k: Tensor<(Const<1>, Heads, Seq, Const<16>)> = g.input("k");
///     let v: Tensor<(Const<1>, Heads, Seq, Const<8>)> = g.input("v");
///     let a: Tensor<(Const<1>, Heads, Seq)> = g.input("a");
///     let b: Tensor<(Const<1>, Heads, Seq)> = g.input("b");
///     let (a_log, dt_bias): (Tensor<(Heads,)>, Tensor<(Heads,)>) =
///         (g.param("A_log"), g.param("dt_bias"));
///     let (out, state) = gated_delta_net(q, k, v, a, b, a_log, dt_bias, None);
///     g.output("out", out);
///     g.output("state", state);
/// })?;
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[track_caller]
pub fn gated_delta_net<'g, B: Dim, H: Dim, T: Dim, K: Dim, V: Dim>(
    q: Tensor<'g, (B, H, T, K)>,
    k: Tensor<'g, (B, H, T, K)>,
    v: Tensor<'g, (B, H, T, V)>,
    a: Tensor<'g, (B, H, T)>,
    b: Tensor<'g, (B, H, T)>,
    a_log: Tensor<'g, (H,)>,
    dt_bias: Tensor<'g, (H,)>,
    start: Option<Tensor<'g, (B, H, K, V)>>,
) -> (Tensor<'g, (B, H, T, V)>, Tensor<'g, (B, H, K, V)>) {
    let width = q.scope().size::<K>() as f32;
    let q = unit_rows(q) * (1.0 / width.sqrt());
    let k = unit_rows(k);
    let per_head = |p: Tensor<'g, (H,)>| p.reshape::<(H, Const<1>)>().broadcast::<(B, H, T)>();
    let rate = per_head(a_log).exp();
    let log_decay = -(rate * (a + per_head(dt_bias)).softplus());
    q.delta_rule(k, v, log_decay, b.sigmoid(), start)
}

/// Gated DeltaNet's output norm: `x` RMS-normalized over its last dim and scaled by
/// `weight`, then gated by `silu(gate)` (Qwen3-Next's `RMSNormGated`).
///
/// ```
/// use rlx::nn::gated_rms_norm;
/// use rlx::typed::{Const, Tensor, build};
/// let graph = build(|g| {
///     let x: Tensor<(Const<4>, Const<8>)> = g.input("x");
///     let gate: Tensor<(Const<4>, Const<8>)> = g.input("gate");
///     let weight: Tensor<(Const<8>,)> = g.param("norm.weight");
///     g.output("y", gated_rms_norm(x, gate, weight, 1e-6));
/// })?;
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[track_caller]
pub fn gated_rms_norm<'g, S, N: Dim>(
    x: Tensor<'g, S>,
    gate: Tensor<'g, S>,
    weight: Tensor<'g, (N,)>,
    eps: f64,
) -> Tensor<'g, S>
where
    S: crate::typed::LastDim<N>,
{
    x.rms_norm(weight, eps) * gate.silu()
}

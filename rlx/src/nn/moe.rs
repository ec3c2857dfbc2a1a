//! Mixture-of-experts layers: a router sends each token to its `Sel` best experts, each
//! expert runs on the tokens routed to it alone ([`Experts`], through
//! [`GatherMatMul`](crate::ir::GatherMatMul)), their outputs are mixed by the router's
//! weights, and a load-balancing loss keeps training from collapsing the routing onto a
//! few experts. Tokens are `(B, Q)`: sequences of a batch and positions in them.

use crate::Params;
use crate::typed::{Axis, Const, Dim, Dyn, Float, Tensor};

/// `Ex` stacked projections from `I` to `O`: `weight` is `[Ex, O, I]`, each expert stored
/// `[out, in]` as checkpoints keep them (GGUF's `ffn_gate_exps`, transformers'
/// `experts.gate_up_proj` halves).
///
/// ```
/// use rlx::nn::Experts;
/// use rlx::typed::{Const, Tensor, build};
/// rlx::dims!(Batch, Seq);
/// let graph = build(|g| {
///     let up: Experts<Const<4>, Const<8>, Const<16>> = g.params();
///     let x: Tensor<(Batch, Seq, Const<8>)> = g.input("x");
///     let routes: Tensor<(Batch, Seq, Const<2>), i64> = g.input("routes");
///     g.output("h", up.forward(x, routes));
/// })?;
/// assert_eq!(graph.params().count(), 1);
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[derive(Params)]
pub struct Experts<'g, Ex: Dim, I: Dim, O: Dim, E: Float = f32> {
    /// `[Ex, O, I]`.
    pub weight: Tensor<'g, (Ex, O, I), E>,
}

impl<'g, Ex: Dim, I: Dim, O: Dim, E: Float> Experts<'g, Ex, I, O, E> {
    /// Each token of `x` through each of the experts `routes` picks for it.
    #[track_caller]
    pub fn forward<B: Dim, Q: Dim, Sel: Dim>(
        &self,
        x: Tensor<'g, (B, Q, I), E>,
        routes: Tensor<'g, (B, Q, Sel), i64>,
    ) -> Tensor<'g, (B, Q, Sel, O), E> {
        x.gather_project_t(self.weight, routes)
    }

    /// Each row of `x` (one per token and route) through the expert of its route.
    #[track_caller]
    pub fn forward_pairs<B: Dim, Q: Dim, Sel: Dim>(
        &self,
        x: Tensor<'g, (B, Q, Sel, I), E>,
        routes: Tensor<'g, (B, Q, Sel), i64>,
    ) -> Tensor<'g, (B, Q, Sel, O), E> {
        x.gather_project_pairs_t(self.weight, routes)
    }
}

/// Where a router sends each token: its `Sel` experts, most probable first, and the
/// weight of each in the token's output.
pub struct Routes<'g, B: Dim, Q: Dim, Sel: Dim, E: Float = f32> {
    /// Expert indices.
    pub experts: Tensor<'g, (B, Q, Sel), i64>,
    /// Mixing weights.
    pub weights: Tensor<'g, (B, Q, Sel), E>,
}

/// Routes each token to the `Sel` experts of highest probability under the softmax of
/// the router's `logits` (`Ex` per token); their weights are those probabilities, divided
/// by their sum when `normalize` (Mixtral, Qwen3-MoE; Qwen2-MoE keeps them as they are).
/// Gradients reach the router through the weights.
///
/// ```
/// use rlx::nn::{combine_experts, route};
/// use rlx::typed::{Const, Tensor, build};
/// rlx::dims!(Batch, Seq);
/// let graph = build(|g| {
///     let logits: Tensor<(Batch, Seq, Const<8>)> = g.input("logits");
///     let outputs: Tensor<(Batch, Seq, Const<2>, Const<16>)> = g.input("outputs");
///     let routes = route::<_, _, _, Const<2>, _>(logits, true);
///     g.output("mixed", combine_experts(outputs, routes.weights));
/// })?;
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[track_caller]
pub fn route<'g, B: Dim, Q: Dim, Ex: Dim, Sel: Dim, E: Float>(
    logits: Tensor<'g, (B, Q, Ex), E>,
    normalize: bool,
) -> Routes<'g, B, Q, Sel, E> {
    let probs = logits.softmax::<2>();
    let experts = probs.topk_indices::<2, Sel>();
    let weights = probs.topk::<2, Sel>();
    let weights = if normalize {
        weights / weights.sum_keepdim::<2>().broadcast::<(B, Q, Sel)>()
    } else {
        weights
    };
    Routes { experts, weights }
}

/// The experts' outputs of each token (`(B, Q, Sel, H)`) mixed by their `weights`.
#[track_caller]
pub fn combine_experts<'g, B: Dim, Q: Dim, Sel: Dim, H: Dim, E: Float>(
    outputs: Tensor<'g, (B, Q, Sel, H), E>,
    weights: Tensor<'g, (B, Q, Sel), E>,
) -> Tensor<'g, (B, Q, H), E> {
    weights
        .reshape::<(B, Q, Const<1>, Sel)>()
        .matmul(outputs)
        .reshape::<(B, Q, H)>()
}

/// The Switch Transformer's load-balancing loss, as transformers computes it for Mixtral
/// and Qwen-MoE: `Ex · Σ_e f_e · P_e`, with `f_e` the routes per token that chose expert
/// `e` (averaged over tokens) and `P_e` the router's mean probability of `e`. It is 1
/// when routing is uniform and grows as it concentrates; only `P` carries gradient.
///
/// ```
/// use rlx::nn::{load_balancing_loss, route};
/// use rlx::typed::{Const, Tensor, build};
/// rlx::dims!(Batch, Seq);
/// let graph = build(|g| {
///     let logits: Tensor<(Batch, Seq, Const<8>)> = g.input("logits");
///     let routes = route::<_, _, _, Const<2>, _>(logits, false);
///     g.output("balance", load_balancing_loss(logits, routes.experts));
/// })?;
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[track_caller]
pub fn load_balancing_loss<'g, B: Dim, Q: Dim, Ex: Dim, Sel: Dim>(
    logits: Tensor<'g, (B, Q, Ex), f32>,
    experts: Tensor<'g, (B, Q, Sel), i64>,
) -> Tensor<'g, (), f32> {
    let g = logits.scope();
    let probs = logits.softmax::<2>().reshape::<(Dyn, Ex)>();
    let tokens = probs.sum::<1>().reshape::<(Dyn,)>();
    let mean_probs = probs.mean::<0>();
    // A one per route (every index equals itself), a constant to the gradient.
    let ones = experts
        .eq(experts)
        .cast::<f32>()
        .detach()
        .reshape::<(Dyn,)>();
    let routed =
        g.full::<(Ex,), f32>(0.0)
            .scatter_add(Axis::<0>, experts.reshape::<(Dyn,)>(), ones);
    // Σ_t 1 over tokens: the softmax rows each sum to one.
    let count = tokens.sum::<0>().detach();
    let experts_count = g.full::<(Ex,), f32>(1.0).sum::<0>();
    (routed * mean_probs).sum::<0>() * experts_count / count
}

//! The loss a decoder is fine-tuned on: next-token cross-entropy over the labelled
//! positions of a batch of token sequences.

use super::{
    Batch, Causal, ExpertCount, ExpertsPerToken, LlamaConfig, LlamaParams, Routing, Seq, Vocab,
    blocks, embed, logits,
};
use crate::nn::load_balancing_loss;
use crate::typed::{Axis, Dyn, Scope, Tensor};

/// The mean cross-entropy of the next token over a batch: `input_ids` `(Batch, Seq)` run
/// through the decoder as [`llama`](super::llama) does (positions from 0, causal), and
/// `labels[b, t]` is the token expected after position `t` of row `b`, or -100 (any id
/// outside the vocabulary) where nothing is expected — the prompt, and padding. As
/// transformers' loss with labels already shifted by one position, and PyTorch's
/// `ignore_index`: the mean is over the labelled positions alone. A mixture of experts
/// with a [`balance_loss_weight`](super::Mixture::balance_loss_weight) adds that much of
/// the load-balancing loss ([`crate::nn::load_balancing_loss`]).
///
/// With [`LoraConfig::dropout`](super::LoraConfig::dropout) above 0, each adapter's input
/// is dropped out (PEFT's `lora_dropout`) and the graph takes one more input,
/// `dropout_seed` (an `i64` scalar), which draws the masks: a new value each step.
///
/// ```
/// use rlx::models::llama::{LlamaConfig, LlamaLoss, LoraConfig, LoraTarget};
/// let mut config = LlamaConfig::new(64, 2, 4, 2, 128, 100);
/// config.lora = Some(LoraConfig::new(4, 8.0, &LoraTarget::ALL));
/// let graph = LlamaLoss::build(&config)?;
/// assert_eq!(graph.outputs()[0].name, "loss");
/// assert!(graph.param("blk.1.ffn_down.lora_b").is_some());
/// # Ok::<(), rlx::typed::BuildErrors>(())
/// ```
#[crate::model(outputs(loss))]
pub fn llama_loss<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &LlamaConfig,
    p: &LlamaParams<'g>,
    input_ids: Tensor<'g, (Batch, Seq), i64>,
    labels: Tensor<'g, (Batch, Seq), i64>,
) -> Tensor<'g, ()> {
    if let Some(lora) = cfg.lora.as_ref().filter(|l| l.dropout > 0.0) {
        let seed: Tensor<'g, (), i64> = g.input("dropout_seed");
        g.drop_adapter_inputs(lora.dropout, seed);
    }
    let x = embed(cfg, p, input_ids);
    let mut routings = Vec::new();
    let x = blocks(cfg, p, x, &mut Causal(cfg.attention_scale), &mut routings);
    let logits: Tensor<'g, (Dyn, Vocab)> = logits(cfg, p, x).reshape();
    let labels: Tensor<'g, (Dyn,), i64> = labels.reshape();
    let loss = logits.masked_cross_entropy(labels);
    match cfg.mixture.as_ref().filter(|m| m.balance_loss_weight > 0.0) {
        Some(m) => loss + balance_loss(g, routings) * m.balance_loss_weight as f32,
        None => loss,
    }
}

/// The load-balancing loss over every mixture block's routing at once (the blocks' tokens
/// side by side, as transformers concatenates them).
fn balance_loss<'g>(g: &'g Scope<'g>, layers: Vec<Routing<'g, Batch>>) -> Tensor<'g, ()> {
    type Joined<'g, E, D> = Tensor<'g, (Batch, Dyn, D), E>;
    let mut joined: Option<(
        Joined<'g, f32, ExpertCount>,
        Joined<'g, i64, ExpertsPerToken>,
    )> = None;
    for layer in layers {
        joined = Some(match joined {
            None => (layer.logits.reshape(), layer.experts.reshape()),
            Some((logits, experts)) => (
                logits.concat::<1, _, Dyn>(Axis::<1>, layer.logits),
                experts.concat::<1, _, Dyn>(Axis::<1>, layer.experts),
            ),
        });
    }
    match joined {
        Some((logits, experts)) => load_balancing_loss(logits, experts),
        // No blocks: nothing to balance.
        None => g.full(0.0),
    }
}

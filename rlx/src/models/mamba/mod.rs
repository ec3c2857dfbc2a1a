//! Mamba (Mamba-1) decoders: token embeddings, then blocks of RMSNorm → mixer → residual,
//! a final RMSNorm and the output projection. The mixer projects each token into an inner
//! stream and a gate, runs the stream through a causal depthwise convolution and SiLU, and
//! then through the selective scan ([`selective_scan`]): a
//! linear recurrence over a state of `state_size` features per inner channel whose decay
//! and input depend on the token. The output is read from the state, gated and projected
//! back.
//!
//! Generation keeps, per block, the convolution's last `conv_kernel − 1` inputs and the
//! scan's state ([`mamba_step`]): a token costs the same at any context length.
//!
//! Param names are the Hugging Face checkpoint's (`backbone.layers.0.mixer.in_proj.weight`),
//! so `model.safetensors` loads as it is.
//!
//! ```
//! use rlx::models::mamba::{Mamba, MambaConfig};
//! let config = MambaConfig::from_hf_json(
//!     r#"{"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}"#,
//! )?;
//! let manifest = Mamba::manifest(&config)?;
//! let a = manifest.get("backbone.layers.1.mixer.A_log").unwrap();
//! assert_eq!(a.file_shape(), Some(vec![128, 16]));
//! assert!(manifest.get("lm_head.weight").is_none()); // tied to the embeddings
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod decoder;

pub use config::{MAX_CONV_KERNEL, MAX_LAYERS, MAX_WIDTH, MambaConfig, MambaConfigError};
pub use decoder::{MambaDecoder, MambaLoadError, load_mamba_checkpoint};

use crate::Params;
use crate::nn::{Bias, Projection, RmsNorm, TokenEmbedding, selective_scan};
use crate::typed::{Axis, Const, Dim, Dyn, Scope, Sizes, State, Tensor};

crate::dims!(
    /// Sequences in a batch.
    Batch,
    /// Tokens per sequence.
    Seq
);
crate::config_dims!(
    /// Width of the residual stream.
    Hidden,
    /// Width of the mixer's inner stream.
    Inner,
    /// The inner stream and the gate, as the input projection makes them.
    InnerAndGate,
    /// Features of the recurrent state per inner channel.
    StateSize,
    /// Taps of the causal convolution.
    ConvKernel,
    /// Inputs the convolution keeps between steps (`ConvKernel − 1`).
    ConvHistory,
    /// Rank of the step-size projection.
    TimeStepRank,
    /// The step sizes' low-rank input, then the scan's input and output projections.
    ScanParams,
    /// Token vocabulary.
    Vocab,
    /// Blocks.
    Layers
);

impl crate::model::Config for MambaConfig {
    fn sizes(&self) -> Sizes {
        Sizes::new()
            .with::<Hidden>(self.hidden_size)
            .with::<Inner>(self.intermediate_size)
            .with::<InnerAndGate>(self.intermediate_size.saturating_mul(2))
            .with::<StateSize>(self.state_size)
            .with::<ConvKernel>(self.conv_kernel)
            .with::<ConvHistory>(self.conv_kernel.saturating_sub(1))
            .with::<TimeStepRank>(self.time_step_rank)
            .with::<ScanParams>(
                self.time_step_rank
                    .saturating_add(self.state_size.saturating_mul(2)),
            )
            .with::<Vocab>(self.vocab_size)
            .with::<Layers>(self.num_layers)
            .with_flag("proj_bias", self.proj_bias)
            .with_flag("conv_bias", self.conv_bias)
            .with_flag("separate_output", !self.tied_output)
    }
}

/// `mixer.conv1d.*`: the depthwise causal convolution, PyTorch's `Conv1d` layout.
#[derive(Params)]
pub struct MambaConv<'g> {
    /// `[Inner, 1, ConvKernel]`: each channel's taps, oldest input first.
    pub weight: Tensor<'g, (Inner, Const<1>, ConvKernel)>,
    /// `[Inner]`.
    #[param(when = "conv_bias")]
    pub bias: Option<Tensor<'g, (Inner,)>>,
}

/// `backbone.layers.N.mixer.*`: the selective-scan mixer.
#[derive(Params)]
pub struct MambaMixer<'g> {
    /// Projects a token into the inner stream and the gate.
    pub in_proj: Projection<'g, Hidden, InnerAndGate>,
    /// Its bias (`use_bias`).
    #[param(rename = "in_proj", when = "proj_bias")]
    pub in_proj_bias: Option<Bias<'g, InnerAndGate>>,
    /// The causal convolution.
    pub conv1d: MambaConv<'g>,
    /// Projects the stream into the step sizes' low-rank input, `B` and `C`.
    pub x_proj: Projection<'g, Inner, ScanParams>,
    /// Step sizes from their low-rank input.
    pub dt_proj: Projection<'g, TimeStepRank, Inner>,
    /// Its bias.
    #[param(rename = "dt_proj")]
    pub dt_proj_bias: Bias<'g, Inner>,
    /// `log(−A)`: the state's decay rates, `[Inner, StateSize]`.
    #[param(rename = "A_log")]
    pub a_log: Tensor<'g, (Inner, StateSize)>,
    /// The skip connection's scale, `[Inner]`.
    #[param(rename = "D")]
    pub d: Tensor<'g, (Inner,)>,
    /// Projects the gated output back to the residual stream.
    pub out_proj: Projection<'g, Inner, Hidden>,
    /// Its bias (`use_bias`).
    #[param(rename = "out_proj", when = "proj_bias")]
    pub out_proj_bias: Option<Bias<'g, Hidden>>,
}

/// `backbone.layers.N.*`: one block.
#[derive(Params)]
pub struct MambaBlock<'g> {
    /// Norm before the mixer.
    pub norm: RmsNorm<'g, Hidden>,
    /// The mixer.
    pub mixer: MambaMixer<'g>,
}

/// `backbone.*`: embeddings, blocks, final norm.
#[derive(Params)]
pub struct MambaBackbone<'g> {
    /// Token vectors (also the output projection unless `lm_head` is present).
    pub embeddings: TokenEmbedding<'g, Vocab, Hidden>,
    /// The blocks.
    #[param(len = Layers)]
    pub layers: Vec<MambaBlock<'g>>,
    /// The final norm.
    pub norm_f: RmsNorm<'g, Hidden>,
}

/// Every weight of a Mamba decoder.
#[derive(Params)]
pub struct MambaParams<'g> {
    /// Embeddings, blocks and the final norm.
    pub backbone: MambaBackbone<'g>,
    /// The output projection, when it is not the embedding table.
    #[param(when = "separate_output")]
    pub lm_head: Option<Projection<'g, Hidden, Vocab>>,
}

/// What one block carries from one step to the next: the convolution's last inputs and
/// the scan's state. `None` for a whole sequence from the start.
struct Carried<'g, B: Dim> {
    history: Tensor<'g, (B, ConvHistory, Inner)>,
    state: Tensor<'g, (B, Inner, StateSize)>,
}

/// A block's carried values to start from, and `last`, the token after which its next
/// ones are taken.
type StartAt<'g, B> = Option<(Carried<'g, B>, Tensor<'g, (), i64>)>;

/// A mixer's output, and the carried values after `last` when it started from some.
type Mixed<'g, B> = (Tensor<'g, (B, Seq, Hidden)>, Option<Carried<'g, B>>);

/// One mixer over `x` (`B` sequences of `Seq` tokens), from `carried` if given; with it,
/// also the carried values after token `last`.
fn mixer<'g, B: Dim>(
    cfg: &MambaConfig,
    p: &MambaMixer<'g>,
    x: Tensor<'g, (B, Seq, Hidden)>,
    carried: StartAt<'g, B>,
) -> Mixed<'g, B> {
    let both = Bias::forward_optional(p.in_proj.forward(x), &p.in_proj_bias);
    let stream: Tensor<'g, (B, Seq, Inner)> = both.narrow::<2, Inner>(0);
    let gate: Tensor<'g, (B, Seq, Inner)> = both.narrow::<2, Inner>(cfg.intermediate_size);

    // The convolution reads the `ConvKernel − 1` inputs before each token: carried ones,
    // else zeros.
    let history = cfg.conv_kernel - 1;
    let window: Tensor<'g, (B, Dyn, Inner)> = match &carried {
        Some((c, _)) => c.history.concat(Axis::<1>, stream),
        None => stream.pad(Axis::<1>, history, 0, 0.0),
    };
    let taps: Tensor<'g, (Inner, ConvKernel)> = p.conv1d.weight.reshape();
    let tap = |k: usize| {
        let stop = (k < history).then(|| k as i64 - history as i64);
        let inputs: Tensor<'g, (B, Seq, Inner)> = window.slice(Axis::<1>, k as i64, stop, 1);
        let weight: Tensor<'g, (Inner,)> = taps.narrow::<1, Const<1>>(k).reshape();
        inputs * weight.broadcast::<(B, Seq, Inner)>()
    };
    // At least two taps (`MambaConfig::check`, which the graph's build runs).
    let mut conv = tap(0);
    for k in 1..cfg.conv_kernel {
        conv = conv + tap(k);
    }
    if let Some(bias) = p.conv1d.bias {
        conv = conv + bias.broadcast::<(B, Seq, Inner)>();
    }
    let u = conv.silu();

    let params = p.x_proj.forward(u);
    let rank = cfg.time_step_rank;
    let low: Tensor<'g, (B, Seq, TimeStepRank)> = params.narrow::<2, TimeStepRank>(0);
    let b: Tensor<'g, (B, Seq, StateSize)> = params.narrow::<2, StateSize>(rank);
    let c: Tensor<'g, (B, Seq, StateSize)> = params.narrow::<2, StateSize>(rank + cfg.state_size);
    let dt = p.dt_proj_bias.forward(p.dt_proj.forward(low)).softplus();
    let a = -p.a_log.exp();
    let start = carried.as_ref().map(|(c, _)| c.state);
    let (y, states) = selective_scan(u, dt, a, b, c, start);
    let y = y + u * p.d.broadcast::<(B, Seq, Inner)>();
    let out = Bias::forward_optional(p.out_proj.forward(y * gate.silu()), &p.out_proj_bias);

    let next = carried.map(|(_, last)| {
        let at: Tensor<'g, (B, Const<1>, Inner, StateSize)> = states.dynamic_slice(Axis::<1>, last);
        Carried {
            history: window.dynamic_slice(Axis::<1>, last + 1),
            state: at.reshape(),
        }
    });
    (out, next)
}

/// Where blocks find the values they carry between steps and leave the next ones.
trait Carry<'g, B: Dim> {
    /// The values block `layer` starts from, and the token its next ones are taken after;
    /// `None` for a sequence from its start with nothing kept.
    fn start(&self, layer: usize) -> StartAt<'g, B>;
    /// Keeps block `layer`'s values after this step.
    fn keep(&self, layer: usize, next: Carried<'g, B>);
}

/// Whole sequences from their start, nothing kept.
struct Fresh;

impl<'g, B: Dim> Carry<'g, B> for Fresh {
    fn start(&self, _: usize) -> StartAt<'g, B> {
        None
    }

    fn keep(&self, _: usize, _: Carried<'g, B>) {}
}

/// One sequence's values in the states of a step's context (`layers.N.conv_state`,
/// `layers.N.ssm_state`), scaled by `going_on` (0 at a sequence's start), taken after
/// token `last`.
struct InStates<'g> {
    states: Vec<(ConvState<'g>, ScanState<'g>)>,
    going_on: Tensor<'g, (), f32>,
    last: Tensor<'g, (), i64>,
}

impl<'g> Carry<'g, Const<1>> for InStates<'g> {
    fn start(&self, layer: usize) -> StartAt<'g, Const<1>> {
        let (history, state) = &self.states[layer];
        let carried = Carried {
            history: history.read() * self.going_on.broadcast::<(Const<1>, ConvHistory, Inner)>(),
            state: state.read() * self.going_on.broadcast::<(Const<1>, Inner, StateSize)>(),
        };
        Some((carried, self.last))
    }

    fn keep(&self, layer: usize, next: Carried<'g, Const<1>>) {
        let (history, state) = &self.states[layer];
        history.write(next.history);
        state.write(next.state);
    }
}

/// Every block over `x`, starting from and keeping what `carry` holds.
fn blocks<'g, B: Dim>(
    cfg: &MambaConfig,
    p: &MambaParams<'g>,
    mut x: Tensor<'g, (B, Seq, Hidden)>,
    carry: &impl Carry<'g, B>,
) -> Tensor<'g, (B, Seq, Hidden)> {
    for (i, block) in p.backbone.layers.iter().enumerate() {
        let h = block.norm.forward(x, cfg.eps);
        let (out, next) = mixer(cfg, &block.mixer, h, carry.start(i));
        if let Some(next) = next {
            carry.keep(i, next);
        }
        // Each block's output is what a training step that recomputes activations keeps.
        x = (x + out).checkpoint();
    }
    x
}

/// Whether `cfg` is one this code builds; if not, the build fails with its reason (a
/// config made by hand is held to what `MambaConfig::from_hf_json` checks).
fn buildable(g: &Scope<'_>, cfg: &MambaConfig) -> bool {
    match cfg.check() {
        Ok(()) => true,
        Err(e) => {
            g.reject("mamba", None, e.to_string());
            false
        }
    }
}

/// The final norm and the output projection.
fn logits<'g, B: Dim, Q: Dim>(
    cfg: &MambaConfig,
    p: &MambaParams<'g>,
    x: Tensor<'g, (B, Q, Hidden)>,
) -> Tensor<'g, (B, Q, Vocab)> {
    let x = p.backbone.norm_f.forward(x, cfg.eps);
    match &p.lm_head {
        Some(head) => head.forward(x),
        None => p.backbone.embeddings.project_out(x),
    }
}

/// The decoder over a batch of token sequences from an empty state: the logits of the
/// next token at every position.
#[crate::model(outputs(logits))]
pub fn mamba<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &MambaConfig,
    p: &MambaParams<'g>,
    input_ids: Tensor<'g, (Batch, Seq), i64>,
) -> Tensor<'g, (Batch, Seq, Vocab)> {
    if !buildable(g, cfg) {
        return Tensor::from_id(g, None);
    }
    let x = p.backbone.embeddings.forward(input_ids);
    let x = blocks(cfg, p, x, &Fresh);
    logits(cfg, p, x)
}

/// The mean cross-entropy of the next token over a batch, as
/// [`llama_loss`](crate::models::llama::llama_loss) takes it: `input_ids` `(Batch, Seq)`
/// run through the decoder as [`mamba`] does, and `labels[b, t]` the token expected after
/// position `t` of row `b`, or -100 (any id outside the vocabulary) where nothing is
/// expected. What a Mamba model is trained or fine-tuned on with
/// [`Trainer`](crate::train::Trainer).
///
/// ```
/// use rlx::models::mamba::{MambaConfig, MambaLoss};
/// let config = MambaConfig::from_hf_json(
///     r#"{"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}"#,
/// )?;
/// let graph = MambaLoss::build(&config)?;
/// assert_eq!(graph.outputs()[0].name, "loss");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[crate::model(outputs(loss))]
pub fn mamba_loss<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &MambaConfig,
    p: &MambaParams<'g>,
    input_ids: Tensor<'g, (Batch, Seq), i64>,
    labels: Tensor<'g, (Batch, Seq), i64>,
) -> Tensor<'g, ()> {
    if !buildable(g, cfg) {
        return Tensor::from_id(g, None);
    }
    let x = p.backbone.embeddings.forward(input_ids);
    let x = blocks(cfg, p, x, &Fresh);
    let logits: Tensor<'g, (Dyn, Vocab)> = logits(cfg, p, x).reshape();
    let labels: Tensor<'g, (Dyn,), i64> = labels.reshape();
    logits.masked_cross_entropy(labels)
}

/// One block's convolution inputs carried between steps, `layers.N.conv_state`.
pub type ConvState<'g> = State<'g, (Const<1>, ConvHistory, Inner)>;

/// One block's scan state carried between steps, `layers.N.ssm_state`.
pub type ScanState<'g> = State<'g, (Const<1>, Inner, StateSize)>;

/// One step of generation for one sequence: the `Seq` new tokens `input_ids` (the prompt
/// or a chunk of it, or one sampled token) continue the sequence from the blocks' carried
/// values (states of the [`Context`](crate::backend::Context) the step runs in), and the
/// logits of the token after `input_ids[last]` come out. The carried values are taken
/// after token `last`, so tokens after it (padding) leave no trace; `pos`, the position of
/// the first new token, starts the sequence afresh when it is 0. A step costs the same at
/// any position: nothing grows with the context.
#[crate::model(outputs(logits), states)]
pub fn mamba_step<'g>(
    g: &'g Scope<'g>,
    #[config] cfg: &MambaConfig,
    p: &MambaParams<'g>,
    input_ids: Tensor<'g, (Const<1>, Seq), i64>,
    pos: Tensor<'g, (), i64>,
    last: Tensor<'g, (), i64>,
) -> Tensor<'g, (Const<1>, Const<1>, Vocab)> {
    if !buildable(g, cfg) {
        return Tensor::from_id(g, None);
    }
    let carry = InStates {
        states: (0..cfg.num_layers)
            .map(|layer| {
                (
                    g.state(&format!("layers.{layer}.conv_state")),
                    g.state(&format!("layers.{layer}.ssm_state")),
                )
            })
            .collect(),
        // 1 while the sequence goes on, 0 at its start.
        going_on: g.full::<(), i64>(0).lt(pos).cast::<f32>(),
        last,
    };
    let x = p.backbone.embeddings.forward(input_ids);
    let x = blocks(cfg, p, x, &carry);
    let x: Tensor<'g, (Const<1>, Const<1>, Hidden)> = x.dynamic_slice(Axis::<1>, last);
    logits(cfg, p, x)
}

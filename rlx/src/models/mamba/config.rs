//! A Mamba model's sizes, from a Hugging Face `config.json`.

use serde_json::Value;

/// The most blocks a config may ask for (a bound against hostile files).
pub const MAX_LAYERS: usize = 4096;

/// The most features a state or the inner stream may have (a bound against hostile files).
pub const MAX_WIDTH: usize = 1 << 20;

/// The most taps the convolution may have (each tap is a term of the graph).
pub const MAX_CONV_KERNEL: usize = 64;

/// The sizes and options of a Mamba (Mamba-1) decoder: token embeddings, blocks of
/// RMSNorm → selective-scan mixer → residual, a final RMSNorm and the output projection.
///
/// ```
/// use rlx::models::mamba::MambaConfig;
/// let config = MambaConfig::from_hf_json(
///     r#"{"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
///         "vocab_size": 50280, "state_size": 16, "expand": 2, "conv_kernel": 4}"#,
/// )?;
/// assert_eq!((config.intermediate_size, config.time_step_rank), (1536, 48));
/// # Ok::<(), rlx::models::mamba::MambaConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct MambaConfig {
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the mixer's inner stream (`expand × hidden_size`).
    pub intermediate_size: usize,
    /// Features of the recurrent state per inner channel (`N`).
    pub state_size: usize,
    /// Taps of the causal depthwise convolution before the scan.
    pub conv_kernel: usize,
    /// Rank of the step-size projection.
    pub time_step_rank: usize,
    /// Blocks.
    pub num_layers: usize,
    /// Token vocabulary.
    pub vocab_size: usize,
    /// Added to the mean square in every RMSNorm.
    pub eps: f64,
    /// The output projection is the embedding table.
    pub tied_output: bool,
    /// The input and output projections have biases (`use_bias`).
    pub proj_bias: bool,
    /// The convolution has a bias (`use_conv_bias`).
    pub conv_bias: bool,
}

/// Why a config does not describe a Mamba model RLX builds.
#[derive(Debug, thiserror::Error)]
pub enum MambaConfigError {
    /// A key the model needs is absent.
    #[error("the config has no {key}")]
    Missing {
        /// The key.
        key: String,
    },
    /// A key's value does not describe a model RLX can build.
    #[error("{key}: {reason}")]
    Invalid {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(key: &str, reason: impl Into<String>) -> MambaConfigError {
    MambaConfigError::Invalid {
        key: key.to_string(),
        reason: reason.into(),
    }
}

impl MambaConfig {
    /// The config of a Hugging Face `config.json` of `model_type` `"mamba"`, with
    /// transformers' defaults for the keys it leaves out (`expand` 2, `state_size` 16,
    /// `conv_kernel` 4, `time_step_rank` `⌈hidden / 16⌉`, tied output, a conv bias and
    /// no projection biases). A config this code cannot build (another activation, a
    /// size of 0 or beyond the bounds) is an error naming the key.
    pub fn from_hf_json(text: &str) -> Result<MambaConfig, MambaConfigError> {
        let json: Value = serde_json::from_str(text)
            .map_err(|e| invalid("config.json", format!("not JSON: {e}")))?;
        match json.get("model_type").and_then(Value::as_str) {
            Some("mamba") => {}
            Some(other) => {
                return Err(invalid(
                    "model_type",
                    format!("{other:?} is not a Mamba model RLX builds"),
                ));
            }
            None => {
                return Err(MambaConfigError::Missing {
                    key: "model_type".into(),
                });
            }
        }
        let get = |key: &str| json.get(key).filter(|v| !v.is_null());
        let size = |key: &str, default: Option<usize>| -> Result<usize, MambaConfigError> {
            match get(key) {
                None => default.ok_or_else(|| MambaConfigError::Missing { key: key.into() }),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| (1..=MAX_WIDTH).contains(n))
                    .ok_or_else(|| {
                        invalid(key, format!("{v} is not an integer from 1 to {MAX_WIDTH}"))
                    }),
            }
        };
        let flag = |key: &str, default: bool| -> Result<bool, MambaConfigError> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| invalid(key, format!("{v} is not true or false"))),
            }
        };
        if let Some(act) = get("hidden_act")
            && act.as_str() != Some("silu")
        {
            return Err(invalid("hidden_act", format!("{act} is not \"silu\"")));
        }
        let hidden_size = size("hidden_size", None)?;
        let intermediate_size = match get("intermediate_size") {
            Some(_) => size("intermediate_size", None)?,
            None => hidden_size * size("expand", Some(2))?,
        };
        let time_step_rank = match get("time_step_rank") {
            Some(v) if v.as_str() == Some("auto") => hidden_size.div_ceil(16),
            Some(_) => size("time_step_rank", None)?,
            None => hidden_size.div_ceil(16),
        };
        let eps = match get("layer_norm_epsilon") {
            None => 1e-5,
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| {
                    invalid(
                        "layer_norm_epsilon",
                        format!("{v} is not a positive number"),
                    )
                })?,
        };
        let config = MambaConfig {
            hidden_size,
            intermediate_size,
            state_size: size("state_size", Some(16))?,
            conv_kernel: size("conv_kernel", Some(4))?,
            time_step_rank,
            num_layers: size("num_hidden_layers", None)?,
            vocab_size: size("vocab_size", None)?,
            eps,
            tied_output: flag("tie_word_embeddings", true)?,
            proj_bias: flag("use_bias", false)?,
            conv_bias: flag("use_conv_bias", true)?,
        };
        config.check()?;
        Ok(config)
    }

    /// Whether the sizes are within what this code builds.
    pub fn check(&self) -> Result<(), MambaConfigError> {
        if self.num_layers == 0 || self.num_layers > MAX_LAYERS {
            return Err(invalid(
                "num_hidden_layers",
                format!("{} blocks: 1 to {MAX_LAYERS} are built", self.num_layers),
            ));
        }
        for (key, value) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("state_size", self.state_size),
            ("time_step_rank", self.time_step_rank),
            ("vocab_size", self.vocab_size),
        ] {
            if value == 0 || value > MAX_WIDTH {
                return Err(invalid(key, format!("{value}: 1 to {MAX_WIDTH} are built")));
            }
        }
        if !(2..=MAX_CONV_KERNEL).contains(&self.conv_kernel) {
            return Err(invalid(
                "conv_kernel",
                format!(
                    "{} taps: 2 to {MAX_CONV_KERNEL} are built",
                    self.conv_kernel
                ),
            ));
        }
        Ok(())
    }
}

//! How the next token is chosen: the settings, the seeded draws, and the graph that
//! applies the penalties and [`SampleToken`](crate::ir::SampleToken) on the backend.

use crate::backend::{Backend, Executable, RunError};
use crate::builder::{BuildError, GraphBuilder};
use crate::ir::{
    ArgReduce, ArgReduceOp, BinaryOp, CompareOp, DType, Dim, Graph, NodeId, Op, SampleToken,
};
use crate::tensor::{HostTensor, TensorRef};

use super::GenerateError;

/// How the next token is chosen. The defaults draw from the model's distribution as it is
/// (temperature 1, no filter, no penalty); [`SamplingParams::greedy`] takes the most likely
/// token. Filters apply in the order of [`SampleToken`](crate::ir::SampleToken), after the
/// penalties.
///
/// ```
/// use rlx::generate::SamplingParams;
/// let nucleus = SamplingParams { temperature: 0.7, top_p: 0.9, seed: 7, ..SamplingParams::default() };
/// assert!(nucleus.check().is_ok());
/// assert!(SamplingParams { top_p: 1.5, ..nucleus }.check().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// Divides the logits; 0 takes the most likely token.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the shortest run of likeliest tokens holding this share of the mass; 1 keeps all.
    pub top_p: f32,
    /// Keep tokens at least this fraction as likely as the most likely one; 0 keeps all.
    pub min_p: f32,
    /// Divides the positive logits (multiplies the negative ones) of every token in the
    /// prompt or generated so far; 1 is off (as Hugging Face's `repetition_penalty`).
    pub repetition_penalty: f32,
    /// Subtracted from the logit of every token generated at least once (OpenAI's).
    pub presence_penalty: f32,
    /// Subtracted once per earlier occurrence from the logit of each generated token
    /// (OpenAI's).
    pub frequency_penalty: f32,
    /// Seeds the draws: the same seed, prompt and settings give the same tokens.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// The most likely token every time.
    pub fn greedy() -> SamplingParams {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// Whether every setting is in its range: finite, temperature at least 0, `top_p` in
    /// `(0, 1]`, `min_p` in `[0, 1]`, the repetition penalty positive.
    pub fn check(&self) -> Result<(), GenerateError> {
        let bad = |name: &'static str, reason: &str| {
            Err(GenerateError::Setting {
                name,
                reason: reason.into(),
            })
        };
        let finite = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repetition_penalty", self.repetition_penalty),
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ];
        if let Some((name, _)) = finite.iter().find(|(_, v)| !v.is_finite()) {
            return bad(name, "must be finite");
        }
        if self.temperature < 0.0 {
            return bad("temperature", "must be at least 0");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", "must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", "must be in [0, 1]");
        }
        if self.repetition_penalty <= 0.0 {
            return bad("repetition_penalty", "must be positive");
        }
        Ok(())
    }
}

/// The seeded source of the draws: SplitMix64, so a seed names every draw of a generation
/// on every platform and version.
#[derive(Clone, Debug)]
pub(crate) struct Draws(u64);

impl Draws {
    pub(crate) fn new(seed: u64) -> Draws {
        Draws(seed)
    }

    /// Uniform in `[0, 1)`, with the 24 bits a float32 holds.
    pub(crate) fn next_uniform(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// What the penalties need to know about a sequence: how often each token was generated,
/// and which tokens the prompt or the output hold.
#[derive(Clone, Debug)]
pub(crate) struct History {
    pub counts: Vec<f32>,
    pub seen: Vec<f32>,
}

impl History {
    pub(crate) fn new(vocab: usize, prompt: &[i64]) -> History {
        let mut seen = vec![0.0; vocab];
        for &t in prompt {
            seen[t as usize] = 1.0;
        }
        History {
            counts: vec![0.0; vocab],
            seen,
        }
    }

    pub(crate) fn push(&mut self, token: i64) {
        self.counts[token as usize] += 1.0;
        self.seen[token as usize] = 1.0;
    }
}

/// The compiled graphs that turn a row of logits, its history and its settings into the
/// next token, on the decoder's backend: with the penalties, and without them for settings
/// that leave them off (most), which then pass neither the history nor ten passes over the
/// vocabulary; and for greedy settings without penalties the argmax alone, which is what
/// [`SampleToken`] computes at temperature 0, without its three sorts of the vocabulary and
/// dozens of other nodes (on a GPU each node is a launch).
pub(crate) struct Sampler {
    penalized: Box<dyn Executable>,
    plain: Box<dyn Executable>,
    greedy: Box<dyn Executable>,
}

impl Sampler {
    pub(crate) fn compile<B: Backend<Executable: 'static>>(
        backend: &B,
    ) -> Result<Sampler, GenerateError> {
        let compile =
            |graph: Result<Graph, BuildError>| -> Result<Box<dyn Executable>, GenerateError> {
                let graph = graph.map_err(|e| GenerateError::Internal(e.to_string()))?;
                let executable = backend.compile(&graph).map_err(GenerateError::Compile)?;
                Ok(Box::new(executable))
            };
        Ok(Sampler {
            penalized: compile(sampler_graph(true))?,
            plain: compile(sampler_graph(false))?,
            greedy: compile(greedy_graph())?,
        })
    }

    /// The next token after `logits` (`[vocab]` float32).
    pub(crate) fn sample(
        &self,
        logits: &HostTensor,
        history: &History,
        params: &SamplingParams,
        uniform: f32,
    ) -> Result<i64, RunError> {
        let vocab = history.counts.len();
        let shape = [1, vocab];
        let logits = TensorRef::new(DType::F32, &shape, logits.data().bytes());
        let logits = logits.map_err(tensor_error)?;
        let penalized = params.repetition_penalty != 1.0
            || params.presence_penalty != 0.0
            || params.frequency_penalty != 0.0;
        if !penalized && params.temperature <= 0.0 {
            let out = self.greedy.run(&[("logits", logits)], &[])?;
            return first_token(&out);
        }
        // One value per row (one row), viewed in place: nothing allocated per token.
        let values = [
            params.repetition_penalty,
            params.presence_penalty,
            params.frequency_penalty,
            uniform,
            params.temperature,
            params.top_p,
            params.min_p,
        ];
        let names = [
            "repetition",
            "presence",
            "frequency",
            "uniform",
            "temperature",
            "top_p",
            "min_p",
        ];
        let top_k = [i64::try_from(params.top_k).unwrap_or(i64::MAX)];
        let row = |dtype, bytes| TensorRef {
            dtype,
            shape: &[1],
            bytes,
        };
        let mut inputs = vec![
            ("logits", logits),
            ("top_k", row(DType::I64, bytemuck::cast_slice(&top_k))),
        ];
        if penalized {
            let table = |values| TensorRef::new(DType::F32, &shape, bytemuck::cast_slice(values));
            inputs.extend([
                (
                    "output_counts",
                    table(&history.counts).map_err(tensor_error)?,
                ),
                ("seen", table(&history.seen).map_err(tensor_error)?),
            ]);
        }
        // The penalties are the first three settings.
        let first = if penalized { 0 } else { 3 };
        inputs.extend(
            names[first..]
                .iter()
                .zip(&values[first..])
                .map(|(name, v)| (*name, row(DType::F32, bytemuck::bytes_of(v)))),
        );
        let executable = if penalized {
            &self.penalized
        } else {
            &self.plain
        };
        let out = executable.run(&inputs, &[])?;
        first_token(&out)
    }
}

/// The token a sampler graph's one output holds.
fn first_token(out: &[HostTensor]) -> Result<i64, RunError> {
    out.first()
        .and_then(|t| t.as_slice::<i64>().ok())
        .and_then(|t| t.first().copied())
        .ok_or(RunError::OutputCount {
            expected: 1,
            got: out.len(),
        })
}

fn tensor_error(e: crate::tensor::TensorError) -> RunError {
    RunError::Custom {
        name: "sampler".into(),
        message: e.to_string(),
    }
}

/// `token = sample_token(penalized(logits), settings)` over `rows` rows of `vocab`, both
/// runtime dims (without `penalties`, of the logits as they are). Penalties: a seen token's
/// logit is divided by the repetition penalty when positive and multiplied by it otherwise;
/// then presence (once if generated) and frequency (per generation) are subtracted.
fn sampler_graph(penalties: bool) -> Result<Graph, BuildError> {
    let mut b = GraphBuilder::new();
    let (rows, vocab) = (Dim::sym("rows"), Dim::sym("vocab"));
    let table = [rows.clone(), vocab];
    let mut logits = b.input("logits", DType::F32, table.clone())?;
    let setting = |b: &mut GraphBuilder, name: &str, dtype| -> Result<NodeId, BuildError> {
        b.input(name, dtype, [rows.clone()])
    };
    if penalties {
        logits = penalize(&mut b, logits, &table, &setting)?;
    }
    let uniform = setting(&mut b, "uniform", DType::F32)?;
    let temperature = setting(&mut b, "temperature", DType::F32)?;
    let top_k = setting(&mut b, "top_k", DType::I64)?;
    let top_p = setting(&mut b, "top_p", DType::F32)?;
    let min_p = setting(&mut b, "min_p", DType::F32)?;
    let token = b.op(
        Op::SampleToken(SampleToken),
        &[logits, uniform, temperature, top_k, top_p, min_p],
    )?;
    b.output("token", token)?;
    b.finish()
}

/// `token = argmax(logits)` over `rows` rows of `vocab` (the first of equal maxima): the
/// draw of [`SampleToken`] at temperature 0.
fn greedy_graph() -> Result<Graph, BuildError> {
    let mut b = GraphBuilder::new();
    let logits = b.input("logits", DType::F32, [Dim::sym("rows"), Dim::sym("vocab")])?;
    let token = b.op(
        Op::ArgReduce(ArgReduce {
            op: ArgReduceOp::ArgMax,
            axis: 1,
            keep_dims: false,
        }),
        &[logits],
    )?;
    b.output("token", token)?;
    b.finish()
}

/// `logits` with the penalties applied, from the inputs `output_counts` and `seen` (shaped
/// `table`) and the per-row `repetition`, `presence` and `frequency`.
fn penalize(
    b: &mut GraphBuilder,
    logits: NodeId,
    table: &[Dim; 2],
    setting: &dyn Fn(&mut GraphBuilder, &str, DType) -> Result<NodeId, BuildError>,
) -> Result<NodeId, BuildError> {
    let counts = b.input("output_counts", DType::F32, table.clone())?;
    let seen = b.input("seen", DType::F32, table.clone())?;
    let repetition = setting(b, "repetition", DType::F32)?;
    let presence = setting(b, "presence", DType::F32)?;
    let frequency = setting(b, "frequency", DType::F32)?;
    let rows = table[0].clone();
    let column = |b: &mut GraphBuilder, t: NodeId| b.reshape(t, [rows.clone(), Dim::Static(1)]);
    let zero = b.scalar(0.0, DType::F32);
    let repetition = column(b, repetition)?;
    let positive = b.compare(CompareOp::Gt, logits, zero)?;
    let divided = b.binary(BinaryOp::Div, logits, repetition)?;
    let multiplied = b.mul(logits, repetition)?;
    let damped = b.select(positive, divided, multiplied)?;
    let was_seen = b.compare(CompareOp::Gt, seen, zero)?;
    let logits = b.select(was_seen, damped, logits)?;
    let generated = b.compare(CompareOp::Gt, counts, zero)?;
    let generated = b.cast(generated, DType::F32)?;
    let presence = column(b, presence)?;
    let presence = b.mul(generated, presence)?;
    let frequency = column(b, frequency)?;
    let frequency = b.mul(counts, frequency)?;
    let logits = b.binary(BinaryOp::Sub, logits, presence)?;
    b.binary(BinaryOp::Sub, logits, frequency)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits on a coarse grid, so that most rows hold the largest value more than once.
    fn tied_logits(seed: u64, vocab: usize) -> Vec<f32> {
        let mut draws = Draws::new(seed);
        (0..vocab)
            .map(|_| (draws.next_uniform() * 6.0).floor() - 3.0)
            .collect()
    }

    /// The greedy shortcut takes what the whole sampler takes at temperature 0 (a harmless
    /// repetition penalty on a token below the top sends that draw through the full graph),
    /// and both take the first of equal maxima.
    fn greedy_matches_the_sampler<B: Backend<Executable: 'static>>(backend: &B) {
        let sampler = Sampler::compile(backend).unwrap();
        let vocab = 300;
        for seed in 0..12 {
            let logits = tied_logits(seed, vocab);
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let first = logits.iter().position(|&l| l == max).unwrap() as i64;
            let low = logits.iter().position(|&l| l < max).unwrap() as i64;
            let history = History::new(vocab, &[low]);
            let tensor = HostTensor::from_vec(logits, [vocab]).unwrap();
            let greedy = SamplingParams::greedy();
            let shortcut = sampler.sample(&tensor, &history, &greedy, 0.5).unwrap();
            let full_params = SamplingParams {
                repetition_penalty: 1.5,
                ..greedy
            };
            let full = sampler
                .sample(&tensor, &history, &full_params, 0.5)
                .unwrap();
            assert_eq!((shortcut, full), (first, first), "seed {seed}");
        }
    }

    #[test]
    fn greedy_shortcut_matches_the_sampler_on_the_cpu() {
        greedy_matches_the_sampler(&crate::cpu::CpuBackend::default());
    }

    #[cfg(feature = "mlx")]
    #[test]
    fn greedy_shortcut_matches_the_sampler_on_mlx() {
        greedy_matches_the_sampler(&crate::mlx::MlxBackend::default());
    }
}

//! Tutorial 10: teaching SmolLM2-135M-Instruct a task with LoRA adapters.
//!
//! ```text
//! cargo run --release --example 10_finetune_lora -- [--backend cpu|mlx] [--steps N]
//!     [--batch B] [--lr LR] [--rank R] [--alpha A] [--dropout P] [--qlora] [--recompute]
//!     [--eval N] [--seed S] [--out DIR] [--model FILE.gguf|DIR]
//! ```
//!
//! The task: reverse the order of a few words ("Reverse the order of these words: moon
//! tree river" → "river tree moon"), asked in the model's own chat format. The example
//! makes its data itself: lists of 3 to 5 words from a fixed vocabulary, a held-out set of
//! `--eval` lists (default 100) that never appear in training. It scores the model on the
//! held-out set by exact match of its greedy answer, before and after fine-tuning.
//!
//! Fine-tuning trains LoRA adapters of rank `--rank` (default 8, alpha `--alpha` 16, inputs
//! dropped out with probability `--dropout`, default 0, each step's masks drawn from its
//! step number) on every projection of every block; the base stays frozen (no gradient, no optimizer
//! state for it). With `--qlora` the base projections stay in the GGUF file's 4-bit blocks
//! (`Q4_1`) and the gradient flows through the quantized products to the adapters. The loss
//! is the next-token cross-entropy of the answer's tokens alone
//! ([`llama_loss`](rlx::models::llama::llama_loss)): the prompt's positions are labelled
//! -100. AdamW (lr `--lr`, default 1e-3), batches of `--batch` (default 8) conversations,
//! `--steps` steps (default 150). With `--recompute` the step keeps only each layer's
//! output from the forward pass and computes the rest again in the backward pass
//! ([`TrainConfig::recompute_activations`]): the same steps in less memory
//! (`lora_memory_bench` prints how much).
//!
//! Writes the adapter in Hugging Face PEFT's format (`adapter/`, which PEFT's
//! `PeftModel.from_pretrained` loads onto SmolLM2-135M-Instruct) and the loss curve
//! (`loss.svg`) to `--out` (default `target/finetune`). The last line on stdout is
//! `finetune backend=B steps=S before=A0 after=A1 tok_s=T`: the held-out exact-match
//! accuracy before and after, and training tokens (of the padded batches) per second.

use std::error::Error;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use rlx::backend::Backend;
use rlx::generate::{ChatMessage, ChatTemplate, GenerateOptions, Generator, SamplingParams};
use rlx::models::fetch::model_or_smollm2;
use rlx::models::llama::{LlamaConfig, LlamaFiles, LlamaLoss, LoraAdapter, LoraConfig, LoraTarget};
use rlx::tensor::HostTensor;
use rlx::tokenizer::Tokenizer;
use rlx::train::{Optimizer, TrainConfig, Trainer};
use rlx_testkit::report;
use rlx_testkit::rng::Rng;

const USAGE: &str = "usage: 10_finetune_lora [--backend cpu|mlx] [--steps N] [--batch B] \
    [--lr LR] [--rank R] [--alpha A] [--dropout P] [--qlora] [--recompute] [--eval N] [--seed S] [--out DIR] \
    [--model FILE.gguf|DIR]";

/// The words lists are made of: short, common, distinct.
const WORDS: [&str; 48] = [
    "apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "candle", "garden", "window",
    "silver", "forest", "rocket", "pepper", "castle", "button", "mirror", "planet", "orange",
    "bridge", "dragon", "pencil", "rabbit", "summer", "winter", "yellow", "purple", "coffee",
    "bottle", "island", "jacket", "ladder", "magnet", "needle", "pillow", "rubber", "saddle",
    "tunnel", "violin", "wallet", "zebra", "anchor", "basket", "cactus", "desert", "engine",
    "falcon", "guitar",
];

struct Args {
    backend: String,
    steps: usize,
    batch: usize,
    lr: f64,
    rank: usize,
    alpha: f64,
    dropout: f64,
    qlora: bool,
    recompute: bool,
    eval: usize,
    seed: u64,
    out: PathBuf,
    model: Option<PathBuf>,
}

fn parse_args() -> Result<Args, Box<dyn Error>> {
    let mut args = Args {
        backend: "cpu".into(),
        steps: 150,
        batch: 8,
        lr: 1e-3,
        rank: 8,
        alpha: 16.0,
        dropout: 0.0,
        qlora: false,
        recompute: false,
        eval: 100,
        seed: 2026,
        out: PathBuf::from("target/finetune"),
        model: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--backend" => args.backend = value()?,
            "--steps" => args.steps = value()?.parse()?,
            "--batch" => args.batch = value()?.parse()?,
            "--lr" => args.lr = value()?.parse()?,
            "--rank" => args.rank = value()?.parse()?,
            "--alpha" => args.alpha = value()?.parse()?,
            "--dropout" => args.dropout = value()?.parse()?,
            "--qlora" => args.qlora = true,
            "--recompute" => args.recompute = true,
            "--eval" => args.eval = value()?.parse()?,
            "--seed" => args.seed = value()?.parse()?,
            "--out" => args.out = value()?.into(),
            "--model" => args.model = Some(value()?.into()),
            _ => return Err(USAGE.into()),
        }
    }
    if args.batch == 0 || args.eval == 0 {
        return Err(format!("--batch and --eval must be at least 1; {USAGE}").into());
    }
    Ok(args)
}

/// One example of the task: the question and its answer.
struct Example {
    question: String,
    answer: String,
}

/// A list of 3 to 5 distinct words, and the question reversing it.
fn example(rng: &mut Rng) -> Example {
    let n = 3 + rng.below(3);
    let mut words: Vec<&str> = Vec::with_capacity(n);
    while words.len() < n {
        let word = WORDS[rng.below(WORDS.len())];
        if !words.contains(&word) {
            words.push(word);
        }
    }
    let question = format!("Reverse the order of these words: {}", words.join(" "));
    words.reverse();
    Example {
        question,
        answer: words.join(" "),
    }
}

/// A conversation's tokens: the prompt as the chat template renders it, then the answer
/// and the end of the turn.
struct Tokenized {
    prompt: Vec<i64>,
    answer: Vec<i64>,
}

/// What the model reads and how it is scored.
struct Task {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    end_of_turn: i64,
}

impl Task {
    fn tokenize(&self, example: &Example) -> Result<Tokenized, Box<dyn Error>> {
        let messages = [ChatMessage::new("user", &example.question)];
        let text = self.template.render(&messages, true)?;
        let ids = |text: &str| -> Result<Vec<i64>, Box<dyn Error>> {
            Ok(self
                .tokenizer
                .encode_plain(text)?
                .into_iter()
                .map(i64::from)
                .collect())
        };
        let mut answer = ids(&example.answer)?;
        answer.push(self.end_of_turn);
        Ok(Tokenized {
            prompt: ids(&text)?,
            answer,
        })
    }

    /// A training batch: each conversation padded to the longest (rounded up to 8, so few
    /// lengths occur), labelled with the next token over its answer and -100 elsewhere.
    fn batch(
        &self,
        examples: &[Example],
    ) -> Result<(HostTensor, HostTensor, usize), Box<dyn Error>> {
        let rows: Vec<Tokenized> = examples
            .iter()
            .map(|e| self.tokenize(e))
            .collect::<Result<_, _>>()?;
        let longest = rows
            .iter()
            .map(|r| r.prompt.len() + r.answer.len())
            .max()
            .unwrap_or(1);
        let width = longest.div_ceil(8) * 8;
        let mut ids = Vec::with_capacity(rows.len() * width);
        let mut labels = Vec::with_capacity(rows.len() * width);
        for row in &rows {
            let tokens: Vec<i64> = row.prompt.iter().chain(&row.answer).copied().collect();
            for t in 0..width {
                ids.push(tokens.get(t).copied().unwrap_or(self.end_of_turn));
                // Position t predicts token t + 1: labelled where that token is the answer's.
                let labelled = t + 1 >= row.prompt.len() && t + 1 < tokens.len();
                labels.push(if labelled { tokens[t + 1] } else { -100 });
            }
        }
        let shape = [rows.len(), width];
        Ok((
            HostTensor::from_vec(ids, shape)?,
            HostTensor::from_vec(labels, shape)?,
            rows.len() * width,
        ))
    }
}

/// The share of `examples` whose greedy answer is exactly the expected one.
fn accuracy(
    task: &Task,
    generator: &Generator,
    examples: &[Example],
) -> Result<f64, Box<dyn Error>> {
    let mut right = 0;
    for (i, example) in examples.iter().enumerate() {
        let tokenized = task.tokenize(example)?;
        let options = GenerateOptions {
            max_tokens: tokenized.answer.len() + 4,
            sampling: SamplingParams::greedy(),
            stop_tokens: task
                .tokenizer
                .stop_tokens()
                .iter()
                .map(|&t| i64::from(t))
                .collect(),
        };
        let tokens: Vec<u32> = generator
            .generate(&tokenized.prompt, options)?
            .map(|t| t.map(|t| t as u32))
            .collect::<Result<_, _>>()?;
        let said = task.tokenizer.decode_text(&tokens)?;
        if said.trim() == example.answer {
            right += 1;
        }
        if i == 0 {
            eprintln!("  {:?} -> {said:?}", example.question);
        }
    }
    Ok(right as f64 / examples.len() as f64)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    match args.backend.as_str() {
        "cpu" => finetune(&rlx::cpu::CpuBackend::default(), &args),
        #[cfg(feature = "mlx")]
        "mlx" => finetune(
            &rlx::mlx::MlxBackend::new(rlx::mlx::MlxMode::Compiled),
            &args,
        ),
        other => Err(format!("unknown or unavailable backend {other:?} (cpu, mlx)").into()),
    }
}

fn finetune<B: Backend<Executable: 'static>>(
    backend: &B,
    args: &Args,
) -> Result<(), Box<dyn Error>> {
    let path = model_or_smollm2(args.model.as_deref())?;
    eprintln!("loading {}", path.display());
    let files = LlamaFiles::open(&path)?;
    let tokenizer = files.tokenizer()?;
    let template = files.chat_template(&tokenizer)?;
    let end_of_turn = i64::from(
        *tokenizer
            .stop_tokens()
            .first()
            .ok_or("the model has no end-of-turn token")?,
    );
    let task = Task {
        tokenizer,
        template,
        end_of_turn,
    };

    // The model with room for adapters on every projection; with --qlora, its projections
    // kept in the file's blocks.
    let mut config: LlamaConfig = files.config()?;
    if args.qlora {
        let LlamaFiles::Gguf(file) = &files else {
            return Err("--qlora keeps a GGUF file's blocks: give a GGUF model".into());
        };
        config.keep_gguf_blocks(file);
    }
    let lora = LoraConfig::new(args.rank, args.alpha, &LoraTarget::ALL).with_dropout(args.dropout);
    config.lora = Some(lora.clone());

    // Held-out lists first; training draws others.
    let mut rng = Rng(args.seed);
    let mut held_out: Vec<Example> = Vec::new();
    while held_out.len() < args.eval {
        let e = example(&mut rng);
        if !held_out.iter().any(|h| h.question == e.question) {
            held_out.push(e);
        }
    }

    let start = Instant::now();
    let decoder = Arc::new(files.decoder_for(backend, config.clone(), 128)?);
    let generator = Generator::new(backend, decoder.clone())?;
    eprintln!(
        "compiled the decoder in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let before = accuracy(&task, &generator, &held_out)?;
    eprintln!("held-out exact match before: {before:.3}");

    // The training step: forward, backward and AdamW over the adapters alone.
    let start = Instant::now();
    let graph = LlamaLoss::build(&config)?;
    let mut train = TrainConfig::new(Optimizer::adamw(args.lr)).train_only(config.adapter_params());
    if args.recompute {
        train = train.recompute_activations();
    }
    let mut trainer = Trainer::new(backend, &graph, "loss", train)?;
    files.load_weights(
        trainer.executable(),
        &LlamaLoss::manifest(&config)?,
        &config,
    )?;
    LoraAdapter::init(&config, lora, args.seed)?.bind_trainer(&mut trainer, &config)?;
    eprintln!(
        "compiled the training step in {:.1} s",
        start.elapsed().as_secs_f64()
    );

    let terminal = std::io::stderr().is_terminal();
    let mut losses = Vec::with_capacity(args.steps);
    let (mut tokens, mut seconds) = (0usize, 0.0f64);
    for step in 1..=args.steps {
        let mut examples = Vec::with_capacity(args.batch);
        while examples.len() < args.batch {
            let e = example(&mut rng);
            if !held_out.iter().any(|h| h.question == e.question) {
                examples.push(e);
            }
        }
        let (ids, labels, count) = task.batch(&examples)?;
        let timer = Instant::now();
        let seed = HostTensor::from_vec(vec![step as i64], [0usize; 0])?;
        let mut inputs = vec![("input_ids", ids.view()), ("labels", labels.view())];
        if args.dropout > 0.0 {
            inputs.push(("dropout_seed", seed.view()));
        }
        let loss = trainer.step(&inputs)?;
        // The first step of each length plans it: count the steady state.
        if step > 1 {
            seconds += timer.elapsed().as_secs_f64();
            tokens += count;
        }
        losses.push(loss);
        if terminal {
            report::progress("fine-tuning", step, args.steps, loss);
        } else if step % 10 == 0 || step == args.steps {
            eprintln!("step {step}/{} loss {loss:.4}", args.steps);
        }
    }
    if terminal {
        eprintln!();
    }

    let adapter = LoraAdapter::from_trainer(&trainer, &config)?;
    adapter.bind(decoder.compiled(), &config)?;
    let after = accuracy(&task, &generator, &held_out)?;
    eprintln!("held-out exact match after: {after:.3}");

    std::fs::create_dir_all(&args.out)?;
    let dir = args.out.join("adapter");
    adapter.save_peft(&dir, "HuggingFaceTB/SmolLM2-135M-Instruct")?;
    let curve = args.out.join("loss.svg");
    std::fs::write(
        &curve,
        report::loss_svg("fine-tuning loss per step", &losses),
    )?;
    eprintln!("wrote {} and {}", dir.display(), curve.display());
    let tok_s = if seconds > 0.0 {
        tokens as f64 / seconds
    } else {
        0.0
    };
    println!(
        "finetune backend={} steps={} before={before:.3} after={after:.3} tok_s={tok_s:.1}",
        args.backend, args.steps
    );
    Ok(())
}

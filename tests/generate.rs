//! Generation through the public API (`rlx::generate`) with SmolLM2-135M-Instruct against
//! transformers (`tests/data/llm/`): greedy continuations of the public prompts and of chat
//! conversations rendered with the file's template, prompts prefilled in chunks, seeded
//! sampling, stop tokens and strings, budgets, batches of prompts of different lengths, and
//! text streamed in whole characters.

use std::sync::Arc;

use rlx::backend::{Backend, Context, Executable, RunError};
use rlx::generate::{
    BatchGenerator, BatchSession, ChatMessage, ChatTemplate, Decoder, FinishReason, GenerateError,
    GenerateOptions, Generator, RowEvent, RowId, SamplingParams, TextStream,
};
use rlx::ir::ActivationPrecision;
use rlx::models::llama::{LlamaBatchDecoder, LlamaDecoder};
use rlx::tensor::HostTensor;
use rlx::tokenizer::Tokenizer;
use rlx_testkit::llm::{byte_symbol, ids, reference, smollm2};

fn greedy(max_tokens: usize, stop_tokens: Vec<i64>) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: SamplingParams::greedy(),
        stop_tokens,
    }
}

fn collect(generator: &Generator, prompt: &[i64], options: GenerateOptions) -> Vec<i64> {
    generator
        .generate(prompt, options)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Everything that needs the real model, on one backend (one load).
fn generates<B: Backend<Executable: 'static>>(label: &str, backend: &B) {
    let file = smollm2();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let decoder = Arc::new(LlamaDecoder::from_gguf(backend, &file, 400).unwrap());
    // Small chunks, so the long prompt below runs in several and short ones are padded.
    let generator = Generator::new(backend, decoder.clone())
        .unwrap()
        .with_prefill_chunk(64);

    // The public prompts: transformers' 32 greedy tokens.
    for name in ["capital", "story", "colors", "boiling", "poem"] {
        let r = reference(name);
        let prompt = ids(&r["ids_no_bos"]);
        let got = collect(&generator, &prompt, greedy(32, vec![]));
        assert_eq!(got, ids(&r["greedy"]["ids"]), "{label} {name}");
    }

    // Chat: the file's template renders what transformers renders, the tokenizer gives its
    // ids, and greedy decoding stopped by the end-of-turn token gives its tokens.
    let template = ChatTemplate::from_gguf(&file, &tokenizer).unwrap();
    let stop: Vec<i64> = tokenizer
        .stop_tokens()
        .iter()
        .map(|t| i64::from(*t))
        .collect();
    for case in reference("chat")["cases"].as_array().unwrap() {
        let messages: Vec<ChatMessage> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let add = case["add_generation_prompt"].as_bool().unwrap();
        let text = template.render(&messages, add).unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "{label} template");
        let prompt: Vec<i64> = tokenizer
            .encode_plain(&text)
            .unwrap()
            .into_iter()
            .map(i64::from)
            .collect();
        assert_eq!(prompt, ids(&case["ids"]), "{label} chat ids");
        if let Some(expected) = case.get("greedy_ids") {
            let expected = ids(expected);
            let mut generation = generator
                .generate(&prompt, greedy(24, stop.clone()))
                .unwrap();
            let got: Vec<i64> = generation.by_ref().collect::<Result<_, _>>().unwrap();
            match expected.iter().position(|t| stop.contains(t)) {
                Some(end) => {
                    assert_eq!(got, expected[..end], "{label} chat greedy");
                    assert_eq!(generation.finish_reason(), Some(FinishReason::Stop));
                }
                None => {
                    assert_eq!(got, expected, "{label} chat greedy");
                    assert_eq!(generation.finish_reason(), Some(FinishReason::Length));
                }
            }
        }
    }

    // A 300-token prompt prefilled in 64-token chunks continues as in one step.
    let long = &ids(&reference("perplexity")["ids"])[..300];
    let chunked = collect(&generator, long, greedy(12, vec![]));
    let whole = Generator::new(backend, decoder.clone()).unwrap();
    assert_eq!(
        collect(&whole, long, greedy(12, vec![])),
        chunked,
        "{label} chunks"
    );

    // Seeded sampling: the same seed gives the same tokens, another seed others.
    let prompt = ids(&reference("story")["ids_no_bos"]);
    let sampled = |seed| {
        let sampling = SamplingParams {
            temperature: 0.9,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.02,
            repetition_penalty: 1.1,
            presence_penalty: 0.2,
            frequency_penalty: 0.1,
            seed,
        };
        let options = GenerateOptions {
            sampling,
            ..greedy(24, vec![])
        };
        collect(&generator, &prompt, options)
    };
    let (a, b, c) = (sampled(11), sampled(11), sampled(12));
    assert_eq!(a, b, "{label} same seed");
    assert_eq!(a.len(), 24);
    assert_ne!(a, c, "{label} another seed");

    // A batch of prompts of different lengths (one over three prefill chunks, the others
    // ending in the first), greedy and sampled rows, one slot left empty: each row gives
    // what it gives alone.
    let batch = LlamaBatchDecoder::from_gguf(backend, &file, 400, 4).unwrap();
    let batched = BatchGenerator::new(backend, Arc::new(batch))
        .unwrap()
        .with_prefill_chunk(64);
    let long = &ids(&reference("perplexity")["ids"])[..150];
    let story = ids(&reference("story")["ids_no_bos"]);
    let capital = ids(&reference("capital")["ids_no_bos"]);
    let sampled = GenerateOptions {
        sampling: SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            seed: 5,
            ..SamplingParams::default()
        },
        ..greedy(20, vec![])
    };
    let options = [greedy(16, vec![]), sampled.clone(), greedy(32, vec![])];
    let mut generation = batched
        .generate(&[long, &story, &capital], &options)
        .unwrap();
    let first = generation.next().unwrap().unwrap();
    assert_eq!(first.len(), 3);
    let rest = generation.collect_rows().unwrap();
    let rows: Vec<Vec<i64>> = first
        .iter()
        .zip(rest)
        .map(|(t, mut row)| {
            row.insert(0, t.unwrap());
            row
        })
        .collect();
    assert_eq!(
        rows[0],
        collect(&generator, long, greedy(16, vec![])),
        "{label} batch"
    );
    assert_eq!(
        rows[2],
        ids(&reference("capital")["greedy"]["ids"]),
        "{label} batch"
    );
    assert_eq!(rows[1].len(), 20);
    if label == "cpu" {
        assert_eq!(
            rows[1],
            collect(&generator, &story, sampled),
            "{label} batch"
        );
    }
    assert!(matches!(
        batched.generate(&[capital.as_slice(); 5], &vec![greedy(1, vec![]); 5]),
        Err(GenerateError::Batch {
            prompts: 5,
            slots: 4,
            ..
        })
    ));
    assert!(matches!(
        batched.generate(&[capital.as_slice()], &[]),
        Err(GenerateError::Batch { options: 0, .. })
    ));
    continuous_batching(label, &batched, &generator);

    // The projections kept in the file's Q4_1 blocks (read in place, activations float32):
    // the public prompts' greedy tokens as transformers', and the prompt's logits those of
    // the weights dequantized at load up to the order of the sums.
    let quantized = Arc::new(
        LlamaDecoder::from_gguf_quantized(backend, &file, 400, ActivationPrecision::Exact).unwrap(),
    );
    let formats = &quantized.config().model.block_formats;
    assert_eq!(
        formats.len(),
        211,
        "{label}: every projection and the token table kept in blocks"
    );
    assert!(formats.contains(&("token_embd.weight".to_string(), rlx::gguf::GgmlType::Q8_0)));
    let kept = Generator::new(backend, quantized.clone())
        .unwrap()
        .with_prefill_chunk(64);
    // (MLX converts the blocks to its own groups on every step: two prompts there.)
    let names: &[&str] = if label == "cpu" {
        &["capital", "story", "colors", "boiling", "poem"]
    } else {
        &["capital", "poem"]
    };
    for name in names {
        let r = reference(name);
        let prompt = ids(&r["ids_no_bos"]);
        let got = collect(&kept, &prompt, greedy(32, vec![]));
        assert_eq!(got, ids(&r["greedy"]["ids"]), "{label} blocks {name}");
    }
    let prompt = ids(&reference("story")["ids_no_bos"]);
    let logits = |d: &dyn Decoder| {
        let mut context = d.new_context().unwrap();
        let step = d.step(&mut context, &prompt, 0, prompt.len() - 1).unwrap();
        step.as_slice::<f32>().unwrap().to_vec()
    };
    let worst = logits(quantized.as_ref())
        .iter()
        .zip(logits(decoder.as_ref()))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-3, "{label}: blocks' logits off by {worst}");

    // Int8 activations in the decode steps (llama.cpp's recipe; MLX computes them exactly):
    // a decode step's logits near the exact ones, the first greedy tokens transformers'
    // (later ones may part: the perplexity test in tests/llama bounds the whole effect).
    let int8 = Arc::new(
        LlamaDecoder::from_gguf_quantized(backend, &file, 400, ActivationPrecision::Int8).unwrap(),
    );
    let fast = Generator::new(backend, int8.clone())
        .unwrap()
        .with_prefill_chunk(64);
    let decode_logits = |d: &dyn Decoder| {
        let mut context = d.new_context().unwrap();
        d.step(&mut context, &prompt, 0, prompt.len() - 1).unwrap();
        let step = d.step(&mut context, &prompt[..1], prompt.len(), 0).unwrap();
        step.as_slice::<f32>().unwrap().to_vec()
    };
    let worst = decode_logits(int8.as_ref())
        .iter()
        .zip(decode_logits(quantized.as_ref()))
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("{label}: int8 activations move a decode step's logits by {worst}");
    assert!(worst < 1.0, "{label}: int8 logits off by {worst}");
    let capital = ids(&reference("capital")["ids_no_bos"]);
    let got = collect(&fast, &capital, greedy(8, vec![]));
    assert_eq!(got[..5], ids(&reference("capital")["greedy"]["ids"])[..5]);

    // Text: pieces join to the decoded tokens, and a stop string cuts the text before it.
    let prompt = ids(&reference("colors")["ids_no_bos"]);
    let tokens = collect(&generator, &prompt, greedy(32, vec![]));
    let tokens_u32: Vec<u32> = tokens.iter().map(|t| *t as u32).collect();
    let full = tokenizer.decode_text(&tokens_u32).unwrap();
    let generation = generator.generate(&prompt, greedy(32, vec![])).unwrap();
    let pieces: Vec<String> = TextStream::new(generation, &tokenizer, &[])
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(pieces.len() > 10, "{label} streams piece by piece");
    assert_eq!(pieces.concat(), full);
    let generation = generator.generate(&prompt, greedy(32, vec![])).unwrap();
    let mut stream = TextStream::new(generation, &tokenizer, &["blue".to_string()]);
    let text: String = stream.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        text,
        full[..full.find("blue").unwrap()],
        "{label} stop string"
    );
    assert_eq!(stream.finish_reason(), Some(FinishReason::Stop));
    let stats = stream.stats();
    assert!(stats.generated_tokens < 32 && stats.decode_steps > 0);

    // A full context ends the generation; the budget and bad prompts are checked.
    let small = Arc::new(LlamaDecoder::from_gguf(backend, &file, 8).unwrap());
    let small = Generator::new(backend, small).unwrap();
    let mut generation = small.generate(&prompt, greedy(100, vec![])).unwrap();
    let got: Vec<i64> = generation.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        got.len(),
        8 - prompt.len() + 1,
        "{label}: one token per free position and one more"
    );
    assert_eq!(generation.finish_reason(), Some(FinishReason::Capacity));
    assert!(matches!(
        small.generate(&[1; 9], greedy(1, vec![])),
        Err(GenerateError::PromptTooLong {
            prompt: 9,
            capacity: 8
        })
    ));
    assert!(matches!(
        small.generate(&[], greedy(1, vec![])),
        Err(GenerateError::EmptyPrompt)
    ));
    assert!(matches!(
        small.generate(&[49_152], greedy(1, vec![])),
        Err(GenerateError::Token { token: 49_152, .. })
    ));
    let bad = GenerateOptions {
        sampling: SamplingParams {
            top_p: 0.0,
            ..SamplingParams::default()
        },
        ..GenerateOptions::default()
    };
    assert!(matches!(
        small.generate(&prompt, bad),
        Err(GenerateError::Setting { name: "top_p", .. })
    ));
}

/// Continuous batching (`BatchSession`): five requests over four slots, joining while
/// others decode (their prompts prefilled in chunks within the same steps), one cancelled
/// to free a slot for the fifth; each row's tokens are those it gives alone.
fn continuous_batching(label: &str, batched: &BatchGenerator, alone: &Generator) {
    let long = ids(&reference("perplexity")["ids"])[..150].to_vec();
    let story = ids(&reference("story")["ids_no_bos"]);
    let capital = ids(&reference("capital")["ids_no_bos"]);
    let sampled = GenerateOptions {
        sampling: SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            seed: 9,
            ..SamplingParams::default()
        },
        ..greedy(14, vec![])
    };
    let requests = [
        (long.clone(), greedy(12, vec![])),
        (story.clone(), sampled.clone()),
        (capital.clone(), greedy(40, vec![])),
        (story.clone(), greedy(10, vec![])),
        (capital.clone(), greedy(6, vec![])),
    ];
    let mut session = batched.session().unwrap();
    let mut rows: Vec<(RowId, Vec<i64>, Option<FinishReason>)> = Vec::new();
    let admit = |session: &mut BatchSession, k: usize| {
        let (prompt, options) = &requests[k];
        session.admit(prompt, options.clone(), Some(3)).unwrap()
    };
    for k in 0..2 {
        rows.push((admit(&mut session, k), Vec::new(), None));
    }
    let mut steps = 0;
    while session.rows() > 0 {
        for (row, event) in session.step().unwrap() {
            let k = rows.iter().position(|r| r.0 == row).unwrap();
            let entry = &mut rows[k];
            match event {
                RowEvent::Token { token, logprob } => {
                    let logprob = logprob.unwrap();
                    assert!(logprob.logprob <= 0.0 && logprob.top.len() == 3);
                    assert!(logprob.top[0].1 >= logprob.top[2].1);
                    if k != 1 {
                        // Greedy rows choose the likeliest token.
                        assert_eq!(logprob.top[0], (token, logprob.logprob), "{label} {row}");
                    }
                    entry.1.push(token);
                }
                RowEvent::Finished { reason, stats } => {
                    assert_eq!(stats.generated_tokens, entry.1.len());
                    entry.2 = Some(reason);
                }
            }
        }
        steps += 1;
        match steps {
            // Joins while the long prompt is still being prefilled, then while rows decode.
            1 | 4 => rows.push((admit(&mut session, rows.len()), Vec::new(), None)),
            6 => {
                assert!(matches!(
                    session.admit(&capital, greedy(1, vec![]), None),
                    Err(GenerateError::Full { slots: 4 })
                ));
                assert!(session.cancel(rows[2].0));
                assert!(!session.cancel(rows[2].0));
                rows.push((admit(&mut session, 4), Vec::new(), None));
            }
            _ => {}
        }
        assert!(steps < 200, "{label}: the session does not end");
    }
    assert_eq!(rows.len(), 5);
    for (k, (row, tokens, reason)) in rows.iter().enumerate() {
        let (prompt, options) = &requests[k];
        let expected = collect(alone, prompt, options.clone());
        if k == 2 {
            assert_eq!(*reason, None, "{label} {row}: cancelled");
            assert!(
                !tokens.is_empty() && expected.starts_with(tokens),
                "{label} {row}"
            );
        } else if k != 1 || label == "cpu" {
            assert_eq!(*tokens, expected, "{label} {row}");
            assert_eq!(*reason, Some(FinishReason::Length), "{label} {row}");
        }
    }
}

#[test]
fn smollm2_generates_on_the_cpu() {
    generates("cpu", &rlx::cpu::CpuBackend::default());
}

#[cfg(feature = "mlx")]
#[test]
fn smollm2_generates_on_mlx() {
    generates("mlx", &rlx::mlx::MlxBackend::default());
}

/// A decoder that plays a fixed list of tokens (its logits put all weight on the next one),
/// for the text stream's checks.
struct Scripted {
    script: Vec<i64>,
    vocab: usize,
    prompt: usize,
    /// An executable without states, whose contexts are empty.
    empty: Box<dyn Executable>,
}

impl Decoder for Scripted {
    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn capacity(&self) -> usize {
        1024
    }

    fn new_context(&self) -> Result<Context, RunError> {
        self.empty.new_context()
    }

    fn step(
        &self,
        _: &mut Context,
        _: &[i64],
        pos: usize,
        last: usize,
    ) -> Result<HostTensor, RunError> {
        let mut logits = vec![0f32; self.vocab];
        let next = pos + last + 1 - self.prompt;
        if let Some(t) = self.script.get(next) {
            logits[*t as usize] = 100.0;
        }
        Ok(HostTensor::from_vec(logits, [self.vocab]).unwrap())
    }
}

fn scripted(script: Vec<i64>, vocab: usize) -> Generator {
    let backend = rlx::cpu::CpuBackend::default();
    let mut b = rlx::GraphBuilder::new();
    let x = b.input("x", rlx::ir::DType::F32, [1]).unwrap();
    b.output("y", x).unwrap();
    let empty = Box::new(backend.compile(&b.finish().unwrap()).unwrap());
    let decoder = Scripted {
        script,
        vocab,
        prompt: 1,
        empty,
    };
    Generator::new(&backend, Arc::new(decoder)).unwrap()
}

/// Characters whose bytes are split across tokens come out whole, a stop string split
/// across tokens is found, and text that might begin one is held back only until it
/// cannot.
#[test]
fn text_streams_whole_characters_and_stops_across_tokens() {
    let file = smollm2();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let vocab = tokenizer.vocab_size();
    // Byte-level tokens of one byte each.
    let byte_token = |byte: u8| {
        let s = byte_symbol(byte);
        (0..vocab as u32)
            .find(|id| tokenizer.token(*id).as_deref() == Some(s.as_str()))
            .map(i64::from)
            .unwrap_or_else(|| panic!("no token for byte {byte:#x}"))
    };
    let word = |text: &str| -> Vec<i64> {
        tokenizer
            .encode(text)
            .unwrap()
            .into_iter()
            .map(i64::from)
            .collect()
    };
    let e_acute = "é".bytes().map(byte_token);
    let smile = "🙂".bytes().map(byte_token);
    let mut script = word("caf");
    script.extend(e_acute);
    script.extend(word(" ok "));
    script.extend(smile);
    script.extend(word(" END here"));
    let generator = scripted(script.clone(), vocab);
    let run = |stop: &[String]| {
        let generation = generator
            .generate(&[0], greedy(script.len(), vec![]))
            .unwrap();
        let mut stream = TextStream::new(generation, &tokenizer, stop);
        let pieces: Vec<String> = stream.by_ref().collect::<Result<_, _>>().unwrap();
        (pieces, stream.finish_reason())
    };
    let (pieces, finish) = run(&[]);
    assert_eq!(pieces.concat(), "café ok 🙂 END here");
    assert!(
        pieces
            .iter()
            .all(|p| !p.contains(char::REPLACEMENT_CHARACTER))
    );
    assert!(pieces.iter().any(|p| p.contains('é')) && pieces.iter().any(|p| p.contains('🙂')));
    assert_eq!(finish, Some(FinishReason::Length));

    let (pieces, finish) = run(&["D he".to_string(), "xyz".to_string()]);
    assert_eq!(pieces.concat(), "café ok 🙂 EN");
    assert_eq!(finish, Some(FinishReason::Stop));
    // "ok 🙂" could begin no stop string: it was not held back until the end.
    assert!(pieces.len() >= 3, "{pieces:?}");
}

/// A SentencePiece vocabulary's pieces carry their spaces (`▁the`), which its decoder
/// drops at the start of a text: streamed piece by piece, the text keeps every space the
/// tokens spell and equals the tokens decoded at once.
#[test]
fn text_streams_keep_the_spaces_of_sentencepiece_pieces() {
    use rlx_testkit::llm::tiny_spm_gguf;
    let data = reference("tiny_spm");
    let tokenizer = Tokenizer::from_gguf(&tiny_spm_gguf(&data["llama"], false)).unwrap();
    let text = "The capital of France is Paris; Zürich 🙂 is not.";
    let script: Vec<i64> = tokenizer
        .encode_plain(text)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    let generator = scripted(script.clone(), tokenizer.vocab_size());
    let generation = generator
        .generate(&[0], greedy(script.len(), vec![]))
        .unwrap();
    let pieces: Vec<String> = TextStream::new(generation, &tokenizer, &[])
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(pieces.len() > 8, "{pieces:?}");
    assert_eq!(pieces.concat(), text);
}

//! GGUF files: dequantization of every block format against llama.cpp's own Python package
//! (`scripts/gguf_fixtures.py`, bit for bit) and against the exact f64 values, and files
//! written here read back with their metadata and tensors.

use rlx::gguf::{
    GgmlType, Gguf, GgufError, MetadataArray, MetadataValue, dequantize, dequantize_f64,
};
use rlx_testkit::gguf::{Meta, Tensor, write};

fn fixtures() -> serde_json::Value {
    let dir = std::env::var("RLX_TEST_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"));
    let text = std::fs::read_to_string(dir.join("gguf/dequantize.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const FORMATS: [(&str, GgmlType); 12] = [
    ("F16", GgmlType::F16),
    ("BF16", GgmlType::BF16),
    ("Q4_0", GgmlType::Q4_0),
    ("Q4_1", GgmlType::Q4_1),
    ("Q5_0", GgmlType::Q5_0),
    ("Q5_1", GgmlType::Q5_1),
    ("Q8_0", GgmlType::Q8_0),
    ("Q2_K", GgmlType::Q2K),
    ("Q3_K", GgmlType::Q3K),
    ("Q4_K", GgmlType::Q4K),
    ("Q5_K", GgmlType::Q5K),
    ("Q6_K", GgmlType::Q6K),
];

/// Every format's f32 values equal those of the `gguf` package (which transformers and
/// llama.cpp agree with) bit for bit, and lie within a few f32 roundings of the exact
/// values.
#[test]
fn every_format_dequantizes_as_llama_cpp_does() {
    let fixtures = fixtures();
    for (name, kind) in FORMATS {
        assert_eq!(kind.name(), name);
        let case = &fixtures["formats"][name];
        let bytes = hex(case["bytes"].as_str().unwrap());
        let expected: Vec<f32> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| f32::from_bits(v.as_u64().unwrap() as u32))
            .collect();
        assert_eq!(
            bytes.len() / kind.block_bytes() * kind.block_values(),
            expected.len(),
            "{name}"
        );
        let mut got = vec![f32::NAN; expected.len()];
        dequantize(kind, &bytes, &mut got).unwrap();
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                g.to_bits() == e.to_bits(),
                "{name} value {i}: {g} vs gguf's {e}"
            );
        }
        let mut exact = vec![f64::NAN; expected.len()];
        dequantize_f64(kind, &bytes, &mut exact).unwrap();
        // Per block: the f32 path rounds a scale product, a product and a difference, each
        // by at most half an ulp of the block's largest term.
        for (i, block) in exact.chunks(kind.block_values()).enumerate() {
            let largest = block.iter().fold(0f64, |m, v| m.max(v.abs()));
            for (j, x) in block.iter().enumerate() {
                let g = f64::from(got[i * kind.block_values() + j]);
                if x.is_finite() {
                    let bound = 4.0 * f64::from(f32::EPSILON) * largest.max(f64::MIN_POSITIVE);
                    assert!(
                        (g - x).abs() <= bound,
                        "{name} block {i} value {j}: {g} vs exact {x}"
                    );
                } else {
                    assert_eq!(g, *x, "{name} block {i} value {j}");
                }
            }
        }
    }
}

#[test]
fn wrong_lengths_and_unsupported_types_are_typed_errors() {
    let mut out = [0f32; 32];
    assert!(dequantize(GgmlType::Q4_0, &[0; 17], &mut out).is_err());
    assert!(dequantize(GgmlType::Q4_0, &[0; 36], &mut out).is_err());
    assert!(dequantize(GgmlType::Iq4Nl, &[0; 18], &mut out).is_err());
    for id in 0..64 {
        if let Some(kind) = GgmlType::from_id(id) {
            assert_eq!(kind.id(), id);
            assert!(kind.block_bytes() > 0 && kind.block_values() > 0);
        }
    }
}

/// Bytes of a Q8_0 tensor of `n` values (a multiple of 32): scale 1/16, values `i - 64`.
fn q8_0(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for block in 0..n / 32 {
        out.extend(half::f16::from_f32(1.0 / 16.0).to_le_bytes());
        out.extend((0..32).map(|i| ((block * 32 + i) % 128) as u8 ^ 0x40));
    }
    out
}

#[test]
fn a_written_file_reads_back_with_its_metadata_and_tensors() {
    let f32_values: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    let tensors = [
        Tensor {
            name: "token_embd.weight".into(),
            dims: vec![64, 3],
            type_id: 8,
            data: q8_0(192),
        },
        Tensor {
            name: "output_norm.weight".into(),
            dims: vec![4, 3],
            type_id: 0,
            data: f32_values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        },
    ];
    let metadata = [
        ("general.architecture", Meta::string("llama")),
        ("llama.block_count", Meta::u32(30)),
        ("llama.rope.freq_base", Meta::f32(10000.0)),
        ("tokenizer.ggml.add_bos_token", Meta::bool(false)),
        (
            "tokenizer.ggml.tokens",
            Meta::array(&[Meta::string("<s>"), Meta::string("ab")]),
        ),
        (
            "nested",
            Meta::array(&[Meta::array(&[Meta::u32(1), Meta::u32(2)])]),
        ),
        ("i64", Meta::raw(11, &(-5i64).to_le_bytes())),
        ("f64", Meta::raw(12, &0.25f64.to_le_bytes())),
    ];
    for alignment in [32, 64, 1] {
        let (bytes, _) = write(&metadata, &tensors, alignment);
        let file = Gguf::from_bytes(bytes.clone()).unwrap();
        assert_eq!((file.version(), file.alignment()), (3, alignment));
        assert_eq!(
            file.get("general.architecture")
                .and_then(MetadataValue::as_str),
            Some("llama")
        );
        assert_eq!(
            file.get("llama.block_count")
                .and_then(MetadataValue::as_u64),
            Some(30)
        );
        assert_eq!(
            file.get("llama.rope.freq_base")
                .and_then(MetadataValue::as_f64),
            Some(10000.0)
        );
        assert_eq!(
            file.get("tokenizer.ggml.add_bos_token")
                .and_then(MetadataValue::as_bool),
            Some(false)
        );
        assert_eq!(
            file.get("tokenizer.ggml.tokens")
                .and_then(MetadataValue::as_array),
            Some(&MetadataArray::Text(vec!["<s>".into(), "ab".into()]))
        );
        assert_eq!(
            file.get("nested"),
            Some(&MetadataValue::Array(MetadataArray::Array(vec![
                MetadataArray::U32(vec![1, 2])
            ])))
        );
        assert_eq!(file.get("i64").and_then(MetadataValue::as_f64), Some(-5.0));
        assert_eq!(file.get("f64").and_then(MetadataValue::as_f64), Some(0.25));
        let embed = file.tensor_f32("token_embd.weight").unwrap();
        assert_eq!(embed.shape(), &[3, 64]);
        let mut expected = vec![0f32; 192];
        dequantize(GgmlType::Q8_0, &q8_0(192), &mut expected).unwrap();
        assert_eq!(embed.as_slice::<f32>().unwrap(), &expected[..]);
        let norm = file.tensor_f32("output_norm.weight").unwrap();
        assert_eq!(norm.shape(), &[3, 4]);
        assert_eq!(norm.as_slice::<f32>().unwrap(), &f32_values[..]);
        assert!(matches!(
            file.tensor_f32("missing"),
            Err(GgufError::NoTensor(_))
        ));
        // The same through a file on disk.
        let path =
            std::env::temp_dir().join(format!("rlx-gguf-{}-{alignment}.gguf", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let mapped = Gguf::open(&path).unwrap();
        assert_eq!(mapped.tensor_f32("output_norm.weight").unwrap(), norm);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn structural_lies_are_named() {
    let tensor = Tensor {
        name: "t".into(),
        dims: vec![32, 2],
        type_id: 8,
        data: q8_0(64),
    };
    let (good, fields) = write(&[], std::slice::from_ref(&tensor), 32);
    let with = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        Gguf::from_bytes(b).unwrap_err()
    };
    assert!(matches!(
        Gguf::from_bytes(b"GGML".to_vec()),
        Err(GgufError::NotGguf)
    ));
    assert!(matches!(
        with(fields.version, &1u32.to_le_bytes()),
        GgufError::Version(1)
    ));
    assert!(matches!(
        with(fields.counts[0], &u64::MAX.to_le_bytes()),
        GgufError::Count { .. }
    ));
    assert!(matches!(
        with(fields.dims[0], &33u64.to_le_bytes()),
        GgufError::Dims { .. }
    ));
    assert!(matches!(
        with(fields.dims[1], &(u64::MAX / 16).to_le_bytes()),
        GgufError::Dims { .. }
    ));
    assert!(matches!(
        with(fields.tensor_types[0], &77u32.to_le_bytes()),
        GgufError::TensorType { .. }
    ));
    assert!(matches!(
        with(fields.offsets[0], &8u64.to_le_bytes()),
        GgufError::Misaligned { .. }
    ));
    assert!(matches!(
        with(fields.offsets[0], &64u64.to_le_bytes()),
        GgufError::DataRange { .. }
    ));
    assert!(matches!(
        with(fields.ranks[0], &5u32.to_le_bytes()),
        GgufError::Dims { .. }
    ));
    assert!(matches!(
        Gguf::from_bytes(good[..good.len() - 1].to_vec()),
        Err(GgufError::DataRange { .. })
    ));
    assert!(matches!(
        Gguf::from_bytes(good[..fields.offsets[0]].to_vec()),
        Err(GgufError::Truncated { .. })
    ));
    let (twice, _) = write(&[], &[tensor.clone(), tensor], 32);
    assert!(matches!(
        Gguf::from_bytes(twice),
        Err(GgufError::Duplicate { .. })
    ));
    let (odd, _) = write(&[("general.alignment", Meta::u32(48))], &[], 32);
    assert!(matches!(
        Gguf::from_bytes(odd),
        Err(GgufError::Alignment(_))
    ));
}

/// The tutorial's model, fetched by package and hash: its metadata as the issue describes
/// it, and every tensor dequantized to finite values of its shape.
#[test]
fn smollm2_reads_with_its_metadata_and_every_tensor() {
    let file = rlx_testkit::llm::smollm2();
    assert_eq!(file.version(), 3);
    let get = |key: &str| file.get(key).unwrap_or_else(|| panic!("no {key}"));
    assert_eq!(get("general.architecture").as_str(), Some("llama"));
    for (key, value) in [
        ("llama.block_count", 30),
        ("llama.embedding_length", 576),
        ("llama.attention.head_count", 9),
        ("llama.attention.head_count_kv", 3),
        ("llama.feed_forward_length", 1536),
    ] {
        assert_eq!(get(key).as_u64(), Some(value), "{key}");
    }
    assert_eq!(
        get("tokenizer.ggml.tokens")
            .as_array()
            .map(MetadataArray::len),
        Some(49_152)
    );
    assert!(
        get("tokenizer.chat_template")
            .as_str()
            .unwrap()
            .contains("<|im_start|>")
    );
    let count = |kind| file.tensors().iter().filter(|t| t.kind == kind).count();
    assert_eq!(file.tensors().len(), 272);
    assert_eq!(
        (
            count(GgmlType::Q4_1),
            count(GgmlType::Q8_0),
            count(GgmlType::F32)
        ),
        (210, 1, 61)
    );
    let embed = file.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embed.kind, embed.shape()),
        (GgmlType::Q8_0, vec![49_152, 576])
    );
    for info in file.tensors() {
        let t = file.tensor_f32(&info.name).unwrap();
        assert_eq!(t.shape(), &info.shape()[..], "{}", info.name);
        let values = t.as_slice::<f32>().unwrap();
        assert!(values.iter().all(|v| v.is_finite()), "{}", info.name);
    }
}

/// SmolLM2's tokenizer from its GGUF: the ids of the public prompts (special tokens
/// included) and of the shared prose text (1,093 tokens) equal transformers' (and
/// llama.cpp's), and decoding gives the text back.
#[test]
fn smollm2_tokenizes_as_transformers_does() {
    use rlx::tokenizer::Tokenizer;
    let file = rlx_testkit::llm::smollm2();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tokenizer.vocab_size(), 49_152);
    let data = std::env::var("RLX_TEST_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"));
    let json = |name: &str| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(data.join(format!("llm/{name}.json"))).unwrap(),
        )
        .unwrap()
    };
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    for name in ["capital", "story", "colors", "boiling", "poem"] {
        let r = json(name);
        let text = r["text"].as_str().unwrap();
        let got = tokenizer.encode(text).unwrap();
        assert_eq!(got, ids(&r["ids_no_bos"]), "{name}: {text:?}");
        assert_eq!(tokenizer.decode(&got).unwrap(), text, "{name}");
    }
    let text = std::fs::read_to_string(data.join("llm/ppl_text.txt")).unwrap();
    let got = tokenizer.encode(&text).unwrap();
    assert_eq!(got, ids(&json("perplexity")["ids"]));
    assert_eq!(tokenizer.decode(&got).unwrap(), text);
}

/// SentencePiece vocabularies as GGUF files carry them (`tokenizer.ggml.model = llama`:
/// scored pieces, byte fallback), Llama-style (a space put before the text) and
/// Gemma-style (none, user-defined pieces in the text): ids and decoded text equal
/// SentencePiece's own (`scripts/tiny_spm.py`) for plain text, whitespace runs, digits,
/// code and characters only byte fallback can spell; `<s>` goes first when the file asks,
/// and a control token's string in a text is that token.
#[test]
fn sentencepiece_vocabularies_tokenize_as_sentencepiece_does() {
    use rlx::tokenizer::Tokenizer;
    use rlx_testkit::llm::{reference, tiny_spm_gguf};
    let data = reference("tiny_spm");
    for style in ["llama", "gemma"] {
        let model = &data[style];
        let tokenizer = Tokenizer::from_gguf(&tiny_spm_gguf(model, true)).unwrap();
        let plain = Tokenizer::from_gguf(&tiny_spm_gguf(model, false)).unwrap();
        assert_eq!(
            tokenizer.vocab_size(),
            model["tokens"].as_array().unwrap().len()
        );
        let bos = model["bos"].as_u64().unwrap() as u32;
        assert_eq!(tokenizer.bos(), Some(bos));
        assert_eq!(
            tokenizer.stop_tokens(),
            &[model["eos"].as_u64().unwrap() as u32]
        );
        for case in model["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let expected: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let got = tokenizer.encode_plain(text).unwrap();
            assert_eq!(got, expected, "{style}: {text:?}");
            assert_eq!(plain.encode(text).unwrap(), expected, "{style}: {text:?}");
            let with_bos = tokenizer.encode(text).unwrap();
            assert_eq!(with_bos[0], bos, "{style}");
            assert_eq!(&with_bos[1..], &expected[..], "{style}: {text:?}");
            assert_eq!(
                tokenizer.decode_text(&with_bos).unwrap(),
                case["decoded"].as_str().unwrap(),
                "{style}: {text:?}"
            );
        }
        // Control tokens are found whole; their text is left out for a reader.
        let marker = tokenizer.encode_plain("<|im_start|>a").unwrap();
        assert_eq!(marker[0], 3, "{style}: {marker:?}");
        assert_eq!(tokenizer.decode_text(&marker).unwrap(), "a", "{style}");
    }
}

/// Byte-level BPE vocabularies with Llama 3's and Qwen2's pre-tokenizers
/// (`tokenizer.ggml.pre` `llama-bpe` and `qwen2`): ids and decoded text equal those of the
/// `tokenizers` library built as those models' `tokenizer.json` files build them
/// (`scripts/tiny_bpe.py`), for contractions in any case, digit runs, whitespace runs,
/// line breaks, code, Unicode (composed and not) and special tokens.
#[test]
fn llama3_and_qwen2_pre_tokenizers_tokenize_as_their_tokenizer_json_does() {
    use rlx::tokenizer::Tokenizer;
    let data = rlx_testkit::llm::reference("tiny_bpe");
    for pre in ["llama-bpe", "qwen2"] {
        let model = &data[pre];
        let strings = |key: &str| -> Vec<Meta> {
            model[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| Meta::string(t.as_str().unwrap()))
                .collect()
        };
        let types: Vec<Meta> = model["token_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| Meta::raw(5, &(t.as_i64().unwrap() as i32).to_le_bytes()))
            .collect();
        let metadata = [
            ("tokenizer.ggml.model", Meta::string("gpt2")),
            ("tokenizer.ggml.pre", Meta::string(pre)),
            ("tokenizer.ggml.tokens", Meta::array(&strings("tokens"))),
            ("tokenizer.ggml.merges", Meta::array(&strings("merges"))),
            ("tokenizer.ggml.token_type", Meta::array(&types)),
            ("tokenizer.ggml.bos_token_id", Meta::u32(0)),
            ("tokenizer.ggml.eos_token_id", Meta::u32(1)),
            ("tokenizer.ggml.add_bos_token", Meta::bool(true)),
        ];
        let (bytes, _) = write(&metadata, &[], 32);
        let tokenizer = Tokenizer::from_gguf(&Gguf::from_bytes(bytes).unwrap()).unwrap();
        for case in model["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let expected: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let ids = tokenizer.encode(text).unwrap();
            assert_eq!(ids[0], 0, "{pre}: the beginning of the text first");
            assert_eq!(&ids[1..], &expected[..], "{pre}: {text:?}");
            assert_eq!(
                tokenizer.decode_text(&ids).unwrap(),
                case["decoded"].as_str().unwrap(),
                "{pre}: {text:?}"
            );
        }
    }
}

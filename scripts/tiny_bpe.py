"""A tiny byte-level BPE vocabulary trained here with Llama 3's pre-tokenizer, and the same
vocabulary behind the pre-tokenizers of Llama 3 and Qwen2 as their `tokenizer.json` files
build them (a regex split, then GPT-2's byte alphabet; Llama 3's model skips merges for
words already in the vocabulary, Qwen2 normalizes to NFC first and splits every digit),
written out as the tokens and merges GGUF files carry (`tokenizer.ggml.pre` `llama-bpe`
and `qwen2`), with the ids the `tokenizers` library gives test strings.

    python scripts/tiny_bpe.py > tests/data/llm/tiny_bpe.json

Needs tokenizers (its version is recorded in the output).
"""
import json
import sys
from importlib.metadata import version

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# The split patterns of the two families' tokenizer.json files.
LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CORPUS = [
    "The three primary colors are red, yellow and blue.",
    "Water boils at 100 degrees at sea level; it freezes at 0. It's 2024 now.",
    "Once upon a time there was a small robot who liked to read books.",
    "I'll say they've done what we'd do: THE END, isn't it?",
    "fn main() {\n    let answer = 42;\n    println!(\"{answer}\");\n}\n\n",
    "Zürich, Köln and Genève are cities; naïve café résumé. 東京 🙂",
    "123 123 123 456 456 456 2024 2024 2024 12345 12345",
]

STRINGS = [
    "The three primary colors are",
    "  Paris,   Rome  and\tBerlin? ",
    "12345678 + 90 = 12345768",
    "I'LL say THEY'VE done it's done",
    "fn main() {\n    let x = 42;\n}\n\n\n",
    "Zürich 🙂 x² — 日本",
    "e\u0301 composed and decomposed é",
    "<|begin_of_text|>hi<|end_of_text|>",
    "",
]

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]


def pipeline(model, pattern, nfc):
    tok = Tokenizer(model)
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train():
    tok = pipeline(models.BPE(ignore_merges=True), LLAMA3, nfc=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return [t for t, _ in vocab], merges


def describe(tokens, merges, pattern, ignore_merges, nfc):
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = pipeline(models.BPE(vocab, merges, ignore_merges=ignore_merges), pattern, nfc)
    tok.add_special_tokens(SPECIALS)
    cases = []
    for text in STRINGS:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
    return {
        "tokens": tokens,
        "token_types": [3 if t in SPECIALS else 1 for t in tokens],
        "merges": [" ".join(m) for m in merges],
        "cases": cases,
    }


def main():
    tokens, merges = train()
    json.dump(
        {
            "made_by": "scripts/tiny_bpe.py",
            "versions": {"tokenizers": version("tokenizers")},
            "llama-bpe": describe(tokens, merges, LLAMA3, ignore_merges=True, nfc=False),
            "qwen2": describe(tokens, merges, QWEN2, ignore_merges=False, nfc=True),
        },
        sys.stdout,
        indent=1,
        ensure_ascii=False,
    )
    print()


if __name__ == "__main__":
    main()

"""Two tiny SentencePiece BPE models (byte fallback, digits split, whitespace kept), trained
here on a few lines, as the vocabularies GGUF files carry for SentencePiece tokenizers
(`tokenizer.ggml.model = llama`): pieces, scores and token types in llama.cpp's numbering.
One is Llama-style (a space put before the text), one Gemma-style (none). For each, the ids
SentencePiece itself gives test strings (no beginning-of-sequence token) and the text it
decodes them to.

    python scripts/tiny_spm.py > tests/data/llm/tiny_spm.json

Needs sentencepiece (its version is recorded in the output).
"""
import io
import json
import sys
from importlib.metadata import version

import sentencepiece as spm

CORPUS = [
    "The three primary colors are red, yellow and blue.",
    "Water boils at 100 degrees at sea level; it freezes at 0.",
    "Once upon a time there was a small robot who liked to read books.",
    "The capital of France is Paris; the capital of Italy is Rome.",
    "fn main() { let answer = 42; println!(\"{answer}\"); }",
    "    indented    with    runs of spaces\tand tabs\nand new lines",
    "Zürich, Köln and Genève are cities; naïve café résumé.",
    "def read(path):\n    return open(path).read()",
]

# llama.cpp's token types (llama_token_type): what GGUF's tokenizer.ggml.token_type holds.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

USER = ["<start_of_turn>", "<end_of_turn>"]

STRINGS = [
    "The three primary colors are",
    "  Paris,   Rome  and\tBerlin? ",
    "Zürich 🙂 x² — 日本",
    "12345 + 678 = 13023",
    "fn main() {\n    let x = 42;\n}",
    "\n\nnew lines first",
    "a",
    "",
]

# Only the Gemma-style model sees user-defined pieces inside a text: with a space put
# before the text, llama.cpp and transformers also put one after such a piece, which
# SentencePiece does not.
GEMMA_STRINGS = STRINGS + ["<start_of_turn>user\nHi there<end_of_turn>\n"]


def train(add_dummy_prefix):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_writer=model,
        model_type="bpe",
        vocab_size=420,
        character_coverage=1.0,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=add_dummy_prefix,
        allow_whitespace_only_pieces=True,
        user_defined_symbols=USER,
        control_symbols=["<|im_start|>"],
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def kind(sp, i):
    if sp.is_unknown(i):
        return UNKNOWN
    if sp.is_control(i):
        return CONTROL
    if sp.is_byte(i):
        return BYTE
    if sp.is_unused(i):
        return UNUSED
    if sp.id_to_piece(i) in USER:
        return USER_DEFINED
    return NORMAL


def describe(add_dummy_prefix, strings):
    sp = train(add_dummy_prefix)
    n = sp.get_piece_size()
    cases = []
    for text in strings:
        ids = sp.encode(text)
        cases.append({"text": text, "ids": ids, "decoded": sp.decode(ids)})
    return {
        "add_space_prefix": add_dummy_prefix,
        "tokens": [sp.id_to_piece(i) for i in range(n)],
        "scores": [sp.get_score(i) for i in range(n)],
        "token_types": [kind(sp, i) for i in range(n)],
        "unk": sp.unk_id(),
        "bos": sp.bos_id(),
        "eos": sp.eos_id(),
        "cases": cases,
    }


def main():
    json.dump(
        {
            "made_by": "scripts/tiny_spm.py",
            "versions": {"sentencepiece": version("sentencepiece")},
            "llama": describe(True, STRINGS),
            "gemma": describe(False, GEMMA_STRINGS),
        },
        sys.stdout,
        indent=1,
        ensure_ascii=False,
    )
    print()


if __name__ == "__main__":
    main()

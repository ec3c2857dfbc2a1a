"""A tiny SentencePiece-style tokenizer (BPE over Metaspace pieces with `<unk>`, `<s>` put
first by the post-processor, as Llama's and Gemma's tokenizer.json files do) trained here
on a few sentences, saved as a Hugging Face folder, and what transformers makes of it: the
ids and decoded text of test strings and a chat conversation rendered with the folder's
template. Its 128 tokens match the tiny decoders of scripts/tiny_decoders.py.

    python scripts/tiny_tokenizer.py tests/data/llm/tiny_tokenizer > tests/data/llm/tiny_tokenizer.json

Needs tokenizers and transformers (the versions are recorded in the output).
"""
import json
import sys
from importlib.metadata import version
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

CORPUS = [
    "The three primary colors are red, yellow and blue.",
    "Water boils at one hundred degrees at sea level.",
    "Once upon a time there was a small robot who liked to read.",
    "The capital of France is Paris; the capital of Italy is Rome.",
    "user: hello there! assistant: hello, how can I help you today?",
]

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] | trim }}"
    "</s>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

STRINGS = [
    "The three primary colors are",
    "  Paris,   Rome  and\tBerlin? ",
    "Zürich 🙂 x²",
    "hello</s><s>robot",
    "",
]

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": " What boils at sea level? "},
]


def main():
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(vocab_size=128, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.normalizer = None
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    assert tok.get_vocab_size() == 128, tok.get_vocab_size()
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "chat_template": TEMPLATE,
                "tokenizer_class": "PreTrainedTokenizerFast",
            },
            indent=2,
        )
        + "\n"
    )
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": [2, 4]}, indent=2) + "\n"
    )

    hf = AutoTokenizer.from_pretrained(out_dir)
    cases = []
    for text in STRINGS:
        ids = hf(text)["input_ids"]
        cases.append(
            {
                "text": text,
                "ids": ids,
                "decoded": hf.decode(ids, skip_special_tokens=True),
            }
        )
    chat_text = hf.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    chat_ids = hf(chat_text, add_special_tokens=False)["input_ids"]
    json.dump(
        {
            "made_by": "scripts/tiny_tokenizer.py",
            "versions": {p: version(p) for p in ("tokenizers", "transformers")},
            "cases": cases,
            "chat": {"messages": CHAT, "text": chat_text, "ids": chat_ids},
        },
        sys.stdout,
        indent=1,
        ensure_ascii=False,
    )
    print()


if __name__ == "__main__":
    main()

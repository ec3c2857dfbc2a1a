"""Chat-template references for tests/generate.rs: conversations rendered by transformers'
`apply_chat_template` from the SmolLM2 GGUF's own template, with their token ids, and
transformers' greedy continuation (float32, 24 new tokens) of each conversation that ends
with the assistant's turn opened.

    python scripts/chat_reference.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf > tests/data/llm/chat.json

Needs transformers, torch and gguf (the versions are recorded in the output).
"""
import json
import sys
from pathlib import Path

from importlib.metadata import version

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Name a primary colour."},
    ],
    [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Écris « bonjour » 3 fois,\n\tpuis   `print(1+1)` 🙂"},
    ],
]


def main():
    path = Path(sys.argv[1])
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    cases = []
    for messages in CONVERSATIONS:
        for add_generation_prompt in (True, False):
            text = tok.apply_chat_template(
                messages, add_generation_prompt=add_generation_prompt, tokenize=False
            )
            ids = tok(text, add_special_tokens=False).input_ids
            case = {
                "messages": messages,
                "add_generation_prompt": add_generation_prompt,
                "text": text,
                "ids": ids,
            }
            if add_generation_prompt:
                with torch.no_grad():
                    out = model.generate(
                        torch.tensor([ids]), max_new_tokens=24, do_sample=False
                    )
                case["greedy_ids"] = out[0, len(ids):].tolist()
            cases.append(case)
    out = {
        "model": path.name,
        "versions": {p: version(p) for p in ("transformers", "torch", "gguf")},
        "cases": cases,
    }
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    print()


if __name__ == "__main__":
    main()

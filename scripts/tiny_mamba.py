"""References for tests/mamba.rs: tiny Mamba decoders made by transformers from configs
written here, their weights set by the formula of `tiny_decoders.py` (the Rust test computes
it too, so no weights are stored), and what transformers makes of them in float32: the
logits of a fixed prompt and 10 greedy tokens after it (`tiny_decoders.reference_case`).

    python scripts/tiny_mamba.py > tests/data/llm/tiny_mamba.json

Needs torch and transformers (the versions are recorded in the output).
"""
import json
import sys
from importlib.metadata import version

import torch
from transformers import MambaConfig, MambaForCausalLM

from tiny_decoders import PROMPT, reference_case

COMMON = dict(
    hidden_size=64,
    num_hidden_layers=2,
    vocab_size=128,
    layer_norm_epsilon=1e-5,
)

CASES = {
    # As released Mamba checkpoints are: tied output, no projection biases, a 4-tap conv.
    "mamba": dict(state_size=8, expand=2, conv_kernel=4, tie_word_embeddings=True),
    # Projection biases, a separate output, a 3-tap conv, a wider state, a chosen rank.
    "mamba_bias": dict(
        state_size=16,
        expand=2,
        conv_kernel=3,
        time_step_rank=6,
        use_bias=True,
        tie_word_embeddings=False,
    ),
}


def main():
    torch.manual_seed(0)
    out = {
        "made_by": "scripts/tiny_mamba.py",
        "versions": {p: version(p) for p in ("torch", "transformers")},
        "prompt": PROMPT,
        "cases": {},
    }
    for label, extra in CASES.items():
        kw = dict(COMMON)
        kw.update(extra)
        config = MambaConfig(**kw)
        model = MambaForCausalLM(config).to(torch.float32).eval()
        out["cases"][label] = reference_case(model, config, False)
    json.dump(out, fp=sys.stdout)
    print()


if __name__ == "__main__":
    main()

"""References for tests/mamba.rs: tiny Mamba decoders made by transformers from configs
written here, their weights set by the formula of `tiny_decoders.py` (the Rust test computes
it too, so no weights are stored), and what transformers makes of them in float32: the
logits of a fixed prompt and 10 greedy tokens after it.

    python scripts/tiny_mamba.py > tests/data/llm/tiny_mamba.json

Needs torch and transformers (the versions are recorded in the output).
"""
import json
import sys
from importlib.metadata import version

import torch
from transformers import MambaConfig, MambaForCausalLM

from tiny_decoders import formula

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

PROMPT = [(7 * i + 3) % 128 for i in range(12)]
NEW_TOKENS = 10


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
        state = {
            name: t
            for name, t in model.state_dict().items()
            if not (config.tie_word_embeddings and name == "lm_head.weight")
        }
        with torch.no_grad():
            for name, tensor in state.items():
                tensor.copy_(torch.from_numpy(formula(name, tuple(tensor.shape), False)))
        ids = torch.tensor([PROMPT])
        with torch.no_grad():
            logits = model(ids).logits[0].float().numpy()
            run = model.generate(
                ids,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                return_dict_in_generate=True,
                output_logits=True,
            )
            greedy = run.sequences[0, len(PROMPT):].tolist()
            margin = min(
                float(top[0] - top[1])
                for top in (step[0].topk(2).values for step in run.logits)
            )
        out["cases"][label] = {
            "config_json": config.to_json_string(),
            "tensors": [[name, list(t.shape)] for name, t in state.items()],
            "logits": [[float(v) for v in row] for row in logits],
            "greedy": greedy,
            "greedy_margin": margin,
        }
    json.dump(out, fp=sys.stdout)
    print()


if __name__ == "__main__":
    main()

"""References for tests/delta_net.rs: what transformers' Gated DeltaNet recurrence
(Qwen3-Next's `torch_chunk_gated_delta_rule` for a prompt and
`torch_recurrent_gated_delta_rule` for decoding) makes of inputs set by the formula of
`tiny_decoders.py` (the Rust test computes it too, so no inputs are stored), in float32:
the outputs and the final state.

    python scripts/gated_delta.py > tests/data/llm/gated_delta.json

Needs torch and transformers (the versions are recorded in the output).
"""
import json
import sys
from importlib.metadata import version

import torch
import torch.nn.functional as F
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

from tiny_decoders import formula

# Each input: its shape in transformers' layout and the factor the formula's values (in
# [-0.2, 0.2]) are scaled by. Queries, keys and values [B, T, heads, width]; the decay and
# step logits a, b [B, T, value heads]; A_log and dt_bias per value head; the starting
# state [B, value heads, K, V].
SCALES = {"q": 5.0, "k": 5.0, "v": 5.0, "a": 10.0, "b": 10.0, "A_log": 5.0, "dt_bias": 5.0,
          "s0": 2.0}

CASES = {
    # A prompt of 100 steps: a full chunk of 64 and a padded one; 2 key heads each serving 2
    # value heads; from a given state.
    "prompt": dict(batch=2, steps=100, key_heads=2, value_heads=4, k=16, v=8, started=True,
                   function="chunk"),
    # A prompt shorter than a chunk, from zeros, as many key heads as value heads.
    "short": dict(batch=1, steps=7, key_heads=3, value_heads=3, k=8, v=12, started=False,
                  function="chunk"),
    # One decoding step from a state, step by step as transformers decodes.
    "decode": dict(batch=2, steps=1, key_heads=2, value_heads=4, k=16, v=8, started=True,
                   function="recurrent"),
}


def inputs(case, label):
    b, t, hk, hv = case["batch"], case["steps"], case["key_heads"], case["value_heads"]
    shapes = {
        "q": (b, t, hk, case["k"]),
        "k": (b, t, hk, case["k"]),
        "v": (b, t, hv, case["v"]),
        "a": (b, t, hv),
        "b": (b, t, hv),
        "A_log": (hv,),
        "dt_bias": (hv,),
        "s0": (b, hv, case["k"], case["v"]),
    }
    return {
        name: torch.from_numpy(formula(f"{label}.{name}", shape, False)) * SCALES[name]
        for name, shape in shapes.items()
    }


def run(case, label):
    x = inputs(case, label)
    beta = x["b"].sigmoid()
    g = -x["A_log"].float().exp() * F.softplus(x["a"].float() + x["dt_bias"])
    start = x["s0"] if case["started"] else None
    if case["function"] == "chunk":
        rule = qwen3_next.torch_chunk_gated_delta_rule
    else:
        rule = qwen3_next.torch_recurrent_gated_delta_rule
    # The undecorated function: never a kernel from the hub.
    rule = getattr(rule, "__wrapped__", rule)
    out, state = rule(x["q"], x["k"], x["v"], g=g, beta=beta, initial_state=start,
                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    return {
        **case,
        # [B, T, value heads, V] and [B, value heads, K, V], flattened.
        "out": out.flatten().tolist(),
        "state": state.flatten().tolist(),
    }


def main():
    out = {
        "made_by": "scripts/gated_delta.py",
        "versions": {p: version(p) for p in ("torch", "transformers")},
        "scales": SCALES,
        "cases": {label: run(case, label) for label, case in CASES.items()},
    }
    json.dump(out, fp=sys.stdout)
    print()


if __name__ == "__main__":
    main()

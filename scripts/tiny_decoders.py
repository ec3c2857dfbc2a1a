"""References for tests/llama_variants.rs: tiny Llama, Qwen2, Qwen3, Gemma 3, Qwen2-MoE,
Qwen3-MoE and Mixtral decoders made
by transformers from configs written here, their weights set by a formula the Rust test
computes too (so no weights are stored), and what transformers makes of them in float32:
the logits of a fixed prompt and 10 greedy tokens after it.

    python scripts/tiny_decoders.py > tests/data/llm/tiny_decoders.json

Each case holds the `config.json` text transformers writes, the checkpoint's tensor names
and shapes as `save_pretrained` stores them (or, for the cases marked `legacy`, as the hub's
mixture checkpoints store their experts: one tensor per expert and projection), the prompt,
the logits and the greedy tokens.
Needs torch and transformers (the versions are recorded in the output).
"""
import json
from importlib.metadata import version

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

MASK = (1 << 32) - 1


def fnv1a(text):
    h = 2166136261
    for b in text.encode():
        h = ((h ^ b) * 16777619) & MASK
    return h


def formula(name, shape, gemma):
    """Element i of tensor `name`: an integer hash of (name, i) mapped to a multiple of
    0.001 in [-1, 1], scaled by the tensor's role. Exact in float64 in both languages."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    x = (i * np.uint64(2654435761) + np.uint64(fnv1a(name))) & np.uint64(MASK)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(2246822519)) & np.uint64(MASK)
    x ^= x >> np.uint64(13)
    u = ((x % np.uint64(2001)).astype(np.float64) - 1000.0) / 1000.0
    if name.endswith("norm.weight"):
        # Gemma stores norm scales as offsets from 1; the others store the scales.
        values = 0.1 * u if gemma else 1.0 + 0.1 * u
    elif name.endswith(".bias"):
        values = 0.1 * u
    else:
        values = 0.2 * u
    return values.astype(np.float32).reshape(shape)


COMMON = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128,
    max_position_embeddings=128,
)

CASES = {
    # Separate output projection; Llama 3's RoPE scaling (an original context of 16, so
    # that its fast, slow and smoothed pairs all occur among 16 features).
    "llama": dict(
        model_type="llama",
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
        rope_parameters={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
            "rope_theta": 10000.0,
        },
    ),
    # Query/key/value biases, tied output.
    "qwen2": dict(
        model_type="qwen2",
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    ),
    # Per-head query/key norms, heads wider than hidden / heads; YaRN's RoPE scaling (its
    # attention factor too).
    "qwen3": dict(
        model_type="qwen3",
        head_dim=32,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 32,
            "rope_theta": 1000000.0,
        },
    ),
    # Local layers (window 4) around a global one with linear scaling, its own attention
    # scale, soft-capped logits, one key/value head.
    "gemma3": dict(
        model_type="gemma3_text",
        num_hidden_layers=4,
        num_key_value_heads=1,
        head_dim=32,
        query_pre_attn_scalar=24,
        sliding_window=4,
        layer_types=[
            "sliding_attention",
            "sliding_attention",
            "full_attention",
            "sliding_attention",
        ],
        final_logit_softcapping=30.0,
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
}

# Mixtures of 4 or 6 experts, 2 per token (sizes picked so that every greedy choice leads
# its runner-up by more than 0.05). Qwen2-MoE with a shared expert and unnormalized
# weights, in transformers 5's fused tensors; Qwen3-MoE (normalized) and Mixtral in the
# hub's per-expert tensors (Qwen's `mlp.experts.E.gate_proj`, Mixtral's
# `block_sparse_moe.experts.E.w1`).
CASES["qwen2_moe"] = dict(
    model_type="qwen2_moe",
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=40,
    shared_expert_intermediate_size=48,
    norm_topk_prob=False,
    tie_word_embeddings=False,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
)
CASES["qwen3_moe"] = dict(
    model_type="qwen3_moe",
    head_dim=32,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    norm_topk_prob=True,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    legacy="qwen",
)
CASES["mixtral"] = dict(
    model_type="mixtral",
    num_local_experts=6,
    num_experts_per_tok=2,
    intermediate_size=56,
    tie_word_embeddings=False,
    rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    legacy="mixtral",
)

PROMPT = [(7 * i + 3) % 128 for i in range(12)]
NEW_TOKENS = 10


def expert_parts(name, shape, legacy):
    """The hub's per-expert tensors (name and shape) a fused expert tensor of transformers 5
    holds, in the order their rows are stacked (gates before ups), or None for another
    tensor. Mixtral also names its router `block_sparse_moe.gate`."""
    layer, _, tail = name.rpartition(".mlp.")
    if legacy == "mixtral" and tail == "gate.weight":
        return [(f"{layer}.block_sparse_moe.gate.weight", shape)]
    projections = {
        "experts.gate_up_proj": ["gate_proj", "up_proj"],
        "experts.down_proj": ["down_proj"],
    }.get(tail)
    if projections is None:
        return None
    mixtral = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
    experts, rows, cols = shape
    rows //= len(projections)
    parts = []
    for e in range(experts):
        for p in projections:
            if legacy == "mixtral":
                parts.append((f"{layer}.block_sparse_moe.experts.{e}.{mixtral[p]}.weight", (rows, cols)))
            else:
                parts.append((f"{layer}.mlp.experts.{e}.{p}.weight", (rows, cols)))
    return parts


def reference_case(model, config, gemma, legacy=None):
    """A case of the output: `model`'s weights set by the formula (those save_pretrained
    stores: a tied output projection once, as the embeddings), then its config, tensors,
    logits of PROMPT and NEW_TOKENS greedy tokens after it. With `legacy`, the tensors are
    listed as the hub stores the experts, each part set by the formula under its own name."""
    state = {
        name: t
        for name, t in model.state_dict().items()
        if not (config.tie_word_embeddings and name == "lm_head.weight")
    }
    tensors = []
    with torch.no_grad():
        for name, tensor in state.items():
            shape = tuple(tensor.shape)
            parts = expert_parts(name, shape, legacy) if legacy else None
            if parts is None:
                tensor.copy_(torch.from_numpy(formula(name, shape, gemma)))
                tensors.append([name, list(shape)])
                continue
            values = [formula(n, s, gemma) for n, s in parts]
            tensor.copy_(torch.from_numpy(np.concatenate(values).reshape(shape)))
            tensors.extend([n, list(s)] for n, s in parts)
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
        # The smallest lead of a greedy choice over the runner-up: how far logits may
        # stray before another token would be chosen.
        margin = min(
            float(top[0] - top[1])
            for top in (step[0].topk(2).values for step in run.logits)
        )
    return {
        "config_json": config.to_json_string(),
        "tensors": tensors,
        "logits": [[float(v) for v in row] for row in logits],
        "greedy": greedy,
        "greedy_margin": margin,
    }


def main():
    torch.manual_seed(0)
    out = {
        "made_by": "scripts/tiny_decoders.py",
        "versions": {p: version(p) for p in ("torch", "transformers")},
        "prompt": PROMPT,
        "cases": {},
    }
    for label, extra in CASES.items():
        kw = dict(COMMON)
        kw.update(extra)
        model_type = kw.pop("model_type")
        legacy = kw.pop("legacy", None)
        config = AutoConfig.for_model(model_type, **kw)
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
        if config.tie_word_embeddings:
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        gemma = model_type.startswith("gemma")
        out["cases"][label] = reference_case(model, config, gemma, legacy)
    json.dump(out, fp=__import__("sys").stdout)
    print()


if __name__ == "__main__":
    main()

"""Speed of transformers' Gated DeltaNet recurrence (Qwen3-Next's
`torch_chunk_gated_delta_rule`, and `torch_recurrent_gated_delta_rule` for one decoding
step), for `examples/bench/delta_bench.rs`: the same shapes (one layer's 32 value heads,
keys and values 128 wide), float32, the same phases and output format.

    python bench/gated_delta_bench.py [--threads 2] [--reps 5] [--steps 128,512]
        [--heads 32] [--width 128] [--device cpu|cuda]

`forward`: outputs and final state of a prompt from a given state (queries and keys
already unit, as RLX's rule receives them, so no normalization is timed on either side).
`backward`: the same and the gradients of every operand of `sum(out * r) + sum(state * r')`
through autograd. `decode`: one step from a state. Medians of `--reps` after a warm-up.
Without flash-linear-attention's kernels transformers runs these PyTorch paths.
"""
import argparse
import statistics
import time

import torch
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next


def undecorated(f):
    return getattr(f, "__wrapped__", f)


CHUNK = undecorated(qwen3_next.torch_chunk_gated_delta_rule)
RECURRENT = undecorated(qwen3_next.torch_recurrent_gated_delta_rule)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", default="128,512")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    h, w = args.heads, args.width

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def operands(t, grad):
        unit = lambda: torch.nn.functional.normalize(torch.randn(1, t, h, w, device=device), dim=-1)
        x = dict(
            # transformers scales queries by 1/sqrt(K) itself: undo it, as RLX's rule takes
            # the queries as given.
            q=unit() * w**0.5,
            k=unit(),
            v=torch.rand(1, t, h, w, device=device) * 2 - 1,
            g=-(torch.rand(1, t, h, device=device) * 0.49 + 0.01),
            beta=torch.rand(1, t, h, device=device) * 0.9 + 0.05,
            initial_state=(torch.rand(1, h, w, w, device=device) * 0.2 - 0.1),
        )
        if grad:
            for name in ("q", "k", "v", "g", "beta"):
                x[name].requires_grad_(True)
        return x

    def timed(f):
        f()
        sync()
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            f()
            sync()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times)

    def call(rule, x):
        return rule(x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"],
                    initial_state=x["initial_state"], output_final_state=True,
                    use_qk_l2norm_in_kernel=False)

    for t in [int(s) for s in args.steps.split(",")]:
        x = operands(t, False)
        with torch.no_grad():
            ms = timed(lambda: call(CHUNK, x))
        print(f"delta_bench engine=transformers backend={args.device} steps={t} phase=forward ms={ms:.3f}")
        x = operands(t, True)
        r_out = torch.rand(1, t, h, w, device=device)
        r_state = torch.rand(1, h, w, w, device=device)

        def train():
            out, state = call(CHUNK, x)
            ((out * r_out).sum() + (state * r_state).sum()).backward()

        ms = timed(train)
        print(f"delta_bench engine=transformers backend={args.device} steps={t} phase=backward ms={ms:.3f}")
    x = operands(1, False)
    with torch.no_grad():
        ms = timed(lambda: call(RECURRENT, x))
    print(f"delta_bench engine=transformers backend={args.device} steps=1 phase=decode ms={ms:.3f}")


if __name__ == "__main__":
    main()

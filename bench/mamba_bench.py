"""Speed of transformers' MambaForCausalLM on the CPU, for `examples/bench/mamba_bench.rs`:
the same config (the size of state-spaces/mamba-130m-hf), float32, randomly initialized
(the time of a step does not depend on the values), the same phases and output format.

    python bench/mamba_bench.py [--threads 2] [--reps 3] [--contexts 128,2048] [--new 32]
        [--device cpu|cuda]

Prefill: one forward pass over the prompt with a fresh cache. Decode: `--new` steps of
one token after a context of each length (prefilled in one pass), each feeding the argmax
of the step before, through the model's own cache (transformers' recurrent path: the conv
and scan states carried, as RLX's decode carries them). Medians of `--reps` after a
warm-up. Without the CUDA kernels (`mamba_ssm`, `causal_conv1d`) transformers runs its
reference PyTorch path on the CPU, as here.
"""
import argparse
import statistics
import time

import torch
from transformers import MambaConfig, MambaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--contexts", default="128,2048")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = MambaConfig(
        hidden_size=768,
        num_hidden_layers=args.layers,
        vocab_size=50280,
        state_size=16,
        expand=2,
        conv_kernel=4,
    )
    device = torch.device(args.device)
    model = MambaForCausalLM(config).to(device=device, dtype=torch.float32).eval()

    def ids(n):
        return torch.tensor([[(i * 7919 + 13) % 50000 for i in range(n)]], device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with torch.inference_mode():
        for prompt in (128, 512):
            times = []
            for rep in range(args.reps + 1):
                sync()
                start = time.perf_counter()
                model(ids(prompt), use_cache=True, logits_to_keep=1)
                sync()
                if rep > 0:
                    times.append(time.perf_counter() - start)
            tok_s = prompt / statistics.median(times)
            print(f"mamba_bench engine=transformers backend={args.device} prompt={prompt} phase=prefill tok_s={tok_s:.1f}")
        for context in (int(c) for c in args.contexts.split(",")):
            times = []
            for rep in range(args.reps + 1):
                out = model(ids(context), use_cache=True, logits_to_keep=1)
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                sync()
                start = time.perf_counter()
                for i in range(args.new):
                    position = torch.tensor([context + i], device=device)
                    # The cache's keyword is `cache` in transformers 5.2x, `cache_params` before.
                    name = next(
                        n for n in ("cache", "cache_params") if getattr(out, n, None) is not None
                    )
                    kwargs = {name: getattr(out, name)}
                    out = model(nxt, use_cache=True, cache_position=position, **kwargs)
                    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
                sync()
                if rep > 0:
                    times.append(time.perf_counter() - start)
            tok_s = args.new / statistics.median(times)
            print(f"mamba_bench engine=transformers backend={args.device} context={context} phase=decode tok_s={tok_s:.1f}")


if __name__ == "__main__":
    main()

"""MLX-LM's batched generation, timed as RLX's `generate_bench` times its batch of 8: eight
prompts of 128 tokens (each a different slice of one text, so the rows differ), greedy, 128
new tokens a row, end-of-sequence ignored; the figure is MLX-LM's own generation rate over
the whole batch (`batch_generate`'s `generation_tps`: tokens of every row after the first
one each, over their time). One warm-up, then the median of `--reps`.

    python bench/mlx_lm_batch_generate.py --model NAME=HF_DIR [--model ...] [--batch 8]
        [--prompt 128] [--new 128] [--reps 3]

HF_DIR is a Hugging Face folder (../shared/bench/gpu_generate/to_hf.py makes one from the
GGUF; `mlx_lm convert -q --q-bits 4` a 4-bit one). Prints one line per model:
`generate_bench engine=mlx-lm model=NAME batch=B prompt=P phase=decode new=N tok_s=T`.
Needs mlx (CUDA or Metal) and mlx-lm.
"""
import argparse
import statistics

import mlx.core as mx
from mlx_lm import batch_generate, load

TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the winter "
    "of despair, we had everything before us, we had nothing before us, we were all going direct "
    "to Heaven, we were all going direct the other way. "
)


def prompts(tokenizer, batch, length):
    """`batch` prompts of `length` ids, row r starting r * 7 tokens into the repeated text."""
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    stream = ids * ((batch * 7 + length) // len(ids) + 1)
    return [stream[r * 7 : r * 7 + length] for r in range(batch)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    for spec in a.model:
        name, path = spec.split("=", 1)
        model, tokenizer = load(path)
        tokenizer.eos_token_ids = []  # every row makes all its tokens
        rows = prompts(tokenizer, a.batch, a.prompt)
        rates = []
        for rep in range(a.reps + 1):
            response = batch_generate(model, tokenizer, rows, max_tokens=a.new)
            if rep > 0:
                rates.append(response.stats.generation_tps)
        print(
            f"generate_bench engine=mlx-lm model={name} batch={a.batch} prompt={a.prompt} "
            f"phase=decode new={a.new} tok_s={statistics.median(rates):.1f} "
            f"all={[round(r, 1) for r in rates]} device={mx.default_device()}",
            flush=True,
        )


if __name__ == "__main__":
    main()

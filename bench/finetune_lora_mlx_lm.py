"""MLX-LM counterpart of examples/10_finetune_lora.rs: the same task and lists
(bench/reverse_words.py), SmolLM2-135M-Instruct as a Hugging Face folder (made from the same
GGUF by ../shared/bench/gpu_generate/to_hf.py), rank-8 adapters with scale 2 (alpha 16), no
dropout, on every projection of every layer, AdamW (lr 1e-3, weight decay 0.01 as PyTorch's
default), batches of 8 conversations with the prompt masked, trained by MLX-LM's own trainer
(`mlx_lm.tuner.trainer.train`, which pads each batch to one plus a multiple of 32).

    python bench/finetune_lora_mlx_lm.py --model HF_DIR [--dtype f32|bf16] [--steps 150]
        [--eval 100] [--batch 8] [--seed 2026]

Prints the held-out exact match (greedy) before and after, and training throughput from
MLX-LM's reports after the first (warm-up) window of 10 steps: padded tokens per second
(batch x padded width, what the tutorial's `tok_s` counts), MLX-LM's own `Tokens/sec`
(labelled tokens), steps per second and peak memory. Last line:
`finetune backend=mlx-lm dtype=D steps=S before=A0 after=A1 tok_s=T labelled_tok_s=L steps_s=R peak_gb=M`.
Needs mlx (CUDA or Metal), mlx-lm and transformers.
"""
import argparse
import tempfile

import mlx.core as mx
import mlx.optimizers as optim
from mlx_lm import generate, load
from mlx_lm.sample_utils import make_sampler
from mlx_lm.tuner.datasets import CacheDataset, ChatDataset
from mlx_lm.tuner.trainer import TrainingArgs, TrainingCallback, iterate_batches, train
from mlx_lm.tuner.utils import linear_to_lora_layers

from reverse_words import Rng, held_out, training_batch

PROJECTIONS = [
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--eval", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    model, tok = load(args.model)
    model.set_dtype(mx.float32 if args.dtype == "f32" else mx.bfloat16)
    greedy = make_sampler(temp=0.0)

    def accuracy(examples):
        model.eval()
        right = 0
        for question, answer in examples:
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True
            )
            said = generate(model, tok, prompt=prompt, max_tokens=16, sampler=greedy)
            right += said.strip() == answer
        return right / len(examples)

    rng = Rng(args.seed)
    held = held_out(rng, args.eval)
    before = accuracy(held)

    model.freeze()
    lora = {"rank": 8, "scale": 2.0, "dropout": 0.0, "keys": PROJECTIONS}
    linear_to_lora_layers(model, len(model.layers), lora)
    rows = []
    for _ in range(args.steps):
        rows += training_batch(rng, held, args.batch)
    data = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in rows
    ]
    dataset = CacheDataset(ChatDataset(data, tok, mask_prompt=True))

    padded = []

    def counted(dataset, batch_size, max_seq_length, loop=False, seed=None, comm_group=None):
        for batch, lengths in iterate_batches(
            dataset, batch_size, max_seq_length, loop=loop, seed=seed, comm_group=comm_group
        ):
            padded.append(batch.shape[0] * (batch.shape[1] - 1))
            yield batch, lengths

    reports = []

    class Reports(TrainingCallback):
        def on_train_loss_report(self, info):
            reports.append(info)
            print(
                f"step {info['iteration']} loss {info['train_loss']:.4f} "
                f"steps_s {info['iterations_per_second']:.2f}",
                flush=True,
            )

    with tempfile.TemporaryDirectory() as out:
        train(
            model,
            optim.AdamW(learning_rate=1e-3, weight_decay=0.01),
            dataset,
            None,
            TrainingArgs(
                batch_size=args.batch,
                iters=args.steps,
                steps_per_report=10,
                steps_per_eval=10**9,
                steps_per_save=10**9,
                adapter_file=f"{out}/adapters.safetensors",
            ),
            iterate_batches=counted,
            training_callback=Reports(),
        )
    after = accuracy(held)

    # Windows of 10 steps after the first: their time from MLX-LM's steps per second.
    seconds = tokens = labelled = steps = 0.0
    for k, info in enumerate(reports[1:], start=1):
        window = info["iteration"] - reports[k - 1]["iteration"]
        time = window / info["iterations_per_second"]
        seconds += time
        steps += window
        tokens += sum(padded[reports[k - 1]["iteration"] : info["iteration"]])
        labelled += info["tokens_per_second"] * time
    peak = max(info["peak_memory"] for info in reports)
    print(
        f"finetune backend=mlx-lm dtype={args.dtype} steps={args.steps} before={before:.3f} "
        f"after={after:.3f} tok_s={tokens / seconds:.1f} labelled_tok_s={labelled / seconds:.1f} "
        f"steps_s={steps / seconds:.2f} peak_gb={peak:.2f}"
    )


if __name__ == "__main__":
    main()

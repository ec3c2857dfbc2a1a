"""PyTorch + PEFT counterpart of examples/10_finetune_lora.rs: the same task (reversing lists
of 3 to 5 words, drawn by the same SplitMix64 sequence from the same words), the same model
(SmolLM2-135M-Instruct from the same GGUF file, dequantized to float32 by transformers),
the same adapters (rank 8, alpha 16, no dropout, on every projection), AdamW at 1e-3,
batches of 8 padded to a multiple of 8 with the answer's tokens labelled. Prints the held-out
exact match before and after, and training tokens per second (padded, after the first step).

    python bench/finetune_lora_bench.py PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf \
        [--steps 150] [--eval 100] [--threads 2] [--device cpu|cuda]

Last line: `finetune backend=torch steps=S before=A0 after=A1 tok_s=T steps_s=R`.
Needs torch, transformers, peft and gguf.
"""
import argparse
import os
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from reverse_words import Rng, held_out, training_batch

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--eval", type=int, default=100)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    folder, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.to(args.device)
    end = tok.convert_tokens_to_ids("<|im_end|>")

    def tokenize(question, answer):
        text = tok.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
        prompt = tok(text, add_special_tokens=False).input_ids
        return prompt, tok(answer, add_special_tokens=False).input_ids + [end]

    def batch(examples):
        rows = [tokenize(q, a) for q, a in examples]
        width = -(-max(len(p) + len(a) for p, a in rows) // 8) * 8
        ids, labels = [], []
        for p, a in rows:
            t = p + a
            ids.append([t[i] if i < len(t) else end for i in range(width)])
            labels.append(
                [t[i + 1] if len(p) <= i + 1 < len(t) else -100 for i in range(width)]
            )
        return torch.tensor(ids), torch.tensor(labels)

    def accuracy(examples):
        model.eval()
        right = 0
        with torch.no_grad():
            for q, a in examples:
                p, ans = tokenize(q, a)
                out = model.generate(
                    torch.tensor([p], device=args.device),
                    max_new_tokens=len(ans) + 4,
                    do_sample=False,
                    eos_token_id=end,
                    pad_token_id=end,
                )
                said = tok.decode(out[0, len(p):], skip_special_tokens=True)
                right += said.strip() == a
        model.train()
        return right / len(examples)

    rng = Rng(args.seed)
    held = held_out(rng, args.eval)
    before = accuracy(held)

    config = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, config)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tokens, seconds = 0, 0.0
    for step in range(1, args.steps + 1):
        ids, labels = batch(training_batch(rng, held, args.batch))
        ids, labels = ids.to(args.device), labels.to(args.device)
        if args.device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100
        )
        loss.backward()
        opt.step()
        opt.zero_grad()
        if args.device == "cuda":
            torch.cuda.synchronize()
        if step > 1:
            seconds += time.perf_counter() - start
            tokens += ids.numel()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    after = accuracy(held)
    print(
        f"finetune backend=torch steps={args.steps} before={before:.3f} after={after:.3f} "
        f"tok_s={tokens / seconds if seconds else 0:.1f} "
        f"steps_s={(args.steps - 1) / seconds if seconds else 0:.2f}"
    )


if __name__ == "__main__":
    main()

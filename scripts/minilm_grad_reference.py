#!/usr/bin/env python3
"""Writes tests/data/minilm_grads.json: PyTorch autograd's gradients of a scalar loss on
all-MiniLM-L6-v2's sentence embeddings, for tests/minilm_grad.rs.

The batch is the first four sentences of tests/data/minilm/public_reference.safetensors
(right-padded to the longest of them); the loss is sum(embeddings * R) with
R[i, j] = sin(0.1 * (i * 384 + j) + 0.3). For every weight the file keeps the gradient's
L2 norm, its largest magnitude and 32 entries at positions (k * 2654435761) mod numel, in
the checkpoint's layout. Run with a Python that has torch, transformers and safetensors
(e.g. the venv of ../shared/bench/setup.sh):

    python3 scripts/minilm_grad_reference.py MODEL_DIR
"""
import json, math, sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import BertModel

ROOT = Path(__file__).resolve().parent.parent

def main():
    model_dir = sys.argv[1]
    ref = load_file(str(ROOT / "tests/data/minilm/public_reference.safetensors"))
    lengths = ref["lengths"][:4]
    seq = int(lengths.max())
    ids = ref["input_ids"][:4, :seq]
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    torch.manual_seed(0)
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False).float().eval()
    hidden = model(input_ids=ids, attention_mask=mask,
                   token_type_ids=torch.zeros_like(ids)).last_hidden_state
    m = mask.to(hidden.dtype)
    mean = (hidden * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp_min(1e-9)
    emb = mean / mean.norm(dim=1, keepdim=True).clamp_min(1e-12)
    i = torch.arange(emb.shape[0])[:, None].double()
    j = torch.arange(emb.shape[1])[None, :].double()
    r = torch.sin(0.1 * (i * emb.shape[1] + j) + 0.3).float()
    loss = (emb * r).sum()
    loss.backward()
    out = {"seq": seq, "loss": loss.item(), "grads": {}}
    for name, p in model.named_parameters():
        g = p.grad.detach().flatten().double()
        n = g.numel()
        idx = [(k * 2654435761) % n for k in range(32)]
        out["grads"][name] = {
            "shape": list(p.shape),
            "norm": g.norm().item(),
            "max_abs": g.abs().max().item(),
            "samples": [[k, g[k].item()] for k in idx],
        }
    path = ROOT / "tests/data/minilm_grads.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}: loss {loss.item():.6f}, {len(out['grads'])} weights")

if __name__ == "__main__":
    main()

"""PEFT references for tests/lora.rs: the tiny Llama of scripts/tiny_decoders.py (weights
from its formula) with LoRA adapters, what Hugging Face PEFT saves and what it computes.

    python scripts/tiny_lora.py tests/data/llm/tiny_lora_rlx > tests/data/llm/tiny_lora.json

`peft_saved`: an adapter made by PEFT (rank 4, alpha 8, on q/v/o/down), its factors set by
the same formula under the names PEFT saves them with; the `adapter_config.json` text PEFT
writes, the tensor names and shapes of its `adapter_model.safetensors`, and the logits of
the prompt with the adapter on. `rlx_saved`: the logits PEFT computes with the adapter RLX
saved in the folder given as the argument (`LoraAdapter::save_peft`, written by
`RLX_UPDATE_LORA_FIXTURE=1 cargo test --test lora`). Needs torch, transformers and peft
(the versions are recorded in the output).
"""
import json
import os
import sys
import tempfile
from importlib.metadata import version

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_decoders import CASES, COMMON, PROMPT, formula  # noqa: E402

PEFT_CASE = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"])


def base_model():
    kw = dict(COMMON)
    kw.update(CASES["llama"])
    model_type = kw.pop("model_type")
    config = AutoConfig.for_model(model_type, **kw)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            tensor.copy_(torch.from_numpy(formula(name, tuple(tensor.shape), False)))
    return model


def logits(model):
    with torch.no_grad():
        rows = model(torch.tensor([PROMPT])).logits[0].float().numpy()
    return [[float(v) for v in row] for row in rows]


def main():
    out = {
        "made_by": "scripts/tiny_lora.py",
        "versions": {p: version(p) for p in ("torch", "transformers", "peft")},
        "prompt": PROMPT,
    }
    model = get_peft_model(
        base_model(), LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, **PEFT_CASE)
    )
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if "lora_" in name:
                saved = name.replace(".default", "")
                tensor.copy_(torch.from_numpy(formula(saved, tuple(tensor.shape), False)))
    model.eval()
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        with open(os.path.join(d, "adapter_config.json")) as f:
            config_text = f.read()
        with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
            tensors = [[k, list(f.get_tensor(k).shape)] for k in f.keys()]
    out["peft_saved"] = {
        "adapter_config": config_text,
        "tensors": tensors,
        "logits": logits(model),
    }
    if len(sys.argv) > 1:
        loaded = PeftModel.from_pretrained(base_model(), sys.argv[1]).eval()
        out["rlx_saved"] = {"logits": logits(loaded)}
    json.dump(out, fp=sys.stdout)
    print()


if __name__ == "__main__":
    main()

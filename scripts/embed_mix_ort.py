#!/usr/bin/env python3
"""ONNX Runtime on the sentence mix of `examples/bench/embed_bench.rs`, for comparison.

The 16 public reference sentences repeated to 512, tokenized with the model's tokenizer.json
(truncation at 256), in their given order in batches of 32, each right-padded to its longest
sentence; the encoder (last_hidden_state) runs on every batch, then masked mean pooling and L2
normalisation in numpy. ORT settings as ../shared/bench/minilm_bench.py (ORT_ENABLE_ALL, 2
intra-op threads, sequential). Prints the median of at least 5 passes and 3 s:
  embed_mix backend=ort mode=padded sentences=512 batch=32 ms=... sent_per_s=...
Needs the venv and model made by ../shared/bench/setup.sh (RLX_BENCH_HOME, default
~/.cache/rlx-bench); run it with that venv's python.
"""
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

HOME = Path(os.environ.get("RLX_BENCH_HOME") or Path.home() / ".cache" / "rlx-bench")
HERE = Path(__file__).resolve().parent
TOTAL, BATCH = 512, 32

sentences = json.loads((HERE.parent / "tests/data/minilm/public_sentences.json").read_text())
mix = [sentences[i % len(sentences)] for i in range(TOTAL)]
tok = Tokenizer.from_file(str(HOME / "model" / "tokenizer.json"))
tok.no_padding()
tok.enable_truncation(256)

so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = 2
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
sess = ort.InferenceSession(str(HOME / "onnx" / "all-minilm-l6-v2.onnx"), so,
                            providers=["CPUExecutionProvider"])


def one_pass():
    out = []
    for start in range(0, TOTAL, BATCH):
        enc = tok.encode_batch(mix[start:start + BATCH])
        seq = max(len(e.ids) for e in enc)
        ids = np.zeros((len(enc), seq), np.int64)
        mask = np.zeros_like(ids)
        for r, e in enumerate(enc):
            ids[r, :len(e.ids)] = e.ids
            mask[r, :len(e.ids)] = 1
        hidden = sess.run(None, {"input_ids": ids, "attention_mask": mask,
                                 "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[..., None].astype(np.float32)
        mean = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        out.append(mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12))
    return np.concatenate(out)


one_pass()
times, started = [], time.perf_counter()
while len(times) < 5 or time.perf_counter() - started < 3.0:
    t = time.perf_counter()
    one_pass()
    times.append((time.perf_counter() - t) * 1e3)
ms = statistics.median(times)
print(f"embed_mix backend=ort mode=padded sentences={TOTAL} batch={BATCH} ms={ms:.1f} "
      f"sent_per_s={TOTAL * 1e3 / ms:.1f}")

#!/usr/bin/env python3
"""ONNX Runtime beside `examples/bench/concurrent_bench.rs`: MiniLM runs per second with one
session on two intra-op threads called from one thread, and with one session on one
intra-op thread called from two threads at once (ORT releases the GIL inside `run`).

Uses the model and ONNX graph of ../shared/bench (setup.sh); run it with that venv's python:
    ~/.cache/rlx-bench/venv/bin/python bench/concurrent_ort.py [--shapes 1x16,1x128,8x128] [--seconds 3]
Prints per shape the line the Rust example prints, with engine=ort.
"""
import argparse
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

HOME = Path(os.environ.get("RLX_BENCH_HOME") or Path.home() / ".cache" / "rlx-bench")


def session(threads):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(HOME / "onnx" / "all-minilm-l6-v2.onnx"), so,
                                providers=["CPUExecutionProvider"])


def throughput(sess, feed, callers, seconds):
    for _ in range(2):
        sess.run(None, feed)
    counts = [0] * callers
    start = time.perf_counter()

    def loop(i):
        while time.perf_counter() - start < seconds:
            sess.run(None, feed)
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="1x16,1x128,8x128")
    p.add_argument("--seconds", type=float, default=3.0)
    a = p.parse_args()
    vocab = json.loads((HOME / "model" / "config.json").read_text())["vocab_size"]
    two_threads, one_thread = session(2), session(1)
    for shape in a.shapes.split(","):
        b, s = map(int, shape.split("x"))
        ids = np.random.default_rng(0).integers(1000, vocab, size=(b, s), dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids)}
        one = throughput(two_threads, feed, 1, a.seconds)
        two = throughput(one_thread, feed, 2, a.seconds)
        print(f"concurrent engine=ort batch={b} seq={s} one_run_2_threads_per_s={one:.2f} "
              f"two_runs_1_thread_per_s={two:.2f} ratio={two / one:.2f}", flush=True)


if __name__ == "__main__":
    main()

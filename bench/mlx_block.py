#!/usr/bin/env python3
"""One BERT-style encoder block through MLX's own Python API, to compare with RLX's MLX
backend (`cargo run --release --example mlx_block_bench`) on the same machine.

Setup (once):  python3 -m venv VENV && VENV/bin/pip install mlx==0.32.4 mlx-cpu==0.32.4
Run:           VENV/bin/python bench/mlx_block.py [--batch 8] [--seq 128] [--runs 10]

On Linux, put Debian's OpenBLAS in front of the reference BLAS bundled with the wheel, as
RLX's build does:  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0

Prints `mlx_block impl=python-mlx-DEVICE mode=M io=IO batch=B seq=S ms=MEDIAN` for plain
and mx.compile'd calls, median of --runs timed calls after 3 warm-up calls. With io=device
the input is an MLX array made beforehand and the output is evaluated, not read; with
io=host each call makes the input from a numpy array and reads the output back into one
(what `Executable::run` does).
"""

import argparse
import math
import statistics
import time

import mlx.core as mx
import numpy as np

HIDDEN, HEADS, FFN, EPS = 384, 12, 1536, 1e-12


def weights(seed):
    mx.random.seed(seed)
    w = {}
    for name, shape in [
        ("q", (HIDDEN, HIDDEN)), ("k", (HIDDEN, HIDDEN)), ("v", (HIDDEN, HIDDEN)),
        ("o", (HIDDEN, HIDDEN)), ("up", (HIDDEN, FFN)), ("down", (FFN, HIDDEN)),
    ]:
        w[name] = mx.random.normal(shape) * 0.05
        w[name + "_b"] = mx.random.normal((shape[1],)) * 0.05
    for norm in ("ln1", "ln2"):
        w[norm] = mx.ones((HIDDEN,))
        w[norm + "_b"] = mx.zeros((HIDDEN,))
    return w


def block(w, x):
    b, s, _ = x.shape
    d = HIDDEN // HEADS

    def heads(t):
        return t.reshape(b, s, HEADS, d).transpose(0, 2, 1, 3)

    q = heads(x @ w["q"] + w["q_b"])
    k = heads(x @ w["k"] + w["k_b"])
    v = heads(x @ w["v"] + w["v_b"])
    a = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(d))
    a = a.transpose(0, 2, 1, 3).reshape(b, s, HIDDEN)
    h = mx.fast.layer_norm(x + a @ w["o"] + w["o_b"], w["ln1"], w["ln1_b"], EPS)
    u = h @ w["up"] + w["up_b"]
    u = 0.5 * u * (1.0 + mx.erf(u / math.sqrt(2.0)))
    return mx.fast.layer_norm(h + u @ w["down"] + w["down_b"], w["ln2"], w["ln2_b"], EPS)


def timed(call, runs):
    for _ in range(3):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    w = weights(0)
    mx.eval(w)
    x = mx.random.normal((args.batch, args.seq, HIDDEN))
    mx.eval(x)
    plain = lambda t: block(w, t)
    compiled = mx.compile(plain)
    host = np.array(x)
    device = "gpu" if mx.default_device() == mx.gpu else "cpu"
    for mode, fn in [("lazy", plain), ("compiled", compiled)]:
        calls = [
            ("device", lambda: mx.eval(fn(x))),
            ("host", lambda: np.array(fn(mx.array(host)))),
        ]
        for io, call in calls:
            ms = timed(call, args.runs)
            print(
                f"mlx_block impl=python-mlx-{device} mode={mode} io={io} "
                f"batch={args.batch} seq={args.seq} ms={ms:.2f}"
            )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Load test for rlx-serve (or any OpenAI-compatible server): N clients stream chat
completions for T seconds, each request a fixed mix of prompt and answer lengths, and the
run reports requests/s, output tokens/s, time to first token and inter-token latency
(p50/p99), errors and incomplete streams; with --pid, the server's resident memory sampled
every few seconds (for soaks: it must not grow after warm-up).

    python3 rlx-serve/scripts/serve_load.py --url http://127.0.0.1:8080 --clients 16 --seconds 600 --pid PID

Only the standard library: one thread per client, raw HTTP/1.1 streams.
"""

import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse

PROMPTS = [
    ("What is the capital of France?", 16),
    ("Write a haiku about the sea.", 48),
    ("Explain in a few sentences why the sky is blue.", 96),
    ("List five fruits and one fact about each of them.", 128),
    ("Tell me a short story about a robot who learns to paint. " * 3, 64),
]


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.tokens = 0
        self.errors = []
        self.incomplete = 0
        self.ttft = []
        self.itl = []


def one_request(host, port, model, prompt, max_tokens, seed, stats):
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
    })
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=300)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"status {response.status}: {response.read()[:200]!r}")
        first, last, done, finish, usage, gaps = None, None, False, None, None, []
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"error event: {chunk['error']}")
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    now = time.perf_counter()
                    if first is None:
                        first = now - start
                    else:
                        gaps.append(now - last)
                    last = now
                finish = choice.get("finish_reason") or finish
        with stats.lock:
            stats.requests += 1
            if not done or finish is None or usage is None:
                stats.incomplete += 1
            else:
                stats.tokens += usage["completion_tokens"]
            if first is not None:
                stats.ttft.append(first)
            stats.itl.extend(gaps)
    except Exception as e:  # noqa: BLE001 - every failure is counted and shown
        with stats.lock:
            stats.errors.append(str(e)[:200])
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--model", default=None, help="the first of GET /v1/models if absent")
    parser.add_argument("--pid", type=int, default=None, help="the server's pid, for RSS")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    url = urllib.parse.urlparse(args.url)
    host, port = url.hostname, url.port or 80
    if args.model is None:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.request("GET", "/v1/models")
        args.model = json.loads(conn.getresponse().read())["data"][0]["id"]
    stats = Stats()
    end = time.perf_counter() + args.seconds
    rss = []

    def client(k):
        rng = random.Random(args.seed * 1000 + k)
        while time.perf_counter() < end:
            prompt, max_tokens = rng.choice(PROMPTS)
            one_request(host, port, args.model, prompt, max_tokens, rng.randrange(1 << 30), stats)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if args.pid is not None:
            rss.append((time.perf_counter() - start, rss_kib(args.pid)))
        time.sleep(5)
    elapsed = time.perf_counter() - start
    print(
        f"serve_load clients={args.clients} seconds={elapsed:.0f} requests={stats.requests} "
        f"errors={len(stats.errors)} incomplete={stats.incomplete} "
        f"req_s={stats.requests / elapsed:.2f} tok_s={stats.tokens / elapsed:.1f} "
        f"ttft_p50={percentile(stats.ttft, 0.5):.3f} ttft_p99={percentile(stats.ttft, 0.99):.3f} "
        f"itl_p50={percentile(stats.itl, 0.5):.4f} itl_p99={percentile(stats.itl, 0.99):.4f}"
    )
    for e in stats.errors[:5]:
        print("error:", e)
    if rss:
        samples = [r for _, r in rss if r is not None]
        warm = samples[len(samples) // 4:] or samples
        print(
            f"rss_kib first={samples[0]} after_warmup_min={min(warm)} "
            f"after_warmup_max={max(warm)} last={samples[-1]} samples={len(samples)}"
        )


if __name__ == "__main__":
    main()

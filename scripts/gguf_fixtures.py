#!/usr/bin/env python3
"""Reference dequantizations of GGUF block formats, made with llama.cpp's own Python package.

Writes tests/data/gguf/dequantize.json: for each format, a few blocks of random bytes (their
f16/bf16 scale fields set to random finite values) and the f32 values that `gguf` (PyPI
`gguf==0.19.0`, the package transformers reads GGUF files with) dequantizes them to, as bit
patterns. `tests/gguf.rs` checks RLX's dequantization against them bit for bit.

Usage: python3 -m pip install gguf==0.19.0 numpy && python3 scripts/gguf_fixtures.py
"""
import json
from pathlib import Path

import numpy as np
import gguf
from gguf.quants import dequantize

T = gguf.GGMLQuantizationType
# Byte offsets of each format's f16 scale fields inside one block.
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
BLOCKS = 3


def blocks(rng, qtype):
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = bytearray(rng.integers(0, 256, size * BLOCKS, dtype=np.uint8).tobytes())
    for b in range(BLOCKS):
        for at in SCALE_FIELDS[qtype]:
            scale = np.float16(rng.uniform(-2.0, 2.0) if at == SCALE_FIELDS[qtype][0] else rng.uniform(0.0, 1.0))
            raw[b * size + at:b * size + at + 2] = scale.tobytes()
    return bytes(raw)


def main():
    rng = np.random.default_rng(20261127)
    out = {"source": f"gguf {gguf.__version__ if hasattr(gguf, '__version__') else '0.19.0'}, numpy {np.__version__}"}
    formats = {}
    for qtype in SCALE_FIELDS:
        data = blocks(rng, qtype)
        values = dequantize(np.frombuffer(data, dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
        formats[qtype.name] = {"bytes": data.hex(), "values": [int(v) for v in values.view(np.uint32)]}
    # Plain floats: f16 and bf16 bit patterns of random values, specials included.
    halves = np.concatenate([rng.normal(0, 100, 60).astype(np.float16),
                             np.array([0.0, -0.0, np.inf, -np.inf, 6.0e-8, 65504], dtype=np.float16)])
    formats["F16"] = {"bytes": halves.tobytes().hex(),
                      "values": [int(v) for v in halves.astype(np.float32).view(np.uint32)]}
    wide = rng.normal(0, 1e3, 64).astype(np.float32)
    bf16 = (wide.view(np.uint32) >> 16).astype(np.uint16)
    formats["BF16"] = {"bytes": bf16.tobytes().hex(),
                       "values": [int(v) for v in dequantize(bf16.view(np.uint8), T.BF16).astype(np.float32).view(np.uint32)]}
    out["formats"] = formats
    path = Path(__file__).resolve().parent.parent / "tests" / "data" / "gguf" / "dequantize.json"
    path.write_text(json.dumps(out, indent=0) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

"""Checks and times the fused GPU attention kernels (rlx-mlx-sys/cpp/attention.cu) without Rust.

On a machine with an NVIDIA GPU, CuPy and PyTorch, from the repository root:

    python3 scripts/attention_kernel_check.py

compiles the kernel source with NVRTC (through CuPy) behind a small wrapper and checks each kernel
against a float64 PyTorch reference (masks, grouped heads, Dv != Dk, Sq != Sk, windows, NaN rows;
exits 1 on a mismatch): "simt" (a thread per query row on the FP32 units), "mma3" (tensor cores,
3xTF32, float32 accuracy) and "mma1" (tensor cores, TF32, as under Precision::Tf32, with a TF32
bound). Then it times them beside PyTorch's fused float32 attention and an unfused
GEMM-softmax-GEMM at MiniLM's shape [B, 12, 128, 32]. This is how the kernels were developed:
one GPU call per change, before building the shim.
"""
import math
import sys

import cupy as cp
import torch

src = open("rlx-mlx-sys/cpp/attention.cu").read()
MASKS = {"none": 0, "causal": 1, "window": 2, "array": 3}
_mods = {}
# Kernels: "simt" (rlx_attention_f32, one thread a row), "mma3" (tensor cores, 3xTF32: float32
# accuracy), "mma1" (tensor cores, one TF32 product: Precision::Tf32).
VARIANT = "simt"
def kernel(dk, dv, bq, bk, mask, window, mt, variant):
    key = (dk, dv, bq, bk, mask, window, mt, variant)
    if key not in _mods:
        name = "attn_%d_%d_%d_%d_%d_%d_%s_%s" % (dk, dv, bq, bk, mask, window, mt, variant)
        if variant == "simt":
            call = "rlx_attention_f32<%d, %d, %d, %d, %d, %d, %s>" % (dk, dv, bq, bk, mask, window, mt)
        else:
            call = "rlx_attention_mma<%d, %d, %d, %d, %s, %s>" % (dk, dv, mask, window, mt, "true" if variant == "mma3" else "false")
        w = src + """
extern "C" __global__ void BOUNDS %s(const float* q, const float* k, const float* v, const %s* m, const float* sc,
  int hq, int hk, int sq, int sk, long long qb, long long qh, long long qs, long long qd, long long kb, long long kh, long long ks, long long kd,
  long long vb, long long vh, long long vs, long long vd, long long mb, long long mh, long long mi, long long mj, float* out) {
  rlx_attention::%s(q, k, v, m, sc, hq, hk, sq, sk, qb, qh, qs, qd, kb, kh, ks, kd, vb, vh, vs, vd, mb, mh, mi, mj, out);
}
""".replace("BOUNDS", "" if variant == "simt" else "__launch_bounds__(128, 4)") % (name, mt, call)
        _mods[key] = cp.RawModule(code=w, options=("-std=c++17",)).get_function(name)
    return _mods[key]

def run(q, k, v, scale, mask_kind="none", mask=None, window=0, bq=None, bk=64, variant=None):
    """The kernel on torch [B, H, S, D] views (any strides); returns [B, Sq, H, Dv]."""
    variant = variant or VARIANT
    B, hq, sq, dk = q.shape; hk, sk, dv = k.shape[1], k.shape[2], v.shape[3]
    if variant != "simt":
        bq, bk = 64, 64  # four warps of 16 rows; the block has 128 threads
    bq = bq or (64 if sq <= 64 else 128)
    out = torch.empty(B, sq, hq, dv, device="cuda", dtype=torch.float32)
    if mask is None:
        m = torch.zeros(1, 1, 1, 1, dtype=torch.bool, device="cuda"); mt = "bool"
    else:
        m = mask; mt = "bool" if mask.dtype == torch.bool else "float"
    ms = [0 if m.shape[i] == 1 else m.stride(i) for i in range(4)]
    sc = torch.tensor([scale], dtype=torch.float32, device="cuda")
    f = kernel(dk, dv, bq, bk, MASKS[mask_kind], window, mt, variant)
    threads = bq if variant == "simt" else 128
    ptr = lambda t: cp.uint64(t.data_ptr())
    args = (ptr(q), ptr(k), ptr(v), ptr(m), ptr(sc), cp.int32(hq), cp.int32(hk), cp.int32(sq), cp.int32(sk),
            *[cp.int64(x) for x in (*q.stride(), *k.stride(), *v.stride(), *ms)], ptr(out))
    f(((sq + bq - 1) // bq, hq, B), (threads,), args)
    return out

def reference(q, k, v, scale, mask_kind="none", mask=None, window=0):
    q, k, v = q.double(), k.double(), v.double()
    hq, hk = q.shape[1], k.shape[1]
    k = k.repeat_interleave(hq // hk, 1); v = v.repeat_interleave(hq // hk, 1)
    s = q @ k.transpose(-1, -2) * scale
    sq, sk = s.shape[-2], s.shape[-1]
    i = torch.arange(sq, device="cuda")[:, None] + (sk - sq); j = torch.arange(sk, device="cuda")[None, :]
    vis = torch.ones_like(s, dtype=torch.bool)
    if mask_kind in ("causal", "window"): vis = vis & (j <= i)
    if mask_kind == "window": vis = vis & (j > i - window)
    if mask_kind == "array":
        if mask.dtype == torch.bool: vis = vis & mask
        else: s = s + mask.double(); vis = vis & (mask > -math.inf)
    s = s.masked_fill(~vis, -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    p = torch.where(vis.any(-1, keepdim=True), p, torch.zeros_like(p))
    return (p @ v).transpose(1, 2).float()

torch.manual_seed(0)
def heads(B, S, H, D):  # a [B,S,H,D] buffer seen as [B,H,S,D]
    return torch.randn(B, S, H, D, device="cuda").transpose(1, 2)
fails = 0
TOL = 2e-5
def check(name, got, want):
    global fails
    err = (got - want).abs().max().item()
    ok = err <= TOL * max(1.0, want.abs().max().item())
    fails += not ok
    print(f"check {name}: max err {err:.3e} {'ok' if ok else 'FAIL'}")

def checks(variant, tol):
    global VARIANT, TOL, fails
    VARIANT, TOL = variant, tol
    print("== kernel", variant)
    B, H, S, D = 4, 12, 128, 32
    q, k, v = heads(B, S, H, D), heads(B, S, H, D), heads(B, S, H, D)
    sc = 1 / math.sqrt(D)
    check(f"{variant} plain", run(q, k, v, sc), reference(q, k, v, sc))
    pad = torch.zeros(B, 1, 1, S, device="cuda"); pad[1, ..., 100:] = -math.inf; pad[2, ..., :] = -math.inf; pad[3, ..., 5:] = -1.5
    check(f"{variant} additive pad", run(q, k, v, sc, "array", pad), reference(q, k, v, sc, "array", pad))
    bm = torch.rand(B, H, S, S, device="cuda") > 0.3; bm[0, 0, 7] = False
    check(f"{variant} bool full", run(q, k, v, sc, "array", bm), reference(q, k, v, sc, "array", bm))
    check(f"{variant} causal", run(q, k, v, sc, "causal"), reference(q, k, v, sc, "causal"))
    q2 = heads(2, 70, 12, 64); k2 = heads(2, 150, 4, 64); v2 = heads(2, 150, 4, 24)
    check(f"{variant} gqa dk64 dv24 sq70 sk150 causal", run(q2, k2, v2, 0.2, "causal"), reference(q2, k2, v2, 0.2, "causal"))
    check(f"{variant} gqa window 9", run(q2, k2, v2, 0.2, "window", window=9), reference(q2, k2, v2, 0.2, "window", window=9))
    check(f"{variant} gqa plain", run(q2, k2, v2, 0.2), reference(q2, k2, v2, 0.2))
    check(f"{variant} gqa causal, 32-row blocks", run(q2, k2, v2, 0.2, "causal", bq=32), reference(q2, k2, v2, 0.2, "causal"))
    check(f"{variant} pad bool", run(q, k, v, sc, "array", pad == 0), reference(q, k, v, sc, "array", pad == 0))
    qn = q.clone(); qn[1, 3, 5, 0] = float("nan")
    got = run(qn, k, v, sc)
    print("check nan row:", bool(got[1, 5, 3].isnan().all()), "others finite:", bool(got[0].isfinite().all()))
    fails += not bool(got[1, 5, 3].isnan().all())

checks("simt", 2e-5)
checks("mma3", 2e-5)
checks("mma1", 2e-3)

def bench(f, n=50):
    for _ in range(5): f()
    torch.cuda.synchronize(); a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n): f()
    b.record(); torch.cuda.synchronize(); return a.elapsed_time(b) / n * 1000
torch.backends.cuda.matmul.allow_tf32 = False
B, H, S, D = 4, 12, 128, 32
sc = 1 / math.sqrt(D)
for B in (32, 256):
    q, k, v = heads(B, S, H, D), heads(B, S, H, D), heads(B, S, H, D)
    pad = torch.zeros(B, 1, 1, S, device="cuda"); pad[::3, ..., 90:] = -math.inf
    padb = pad == 0
    for variant in ("simt", "mma3", "mma1"):
        t = bench(lambda: run(q, k, v, sc, "array", padb, variant=variant))
        print(f"bench B={B} rlx {variant} bool pad: {t:.1f} us")
        t = bench(lambda: run(q, k, v, sc, "array", pad, variant=variant))
        print(f"bench B={B} rlx {variant} additive pad: {t:.1f} us")
    t = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=pad, scale=sc))
    print(f"bench B={B} torch sdpa f32 (strided, mask): {t:.1f} us")
    def unfused():
        s = q.contiguous() @ k.contiguous().transpose(-1, -2) * sc + pad
        return (torch.softmax(s, -1) @ v.contiguous()).transpose(1, 2).contiguous()
    print(f"bench B={B} torch unfused f32: {bench(unfused):.1f} us")
print("failures:", fails)
sys.exit(1 if fails else 0)

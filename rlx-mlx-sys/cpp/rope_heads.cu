// Rotary position embeddings of the query and key heads of a decoder block, read straight
// from the rows of the product that computed them and written heads-first, in one float32
// kernel for NVIDIA GPUs.
//
// A block's joined q/k/v product gives rows `[B, S, W]` whose columns hold the query heads,
// then the key heads, then the values. As MLX ops each rotation is a column slice, a
// reshape into heads, a transpose to heads-first, a copy to make that contiguous and
// MLX's rope: per block and step, ten MLX nodes and four kernels of host work for a few
// hundred float rotations. Here one thread takes one pair of one head of one position
// (or one feature past the rotated ones, copied): `q[b, h, s, :]` is the rotation of
// `x[b, s, QCOL + h * D : QCOL + (h + 1) * D]`, and likewise `k` from KCOL.
//
// The rotation is the IR's (rlx/src/ops/nn/rope.rs): pair `i` of the first DIMS features,
// `(2i, 2i+1)` when TRADITIONAL else `(i, i + DIMS/2)`, turns by
// `(offset + s) * scale / period_i` radians, the period `base^(2i/DIMS)` unless PERIODS
// gives them; the angle, its sine and cosine are float64, as the CPU backend has them.
// BASE_BITS and SCALE_BITS are the float32 bits of `base` and `scale` (template arguments,
// so no run passes arrays for them). The file has no includes: NVRTC compiles it through
// `mx::fast::cuda_kernel`, which wraps a call of this function in a `__global__` one.

namespace rlx_rope {

// The cosine and sine of pair `i`'s angle at `position` (before `scale`), from float64.
template <int DIMS, bool PERIODS, int BASE_BITS, int SCALE_BITS>
__device__ __forceinline__ void turn(int i, double position, const float* periods, float* cs,
                                     float* sn) {
  const double period = PERIODS ? static_cast<double>(periods[i])
                                : pow(static_cast<double>(__int_as_float(BASE_BITS)),
                                      2.0 * i / static_cast<double>(DIMS));
  double sine, cosine;
  sincos(position * static_cast<double>(__int_as_float(SCALE_BITS)) / period, &sine, &cosine);
  *cs = static_cast<float>(cosine);
  *sn = static_cast<float>(sine);
}

// x: [batch, seq, width], contiguous. offset: one position, or one per batch row when
// PER_ROW. periods: DIMS / 2 of them when PERIODS (else not read). q: [batch, HQ, seq, D],
// k: [batch, HK, seq, D].
template <int HQ, int HK, int D, int DIMS, int QCOL, int KCOL, bool TRADITIONAL, bool PER_ROW,
          bool PERIODS, int BASE_BITS, int SCALE_BITS, typename OffT>
__device__ void rope_heads(const float* x, const OffT* offset, const float* periods,
                           long long batch, long long seq, long long width, float* q, float* k) {
  constexpr int HALF = DIMS / 2, SLOTS = HALF + (D - DIMS), HEADS = HQ + HK;
  const long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= batch * seq * HEADS * SLOTS) return;
  const int slot = static_cast<int>(t % SLOTS);
  long long rest = t / SLOTS;
  const int head = static_cast<int>(rest % HEADS);
  rest /= HEADS;
  const long long s = rest % seq, b = rest / seq;
  const bool query = head < HQ;
  const int h = query ? head : head - HQ;
  const float* in = x + (b * seq + s) * width + (query ? QCOL : KCOL) + static_cast<long long>(h) * D;
  float* out = query ? q + ((b * HQ + h) * seq + s) * D : k + ((b * HK + h) * seq + s) * D;
  if (slot >= HALF) {  // a feature past the rotated ones
    const int f = DIMS + (slot - HALF);
    out[f] = in[f];
    return;
  }
  const int i = slot;
  const int first = TRADITIONAL ? 2 * i : i, second = TRADITIONAL ? 2 * i + 1 : i + HALF;
  float cs, sn;
  turn<DIMS, PERIODS, BASE_BITS, SCALE_BITS>(i, static_cast<double>(offset[PER_ROW ? b : 0]) + s,
                                             periods, &cs, &sn);
  const float x1 = in[first], x2 = in[second];
  out[first] = x1 * cs - x2 * sn;
  out[second] = x1 * sn + x2 * cs;
}

}  // namespace rlx_rope

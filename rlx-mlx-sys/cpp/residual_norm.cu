// A residual add and the RMS normalization of its result in one float32 kernel, for NVIDIA
// GPUs: `sum = a + b` and `out = sum * rsqrt(mean(sum^2) + eps) * w` over rows of `width`.
//
// A decoder block adds each sublayer's output to the residual stream and normalizes the
// result for the next sublayer. As MLX ops that is two kernels (an elementwise add, then
// MLX's RMS norm reading the sum back), and a decoding step of one token runs them 60
// times for a 30-block model, each a few microseconds of GPU work and more of host work
// to build and launch. Here one block takes one row: each thread adds its columns, writes
// them to `sum` and keeps their squares; the squares are summed across the block (warp
// shuffles, then one warp over the warps' partial sums); each thread scales the columns it
// wrote. The file has no includes: NVRTC compiles it through `mx::fast::cuda_kernel`,
// which wraps a call of this function in a `__global__` one.

namespace rlx_norm {

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Row `blockIdx.x` of `a`, `b`, `sum` and `out` (all contiguous, rows of `width`), with
// THREADS threads a block (a multiple of 32, at most 1024) and epsilon the float whose bits
// are EPS_BITS (a template argument, so no run passes an array for it).
// The block's sum of `squares` over its threads (every thread gets it).
template <int THREADS>
__device__ __forceinline__ float block_sum(float squares, float* partial) {
  const int t = threadIdx.x;
  squares = warp_sum(squares);
  if (t % 32 == 0) partial[t / 32] = squares;
  __syncthreads();
  if (t < 32) {
    float total = t < THREADS / 32 ? partial[t] : 0.f;
    total = warp_sum(total);
    if (t == 0) partial[0] = total;
  }
  __syncthreads();
  return partial[0];
}

// One block a row. With PER > 0 (the row's width at most PER * THREADS) each thread keeps
// its PER values and weights in registers, all loaded before the first is used: a decoding
// step's row is a few hundred values, so the kernel's time is its loads' latency, paid once
// instead of once per step of a loop. PER = 0 loops over any width.
template <int THREADS, int PER, int EPS_BITS>
__device__ void add_rms_norm(const float* a, const float* b, const float* w, long long width,
                             float* sum, float* out) {
  __shared__ float partial[THREADS / 32];
  const long long base = static_cast<long long>(blockIdx.x) * width;
  const int t = threadIdx.x;
  const float eps = __int_as_float(EPS_BITS);
  float squares = 0.f;
  if (PER > 0) {
    float s[PER > 0 ? PER : 1], wv[PER > 0 ? PER : 1];
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const long long i = t + static_cast<long long>(p) * THREADS;
      const bool in = i < width;
      s[p] = in ? a[base + i] + b[base + i] : 0.f;
      wv[p] = in ? w[i] : 0.f;
    }
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const long long i = t + static_cast<long long>(p) * THREADS;
      if (i < width) sum[base + i] = s[p];
      squares = fmaf(s[p], s[p], squares);
    }
    const float mean = block_sum<THREADS>(squares, partial) / static_cast<float>(width);
    const float scale = rsqrtf(mean + eps);
#pragma unroll
    for (int p = 0; p < PER; ++p) {
      const long long i = t + static_cast<long long>(p) * THREADS;
      if (i < width) out[base + i] = s[p] * scale * wv[p];
    }
    return;
  }
  for (long long i = t; i < width; i += THREADS) {
    const float s = a[base + i] + b[base + i];
    sum[base + i] = s;
    squares = fmaf(s, s, squares);
  }
  const float mean = block_sum<THREADS>(squares, partial) / static_cast<float>(width);
  const float scale = rsqrtf(mean + eps);
  for (long long i = t; i < width; i += THREADS) {
    out[base + i] = sum[base + i] * scale * w[i];
  }
}

}  // namespace rlx_norm

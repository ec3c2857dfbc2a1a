// A few rows of float32 activations times a weight kept in MLX's affine groups of 32
// (4 or 8 bits), for NVIDIA GPUs: `out[r, n] = sum_k x[r, k] * (scale[n, g] * q[n, k] +
// bias[n, g])`, g = k / 32, for the rows of a decoding step (a batch of 1 to 8 sequences).
//
// MLX's quantized product runs its vector kernel for fewer than 8 rows, once per row; from 8
// rows of a float32 operand it takes a general kernel, with which a batch of 8 SmolLM2
// sequences decoded slower with 4-bit weights than with float32 ones on an H200. Here each warp owns one
// output column: its lanes read consecutive 32-bit words of the column's quantized row
// (8 or 4 values each), unpack them once and apply them to every row of `x`, so the weight
// is read once for all rows; the warp then sums each row's partial products. The file has
// no includes: NVRTC compiles it through `mx::fast::cuda_kernel`, which wraps a call of
// this function in a `__global__` one.

namespace rlx_qrows {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Adds this lane's share of the products of ROWS rows of `x` ([ROWS, k], contiguous; 16-byte
// aligned when `aligned`) with COLS quantized columns (`column[c]` of `words`, `scales` and
// `biases`) into `acc[c]`. `k` is a multiple of 32. A warp's time is its loads' latency (it
// owns a few columns of a few hundred values): the columns are read together, and UNROLL
// steps' words, scales and biases are loaded before the first is used.
template <int ROWS, int BITS, int COLS>
__device__ __forceinline__ void quantized_columns(const float* x, const unsigned* words,
                                                  const float* scales, const float* biases,
                                                  const long long* column, int k, bool aligned,
                                                  float (*acc)[ROWS]) {
  constexpr int PER_WORD = 32 / BITS, UNROLL = 2;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  const int lane = threadIdx.x % 32;
  const int row_words = k / PER_WORD;
  for (int base = lane; base < row_words; base += 32 * UNROLL) {
    unsigned word[UNROLL][COLS];
    float scale[UNROLL][COLS], bias[UNROLL][COLS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = base + 32 * u;
      const int group = j / (32 / PER_WORD);
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
        const bool in = j < row_words;
        word[u][c] = in ? words[column[c] * row_words + j] : 0u;
        scale[u][c] = in ? scales[column[c] * (k / 32) + group] : 0.f;
        bias[u][c] = in ? biases[column[c] * (k / 32) + group] : 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = base + 32 * u;
      if (j >= row_words) break;
      float v[COLS][PER_WORD];
#pragma unroll
      for (int c = 0; c < COLS; ++c) {
#pragma unroll
        for (int i = 0; i < PER_WORD; ++i) {
          v[c][i] = fmaf(scale[u][c], static_cast<float>((word[u][c] >> (BITS * i)) & MASK), bias[u][c]);
        }
      }
      const long long first = static_cast<long long>(j) * PER_WORD;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float* xr = x + static_cast<long long>(r) * k + first;
        float sum[COLS] = {};
        if (aligned) {
#pragma unroll
          for (int i = 0; i < PER_WORD; i += 4) {
            const float4 q = *reinterpret_cast<const float4*>(xr + i);
#pragma unroll
            for (int c = 0; c < COLS; ++c) {
              sum[c] = fmaf(q.x, v[c][i], sum[c]);
              sum[c] = fmaf(q.y, v[c][i + 1], sum[c]);
              sum[c] = fmaf(q.z, v[c][i + 2], sum[c]);
              sum[c] = fmaf(q.w, v[c][i + 3], sum[c]);
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < PER_WORD; ++i) {
            const float xv = xr[i];
#pragma unroll
            for (int c = 0; c < COLS; ++c) sum[c] = fmaf(xv, v[c][i], sum[c]);
          }
        }
#pragma unroll
        for (int c = 0; c < COLS; ++c) acc[c][r] += sum[c];
      }
    }
  }
}

template <int ROWS, int BITS, int WARPS>
__device__ void quantized_rows(const float* x, const unsigned* words, const float* scales,
                               const float* biases, int n, int k, float* out) {
  const int lane = threadIdx.x % 32;
  const int column = blockIdx.x * WARPS + threadIdx.x / 32;
  if (column >= n) return;
  // Vector loads of x need 16-byte alignment (k is a multiple of 32, so every row keeps it).
  const bool aligned = reinterpret_cast<unsigned long long>(x) % 16 == 0;
  const long long columns[1] = {column};
  float acc[1][ROWS] = {};
  quantized_columns<ROWS, BITS, 1>(x, words, scales, biases, columns, k, aligned, acc);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float total = warp_sum(acc[0][r]);
    if (lane == 0) out[static_cast<long long>(r) * n + column] = total;
  }
}

}  // namespace rlx_qrows

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
// aligned when `aligned`) with quantized column `column` of `words`, `scales` and `biases`
// into `acc`. `k` is a multiple of 32.
template <int ROWS, int BITS>
__device__ __forceinline__ void quantized_column(const float* x, const unsigned* words,
                                                 const float* scales, const float* biases,
                                                 long long column, int k, bool aligned,
                                                 float* acc) {
  constexpr int PER_WORD = 32 / BITS;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  const int lane = threadIdx.x % 32;
  const int row_words = k / PER_WORD;
  const unsigned* w = words + column * row_words;
  const float* s = scales + column * (k / 32);
  const float* b = biases + column * (k / 32);
  for (int j = lane; j < row_words; j += 32) {
    const unsigned word = w[j];
    const int group = j / (32 / PER_WORD);
    const float scale = s[group];
    const float bias = b[group];
    float v[PER_WORD];
#pragma unroll
    for (int i = 0; i < PER_WORD; ++i) {
      v[i] = fmaf(scale, static_cast<float>((word >> (BITS * i)) & MASK), bias);
    }
    const long long first = static_cast<long long>(j) * PER_WORD;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float* xr = x + static_cast<long long>(r) * k + first;
      float sum = 0.f;
      if (aligned) {
#pragma unroll
        for (int i = 0; i < PER_WORD; i += 4) {
          const float4 q = *reinterpret_cast<const float4*>(xr + i);
          sum = fmaf(q.x, v[i], sum);
          sum = fmaf(q.y, v[i + 1], sum);
          sum = fmaf(q.z, v[i + 2], sum);
          sum = fmaf(q.w, v[i + 3], sum);
        }
      } else {
#pragma unroll
        for (int i = 0; i < PER_WORD; ++i) sum = fmaf(xr[i], v[i], sum);
      }
      acc[r] += sum;
    }
  }
}

// ROWS rows of `x` ([ROWS, k], contiguous) by the columns of `words` ([n, k * BITS / 32],
// value i of a word in bits BITS * i up), `scales` and `biases` ([n, k / 32]) into `out`
// ([ROWS, n]); WARPS warps a block, one column each. `k` is a multiple of 32.
template <int ROWS, int BITS, int WARPS>
__device__ void quantized_rows(const float* x, const unsigned* words, const float* scales,
                               const float* biases, int n, int k, float* out) {
  const int lane = threadIdx.x % 32;
  const int column = blockIdx.x * WARPS + threadIdx.x / 32;
  if (column >= n) return;
  // Vector loads of x need 16-byte alignment (k is a multiple of 32, so every row keeps it).
  const bool aligned = reinterpret_cast<unsigned long long>(x) % 16 == 0;
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
  quantized_column<ROWS, BITS>(x, words, scales, biases, column, k, aligned, acc);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float total = warp_sum(acc[r]);
    if (lane == 0) out[static_cast<long long>(r) * n + column] = total;
  }
}

}  // namespace rlx_qrows

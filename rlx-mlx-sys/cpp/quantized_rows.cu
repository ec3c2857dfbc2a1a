// A few rows of float32 activations times a weight kept in MLX's affine groups of 32
// (4 or 8 bits), for NVIDIA GPUs: `out[r, n] = sum_k x[r, k] * (scale[n, g] * q[n, k] +
// bias[n, g])`, g = k / 32, for the rows of a decoding step (a batch of 1 to 8 sequences).
//
// MLX's quantized product runs its vector kernel for fewer than 8 rows, once per row; from 8
// rows of a float32 operand it takes a general kernel, with which a batch of 8 SmolLM2
// sequences decoded slower with 4-bit weights than with float32 ones on an H200. Here each warp owns one
// output column: its lanes read consecutive 32-bit words of the column's quantized row
// (8 or 4 values each), unpack them once and apply them to every row of `x`, so the weight
// is read once for all rows (cpp/columns.cu's reader); the warp then sums each row's partial
// products. No includes: NVRTC compiles it after cpp/columns.cu, through
// `mx::fast::cuda_kernel`, which wraps a call of this function in a `__global__` one.

namespace rlx_qrows {

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
  rlx_columns::quantized_columns<ROWS, BITS, 1>(x, words, scales, biases, columns, k, aligned, acc);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float total = rlx_columns::warp_sum(acc[0][r]);
    if (lane == 0) out[static_cast<long long>(r) * n + column] = total;
  }
}

}  // namespace rlx_qrows

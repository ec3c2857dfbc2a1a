// The hidden values of a gated feed-forward for the rows of a decoding step, for NVIDIA
// GPUs: `out[r, j] = act(x[r] · w[:, gate + j]) * (x[r] · w[:, up + j])`, `w` the joined
// weight of the gate and up products. One kernel in place of the joined product, its two
// column slices and the activation's product: a decoding step builds three fewer MLX nodes
// a block and launches one kernel fewer. Each warp owns one output column: it reads its
// gate and up columns once for all rows, then sums each row's partial products. No
// includes: NVRTC compiles it after cpp/quantized_rows.cu (its warp_sum and
// quantized_column), both through `mx::fast::cuda_kernel`.

namespace rlx_gated {

// ACT 0: SiLU, g * sigmoid(g); 1: GELU's tanh approximation (as the shim composes it).
template <int ACT>
__device__ __forceinline__ float activate(float g) {
  if (ACT == 0) return g / (1.f + expf(-g));
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.f + tanhf(inner));
}

// This lane's share of the products of ROWS rows of `x` (row r from x + row[r], values
// `x_step` apart) with the weight column at `w` (values `w_step` apart) into `acc`; with
// `vector` both steps are 1 and every row and the column are 16-byte aligned.
template <int ROWS>
__device__ __forceinline__ void float_column(const float* x, const long long* row,
                                             long long x_step, const float* w, long long w_step,
                                             int k, bool vector, float* acc) {
  const int lane = threadIdx.x % 32;
  if (vector) {
    for (int j = lane * 4; j < k; j += 128) {
      const float4 wv = *reinterpret_cast<const float4*>(w + j);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float4 xv = *reinterpret_cast<const float4*>(x + row[r] + j);
        acc[r] = fmaf(xv.x, wv.x, acc[r]);
        acc[r] = fmaf(xv.y, wv.y, acc[r]);
        acc[r] = fmaf(xv.z, wv.z, acc[r]);
        acc[r] = fmaf(xv.w, wv.w, acc[r]);
      }
    }
    return;
  }
  for (int j = lane; j < k; j += 32) {
    const float wv = w[j * w_step];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = fmaf(x[row[r] + j * x_step], wv, acc[r]);
  }
}

__device__ __forceinline__ bool aligned16(const float* p) {
  return reinterpret_cast<unsigned long long>(p) % 16 == 0;
}

// Where each of ROWS rows of `x` starts (its shape and strides as MLX passes them: the rows
// are every index but the last).
template <int ROWS, class XShape, class XStrides>
__device__ __forceinline__ void row_starts(const XShape& x_shape, const XStrides& x_strides,
                                           int x_ndim, long long* row) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    long long at = 0;
    int rest = r;
    for (int d = x_ndim - 2; d >= 0; --d) {
      at += static_cast<long long>(rest % x_shape[d]) * x_strides[d];
      rest /= x_shape[d];
    }
    row[r] = at;
  }
}

// Whether float_column may read the rows starting at `row` with vector loads (given 16-byte
// aligned weight columns).
template <int ROWS>
__device__ __forceinline__ bool vector_rows(const float* x, const long long* row, long long x_step,
                                            long long w_step, int k) {
  bool vector = x_step == 1 && w_step == 1 && k % 4 == 0 && aligned16(x);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) vector = vector && row[r] % 4 == 0;
  return vector;
}

// Writes act(gate sums) * up sums of every row for column `j` of `out` ([ROWS, width]).
template <int ROWS, int ACT>
__device__ __forceinline__ void write_gated(const float* gate, const float* up, int j, int width,
                                            float* out) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float g = rlx_qrows::warp_sum(gate[r]);
    const float u = rlx_qrows::warp_sum(up[r]);
    if (lane == 0) out[static_cast<long long>(r) * width + j] = activate<ACT>(g) * u;
  }
}

// Float32 weights in any strides: `w` is [k, n] (K_FIRST, a product's right operand) or
// [n, k]; `x` is ROWS rows of k values in any strides (its shape and strides as MLX passes
// them). WARPS warps a block, one output column each.
template <int ROWS, int WARPS, int ACT, bool K_FIRST, class XShape, class XStrides, class WStrides>
__device__ void gated_rows(const float* x, const XShape& x_shape, const XStrides& x_strides,
                           int x_ndim, const float* w, const WStrides& w_strides, int gate, int up,
                           int width, float* out) {
  const int j = blockIdx.x * WARPS + threadIdx.x / 32;
  if (j >= width) return;
  const int k = x_shape[x_ndim - 1];
  const long long x_step = x_strides[x_ndim - 1];
  const long long w_k = K_FIRST ? w_strides[0] : w_strides[1];
  const long long w_n = K_FIRST ? w_strides[1] : w_strides[0];
  long long row[ROWS];
  row_starts<ROWS>(x_shape, x_strides, x_ndim, row);
  const float* g = w + static_cast<long long>(gate + j) * w_n;
  const float* u = w + static_cast<long long>(up + j) * w_n;
  const bool vector = vector_rows<ROWS>(x, row, x_step, w_k, k) && aligned16(g) && aligned16(u);
  float ga[ROWS], ua[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) ga[r] = ua[r] = 0.f;
  float_column<ROWS>(x, row, x_step, g, w_k, k, vector, ga);
  float_column<ROWS>(x, row, x_step, u, w_k, k, vector, ua);
  write_gated<ROWS, ACT>(ga, ua, j, width, out);
}

// Weights in MLX's affine groups of 32 (as cpp/quantized_rows.cu reads them), `x`
// contiguous ([ROWS, k], k a multiple of 32).
template <int ROWS, int BITS, int WARPS, int ACT>
__device__ void gated_quantized_rows(const float* x, const unsigned* words, const float* scales,
                                     const float* biases, int gate, int up, int width, int k,
                                     float* out) {
  const int j = blockIdx.x * WARPS + threadIdx.x / 32;
  if (j >= width) return;
  const bool aligned = aligned16(x);
  float ga[ROWS], ua[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) ga[r] = ua[r] = 0.f;
  rlx_qrows::quantized_column<ROWS, BITS>(x, words, scales, biases, gate + j, k, aligned, ga);
  rlx_qrows::quantized_column<ROWS, BITS>(x, words, scales, biases, up + j, k, aligned, ua);
  write_gated<ROWS, ACT>(ga, ua, j, width, out);
}

}  // namespace rlx_gated

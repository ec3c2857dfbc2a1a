// The hidden values of a gated feed-forward for the rows of a decoding step, for NVIDIA
// GPUs: `out[r, j] = act(x[r] · w[:, gate + j]) * (x[r] · w[:, up + j])`, `w` the joined
// weight of the gate and up products. One kernel in place of the joined product, its two
// column slices and the activation's product: a decoding step builds three fewer MLX nodes
// a block and launches one kernel fewer. Each warp owns one output column: it reads its
// gate and up columns once for all rows (cpp/columns.cu's readers), then sums each row's
// partial products. No includes: NVRTC compiles it after cpp/columns.cu, both through
// `mx::fast::cuda_kernel`.

namespace rlx_gated {

// ACT 0: SiLU, g * sigmoid(g); 1: GELU's tanh approximation (as the shim composes it).
template <int ACT>
__device__ __forceinline__ float activate(float g) {
  if (ACT == 0) return g / (1.f + expf(-g));
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.f + tanhf(inner));
}

// Writes act(gate sums) * up sums of every row for column `j` of `out` ([ROWS, width]).
template <int ROWS, int ACT>
__device__ __forceinline__ void write_gated(const float* gate, const float* up, int j, int width,
                                            float* out) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float g = rlx_columns::warp_sum(gate[r]);
    const float u = rlx_columns::warp_sum(up[r]);
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
  rlx_columns::row_starts<ROWS>(x_shape, x_strides, x_ndim, row);
  const float* g = w + static_cast<long long>(gate + j) * w_n;
  const float* u = w + static_cast<long long>(up + j) * w_n;
  const bool vector = rlx_columns::vector_rows<ROWS>(x, row, x_step, w_k, k) &&
                      rlx_columns::aligned16(g) && rlx_columns::aligned16(u);
  const float* columns[2] = {g, u};
  float acc[2][ROWS] = {};
  rlx_columns::float_columns<ROWS, 2>(x, row, x_step, columns, w_k, k, vector, acc);
  write_gated<ROWS, ACT>(acc[0], acc[1], j, width, out);
}

// Weights in MLX's affine groups of 32 (as cpp/columns.cu reads them), `x`
// contiguous ([ROWS, k], k a multiple of 32).
template <int ROWS, int BITS, int WARPS, int ACT>
__device__ void gated_quantized_rows(const float* x, const unsigned* words, const float* scales,
                                     const float* biases, int gate, int up, int width, int k,
                                     float* out) {
  const int j = blockIdx.x * WARPS + threadIdx.x / 32;
  if (j >= width) return;
  const bool aligned = rlx_columns::aligned16(x);
  const long long columns[2] = {gate + j, up + j};
  float acc[2][ROWS] = {};
  rlx_columns::quantized_columns<ROWS, BITS, 2>(x, words, scales, biases, columns, k, aligned, acc);
  write_gated<ROWS, ACT>(acc[0], acc[1], j, width, out);
}

}  // namespace rlx_gated

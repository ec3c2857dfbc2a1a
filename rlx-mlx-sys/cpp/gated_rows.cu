// The hidden values of a gated feed-forward for the rows of a decoding step, for NVIDIA
// GPUs: `out[r, j] = act(x[r] · w[:, gate + j]) * (x[r] · w[:, up + j])`, `w` the joined
// weight of the gate and up products. One kernel in place of the joined product, its two
// column slices and the activation's product: a decoding step builds three fewer MLX nodes
// a block and launches one kernel fewer. Each warp owns one output column: it reads its
// gate and up columns once for all rows, then sums each row's partial products. No
// includes: NVRTC compiles it after cpp/quantized_rows.cu (its warp_sum and
// quantized_columns), both through `mx::fast::cuda_kernel`.

namespace rlx_gated {

// ACT 0: SiLU, g * sigmoid(g); 1: GELU's tanh approximation (as the shim composes it).
template <int ACT>
__device__ __forceinline__ float activate(float g) {
  if (ACT == 0) return g / (1.f + expf(-g));
  const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
  return 0.5f * g * (1.f + tanhf(inner));
}

// This lane's share of the products of ROWS rows of `x` (row r from x + row[r], values
// `x_step` apart) with COLS weight columns (column c at `w[c]`, values `w_step` apart) into
// `acc[c]`; with `vector` both steps are 1 and every row and column is 16-byte aligned.
// A warp owns only a few columns of a few hundred values, so its time is the latency of
// its loads, not their bandwidth: the columns are read together and UNROLL steps' weight
// loads are issued before the first is used.
template <int ROWS, int COLS>
__device__ __forceinline__ void float_columns(const float* x, const long long* row,
                                              long long x_step, const float* const* w,
                                              long long w_step, int k, bool vector,
                                              float (*acc)[ROWS]) {
  constexpr int UNROLL = 4;
  const int lane = threadIdx.x % 32;
  if (vector) {
    for (int base = lane * 4; base < k; base += 128 * UNROLL) {
      float4 wv[UNROLL][COLS];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = base + 128 * u;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
          wv[u][c] = j < k ? *reinterpret_cast<const float4*>(w[c] + j) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = base + 128 * u;
        if (j >= k) break;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          const float4 xv = *reinterpret_cast<const float4*>(x + row[r] + j);
#pragma unroll
          for (int c = 0; c < COLS; ++c) {
            acc[c][r] = fmaf(xv.x, wv[u][c].x, acc[c][r]);
            acc[c][r] = fmaf(xv.y, wv[u][c].y, acc[c][r]);
            acc[c][r] = fmaf(xv.z, wv[u][c].z, acc[c][r]);
            acc[c][r] = fmaf(xv.w, wv[u][c].w, acc[c][r]);
          }
        }
      }
    }
    return;
  }
  for (int base = lane; base < k; base += 32 * UNROLL) {
    float wv[UNROLL][COLS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = base + 32 * u;
#pragma unroll
      for (int c = 0; c < COLS; ++c) wv[u][c] = j < k ? w[c][j * w_step] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int j = base + 32 * u;
      if (j >= k) break;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const float xv = x[row[r] + j * x_step];
#pragma unroll
        for (int c = 0; c < COLS; ++c) acc[c][r] = fmaf(xv, wv[u][c], acc[c][r]);
      }
    }
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

// Whether float_columns may read the rows starting at `row` with vector loads (given 16-byte
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
  const float* columns[2] = {g, u};
  float acc[2][ROWS] = {};
  float_columns<ROWS, 2>(x, row, x_step, columns, w_k, k, vector, acc);
  write_gated<ROWS, ACT>(acc[0], acc[1], j, width, out);
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
  const long long columns[2] = {gate + j, up + j};
  float acc[2][ROWS] = {};
  rlx_qrows::quantized_columns<ROWS, BITS, 2>(x, words, scales, biases, columns, k, aligned, acc);
  write_gated<ROWS, ACT>(acc[0], acc[1], j, width, out);
}

}  // namespace rlx_gated

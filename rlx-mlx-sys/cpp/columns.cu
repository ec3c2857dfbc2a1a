// How the row kernels (cpp/quantized_rows.cu, cpp/gated_rows.cu, cpp/rotated_rows.cu) read
// their weight columns, for NVIDIA GPUs: each warp owns a few output columns and sums a few
// rows of activations against them, so its time is the latency of its loads, not their
// bandwidth. The readers take the columns together and issue several steps' loads before
// the first is used. Kept apart from the kernels because MLX hashes a custom kernel's whole
// source at every call (CustomKernel::eval_gpu): each kernel joins only the files it
// needs. No includes: NVRTC compiles it through `mx::fast::cuda_kernel`.

namespace rlx_columns {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Adds this lane's share of the products of ROWS rows of `x` ([ROWS, k], contiguous; 16-byte
// aligned when `aligned`) with COLS quantized columns (`column[c]` of `words`, `scales` and
// `biases`) into `acc[c]`. `k` is a multiple of 32. UNROLL steps' words, scales and biases
// are loaded before the first is used.
template <int ROWS, int BITS, int COLS>
__device__ __forceinline__ void quantized_columns(const float* x, const unsigned* words,
                                                  const float* scales, const float* biases,
                                                  const long long* column, int k, bool aligned,
                                                  float (*acc)[ROWS]) {
  constexpr int PER_WORD = 32 / BITS, UNROLL = 2;
  constexpr unsigned MASK = (1u << BITS) - 1u;
  const int lane = threadIdx.x % 32;
  const int row_words = k / PER_WORD, groups = k / 32;
  const unsigned* w[COLS];
  const float *s[COLS], *b[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    w[c] = words + column[c] * row_words;
    s[c] = scales + column[c] * groups;
    b[c] = biases + column[c] * groups;
  }
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
        word[u][c] = in ? w[c][j] : 0u;
        scale[u][c] = in ? s[c][group] : 0.f;
        bias[u][c] = in ? b[c][group] : 0.f;
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
          const float q = static_cast<float>((word[u][c] >> (BITS * i)) & MASK);
          v[c][i] = fmaf(scale[u][c], q, bias[u][c]);
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

// This lane's share of the products of ROWS rows of `x` (row r from x + row[r], values
// `x_step` apart) with COLS weight columns (column c at `w[c]`, values `w_step` apart) into
// `acc[c]`; with `vector` both steps are 1 and every row and column is 16-byte aligned.
// UNROLL steps' weight loads are issued before the first is used.
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
          wv[u][c] = j < k ? *reinterpret_cast<const float4*>(w[c] + j)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
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

}  // namespace rlx_columns

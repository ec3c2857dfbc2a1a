// Fused float32 attention for NVIDIA GPUs: softmax(q kᵀ · scale + mask) v in one kernel.
//
// MLX 0.32's CUDA `scaled_dot_product_attention` is fused (cuDNN) for halves only; for
// float32 it runs two batched GEMMs, a softmax and a select, after copying the strided head
// views to contiguous ones, and it holds the whole [B, H, Sq, Sk] score matrix. This kernel
// reads q, k and v through their strides (a transformer's head split is a free view),
// never materialises the scores, and writes its result as [B, Sq, H, Dv], the layout the
// head merge that follows wants.
//
// The shim compiles it at run time through `mx::fast::cuda_kernel` (NVRTC), which wraps a
// call of `rlx_attention_f32` in a generated `__global__` function; the file has no
// includes so that the same text also builds standalone.
//
// Layout of the work: a block takes BQ query rows of one (batch, head), one thread a row;
// the row's query and output live in registers. Keys come in tiles of BK rows staged in
// shared memory (every thread reads the same key at once: a broadcast), and are scored in
// chunks of CHUNK, so the running maximum and the rescale of the output move once per
// chunk, not once per key (an online softmax). Semantics are the RLX IR's: a NaN score
// makes the row NaN, a row with no visible key is zeros, and key j is visible to query i
// under the causal masks when j <= i + Sk - Sq (and j > i + Sk - Sq - window).

namespace rlx_attention {

constexpr int MASK_NONE = 0;
constexpr int MASK_CAUSAL = 1;
constexpr int MASK_WINDOW = 2;
constexpr int MASK_ARRAY = 3;

// No headers (NVRTC): the special values by their bits.
__device__ __forceinline__ float minus_infinity() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// A score under a mask value: an additive mask adds, a bool mask keeps or hides.
template <typename T>
__device__ __forceinline__ float masked(T m, float score) {
  return score + static_cast<float>(m);
}

template <>
__device__ __forceinline__ float masked<bool>(bool m, float score) {
  return m ? score : minus_infinity();
}

// q · k over DK features, k in shared memory (16-byte aligned rows when DK % 4 == 0).
template <int DK>
__device__ __forceinline__ float dot_row(const float* qr, const float* k_row) {
  if constexpr (DK % 4 == 0) {
    const float4* k4 = reinterpret_cast<const float4*>(k_row);
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int i = 0; i < DK / 4; ++i) {
      const float4 kv = k4[i];
      a = fmaf(qr[4 * i], kv.x, a);
      b = fmaf(qr[4 * i + 1], kv.y, b);
      a = fmaf(qr[4 * i + 2], kv.z, a);
      b = fmaf(qr[4 * i + 3], kv.w, b);
    }
    return a + b;
  } else {
    float a = 0.f;
#pragma unroll
    for (int d = 0; d < DK; ++d) a = fmaf(qr[d], k_row[d], a);
    return a;
  }
}

// o += p · v over DV features, v in shared memory.
template <int DV>
__device__ __forceinline__ void add_scaled_row(float* o, float p, const float* v_row) {
  if constexpr (DV % 4 == 0) {
    const float4* v4 = reinterpret_cast<const float4*>(v_row);
#pragma unroll
    for (int i = 0; i < DV / 4; ++i) {
      const float4 vv = v4[i];
      o[4 * i] = fmaf(p, vv.x, o[4 * i]);
      o[4 * i + 1] = fmaf(p, vv.y, o[4 * i + 1]);
      o[4 * i + 2] = fmaf(p, vv.z, o[4 * i + 2]);
      o[4 * i + 3] = fmaf(p, vv.w, o[4 * i + 3]);
    }
  } else {
#pragma unroll
    for (int d = 0; d < DV; ++d) o[d] = fmaf(p, v_row[d], o[d]);
  }
}

template <int DK, int DV, int BQ, int BK, int MASK, int WINDOW, typename MaskT>
__device__ __forceinline__ void rlx_attention_f32(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const MaskT* __restrict__ mask, const float* __restrict__ scale_at, int hq, int hk,
    int sq, int sk, long long qb, long long qh, long long qs, long long qd, long long kb,
    long long kh, long long ks, long long kd, long long vb, long long vh, long long vs,
    long long vd, long long mb, long long mh, long long mi, long long mj,
    float* __restrict__ out) {
  constexpr int CHUNK = 16;
  static_assert(BK % CHUNK == 0, "key tiles hold whole chunks");
  __shared__ __align__(16) float k_tile[BK][DK];
  __shared__ __align__(16) float v_tile[BK][DV];
  // A mask that is the same for every query row (a key-padding mask) is staged per tile.
  __shared__ MaskT mask_tile[BK];

  const int b = blockIdx.z;
  const int h = blockIdx.y;
  const int row0 = blockIdx.x * BQ;
  const int row = row0 + threadIdx.x;
  const bool live = row < sq;
  const int kv_head = h / (hq / hk);
  const float scale = *scale_at;
  const int offset = sk - sq;
  const bool mask_per_key = MASK == MASK_ARRAY && mi == 0;

  // The keys any row of this block may see.
  int key_begin = 0;
  int key_end = sk;
  if (MASK == MASK_CAUSAL || MASK == MASK_WINDOW) {
    const int last = min(sq, row0 + BQ) - 1;
    key_end = max(0, min(sk, last + offset + 1));
  }
  if (MASK == MASK_WINDOW) {
    key_begin = max(0, row0 + offset - WINDOW + 1);
  }

  float qr[DK];
  const long long at = live ? row : 0;
  const float* q_row = q + b * qb + h * qh + at * qs;
#pragma unroll
  for (int d = 0; d < DK; ++d) qr[d] = live ? q_row[d * qd] : 0.f;
  float o[DV];
#pragma unroll
  for (int d = 0; d < DV; ++d) o[d] = 0.f;
  float running_max = minus_infinity();
  float running_sum = 0.f;
  bool nan_seen = false;

  const float* k_head = k + b * kb + kv_head * kh;
  const float* v_head = v + b * vb + kv_head * vh;
  const MaskT* mask_row = MASK == MASK_ARRAY ? mask + b * mb + h * mh + at * mi : nullptr;

  for (int t0 = key_begin; t0 < key_end; t0 += BK) {
    const int n = min(BK, key_end - t0);
    __syncthreads();
    for (int e = threadIdx.x; e < BK * DK; e += BQ) {
      const int j = e / DK, d = e % DK;
      k_tile[j][d] = j < n ? k_head[static_cast<long long>(t0 + j) * ks + d * kd] : 0.f;
    }
    for (int e = threadIdx.x; e < BK * DV; e += BQ) {
      const int j = e / DV, d = e % DV;
      v_tile[j][d] = j < n ? v_head[static_cast<long long>(t0 + j) * vs + d * vd] : 0.f;
    }
    if (mask_per_key) {
      for (int j = threadIdx.x; j < n; j += BQ) mask_tile[j] = mask_row[(t0 + j) * mj];
    }
    __syncthreads();
    if (!live) continue;
    for (int j0 = 0; j0 < n; j0 += CHUNK) {
      float s[CHUNK];
      float chunk_max = minus_infinity();
#pragma unroll
      for (int c = 0; c < CHUNK; ++c) {
        const int j = j0 + c;
        const int key = t0 + j;
        float score = dot_row<DK>(qr, k_tile[j]) * scale;
        if (MASK == MASK_ARRAY && j < n) {
          score = masked<MaskT>(mask_per_key ? mask_tile[j] : mask_row[key * mj], score);
        }
        bool visible = j < n;
        if (MASK == MASK_CAUSAL || MASK == MASK_WINDOW) visible = visible && key <= row + offset;
        if (MASK == MASK_WINDOW) visible = visible && key > row + offset - WINDOW;
        s[c] = visible ? score : minus_infinity();
        nan_seen = nan_seen || isnan(s[c]);
        chunk_max = fmaxf(chunk_max, s[c]);
      }
      if (chunk_max > running_max) {
        const float alpha = expf(running_max - chunk_max);
        running_sum *= alpha;
#pragma unroll
        for (int d = 0; d < DV; ++d) o[d] *= alpha;
        running_max = chunk_max;
      }
      // Nothing visible so far: the chunk adds nothing (and exp(-inf - -inf) is NaN).
      if (running_max == minus_infinity()) continue;
#pragma unroll
      for (int c = 0; c < CHUNK; ++c) {
        const float p = expf(s[c] - running_max);
        running_sum += p;
        add_scaled_row<DV>(o, p, v_tile[j0 + c]);
      }
    }
  }
  if (!live) return;
  float* out_row = out + ((static_cast<long long>(b) * sq + row) * hq + h) * DV;
  const float inv = running_sum > 0.f ? 1.f / running_sum : 0.f;
#pragma unroll
  for (int d = 0; d < DV; ++d) out_row[d] = nan_seen ? quiet_nan() : o[d] * inv;
}

}  // namespace rlx_attention

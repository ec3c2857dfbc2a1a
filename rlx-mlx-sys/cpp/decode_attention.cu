// Float32 attention of a few query rows over the first `n` keys of a cache, `n` read from
// device memory (one for every batch row, or one per batch row: a batch of sequences, each
// as long as its own): a decoding step's attention, for NVIDIA GPUs.
//
// A decoding step attends one new row per head over a cache of fixed capacity of which
// only the first `n` positions are filled. Written with MLX ops that is a mask built from
// `n` and MLX's attention over the whole capacity, whose float32 CUDA path is two batched
// GEMMs, a softmax and a select (five kernels a layer, their time growing with the
// capacity). Here one block takes one (batch, key head) and one chunk of keys, and all the
// query rows that share that key head (grouped-query attention reads each key once), so
// the work grows with `n` alone: blocks whose chunk starts at or after `n` return at once.
//
// Work in a block (256 threads): the chunk's scores for every row go to shared memory, a
// thread a key; each row's maximum and sum of exponentials come from one warp; then the
// products with the values, a thread per four features and per lane of keys, the lanes
// summed through shared memory. With one chunk the block writes the result; with several
// it writes its maximum, sum and unnormalised products, which `rlx_decode_combine` merges.
//
// Semantics are the RLX IR's: key j is visible to query i when j < n and, under the causal
// masks, j <= i + n - Sq (and j > i + n - Sq - window); a NaN score makes its row NaN; a
// row with no visible key is zeros. The file has no includes: NVRTC compiles it through
// `mx::fast::cuda_kernel`, which wraps a call of these functions in a `__global__` one.

namespace rlx_decode {

constexpr int THREADS = 256;
constexpr int MASK_NONE = 0;
constexpr int MASK_CAUSAL = 1;
constexpr int MASK_WINDOW = 2;

__device__ __forceinline__ float minus_infinity() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// Whether query `i` of `sq` sees key `j` of the first `n`.
template <int MASK, int WINDOW>
__device__ __forceinline__ bool visible(long long i, long long j, long long n, long long sq) {
  if (j >= n) return false;
  if (MASK == MASK_NONE) return true;
  const long long pos = i + n - sq;
  if (j > pos) return false;
  if (MASK == MASK_WINDOW) return j > pos - WINDOW;
  return true;
}

// Four consecutive features of a row starting at `p` with element stride `s`.
__device__ __forceinline__ float4 four(const float* p, long long s) {
  if (s == 1 && (reinterpret_cast<unsigned long long>(p) & 15) == 0) {
    return *reinterpret_cast<const float4*>(p);
  }
  return make_float4(p[0], p[s], p[2 * s], p[3 * s]);
}

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One block: rows are (head h = kv * G + r / sq, query r % sq) for r < ROWS = G * sq.
// `out` is [B, Sq, Hq, DV] when FINAL, else the products [B, Sq, Hq, S, DV], and `stats`
// [B, Sq, Hq, S, 2] the maximum and sum of each split.
template <int D, int DV, int ROWS, int CHUNK, int MASK, int WINDOW, typename LenT, bool FINAL>
__device__ void decode_attention(const float* q, const float* k, const float* v,
                                 const LenT* length, int length_per_batch,
                                 const float* scale_at, int hq, int hk,
                                 int sq, int sk, long long qs0, long long qs1, long long qs2,
                                 long long qs3, long long ks0, long long ks1, long long ks2,
                                 long long ks3, long long vs0, long long vs1, long long vs2,
                                 long long vs3, float* out, float* stats) {
  static_assert(D % 4 == 0 && DV % 4 == 0 && DV <= 4 * THREADS, "features in fours");
  __shared__ float qrow[ROWS][D];
  __shared__ float score[ROWS][CHUNK];
  __shared__ float row_max[ROWS];
  __shared__ float row_sum[ROWS];
  constexpr int QUADS = DV / 4;
  constexpr int LANES = THREADS / QUADS;
  __shared__ float partial[LANES][DV];

  const int tid = threadIdx.x;
  const int split = blockIdx.x, kv = blockIdx.y, b = blockIdx.z;
  const int splits = gridDim.x;
  const int group = hq / hk;
  long long n = static_cast<long long>(length[length_per_batch ? b : 0]);
  n = n < 0 ? 0 : (n > sk ? sk : n);
  const long long first = static_cast<long long>(split) * CHUNK;
  // Every row's keys end before n: a chunk at or after it holds nothing a row sees, and
  // the combine reads only the splits before it.
  if (first >= n && !(FINAL && split == 0)) return;
  const int count = static_cast<int>(n - first < CHUNK ? (n > first ? n - first : 0) : CHUNK);
  const float scale = scale_at[0];

  for (int e = tid; e < ROWS * D; e += THREADS) {
    const int r = e / D, d = e % D;
    const int h = kv * group + r / sq, i = r % sq;
    qrow[r][d] = q[b * qs0 + h * qs1 + i * qs2 + d * qs3];
  }
  __syncthreads();

  // Scores: a thread a key, every row.
  const float* kbase = k + b * ks0 + kv * ks1;
  for (int j = tid; j < count; j += THREADS) {
    const long long key = first + j;
    const float* krow = kbase + key * ks2;
    float dot[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) dot[r] = 0.f;
    // Up to 64 features' loads in flight at once: a thread owns one key, and the key's row
    // is all it reads before its scores.
#pragma unroll 16
    for (int d = 0; d < D; d += 4) {
      const float4 kk = four(krow + d * ks3, ks3);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        dot[r] = fmaf(qrow[r][d], kk.x, dot[r]);
        dot[r] = fmaf(qrow[r][d + 1], kk.y, dot[r]);
        dot[r] = fmaf(qrow[r][d + 2], kk.z, dot[r]);
        dot[r] = fmaf(qrow[r][d + 3], kk.w, dot[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      score[r][j] = visible<MASK, WINDOW>(r % sq, key, n, sq) ? dot[r] * scale : minus_infinity();
    }
  }
  __syncthreads();

  // Each row's maximum and exponentials, a warp a row. A NaN score (which fmaxf skips)
  // makes the row's sum NaN, and its result follows.
  const int warp = tid / 32, lane = tid % 32;
  for (int r = warp; r < ROWS; r += THREADS / 32) {
    float m = minus_infinity();
    bool nan_seen = false;
    for (int j = lane; j < count; j += 32) {
      m = fmaxf(m, score[r][j]);
      nan_seen = nan_seen || isnan(score[r][j]);
    }
    m = warp_max(m);
    nan_seen = __any_sync(0xffffffffu, nan_seen);
    float s = 0.f;
    for (int j = lane; j < count; j += 32) {
      const float p = m == minus_infinity() ? 0.f : __expf(score[r][j] - m);
      score[r][j] = p;
      s += p;
    }
    s = warp_sum(s);
    if (lane == 0) {
      row_max[r] = m;
      row_sum[r] = nan_seen ? quiet_nan() : s;
    }
  }
  __syncthreads();

  // Products with the values: a thread four features of one lane of keys, every row.
  const int quad = tid % QUADS, key_lane = tid / QUADS;
  float4 acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* vbase = v + b * vs0 + kv * vs1 + static_cast<long long>(quad) * 4 * vs3;
  auto add = [&](int j, const float4& vv) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float p = score[r][j];
      acc[r].x = fmaf(p, vv.x, acc[r].x);
      acc[r].y = fmaf(p, vv.y, acc[r].y);
      acc[r].z = fmaf(p, vv.z, acc[r].z);
      acc[r].w = fmaf(p, vv.w, acc[r].w);
    }
  };
  if (key_lane < LANES) {
    // Eight loads in flight before their products: one at a time, each waited for its
    // memory round trip (13.5 us a layer for SmolLM2's 3 key heads on an H200).
    constexpr int AHEAD = 8;
    int j = key_lane;
    for (; j + (AHEAD - 1) * LANES < count; j += AHEAD * LANES) {
      float4 vv[AHEAD];
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) vv[u] = four(vbase + (first + j + u * LANES) * vs2, vs3);
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) add(j + u * LANES, vv[u]);
    }
    for (; j < count; j += LANES) add(j, four(vbase + (first + j) * vs2, vs3));
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (key_lane < LANES) {
      partial[key_lane][4 * quad] = acc[r].x;
      partial[key_lane][4 * quad + 1] = acc[r].y;
      partial[key_lane][4 * quad + 2] = acc[r].z;
      partial[key_lane][4 * quad + 3] = acc[r].w;
    }
    __syncthreads();
    for (int d = tid; d < DV; d += THREADS) {
      float total = 0.f;
      for (int l = 0; l < LANES; ++l) total += partial[l][d];
      const int h = kv * group + r / sq, i = r % sq;
      const long long row = (static_cast<long long>(b) * sq + i) * hq + h;
      if (FINAL) {
        const float m = row_max[r], s = row_sum[r];
        out[row * DV + d] = isnan(s) ? s : ((m == minus_infinity() || s == 0.f) ? 0.f : total / s);
      } else {
        out[(row * splits + split) * DV + d] = total;
        if (d == 0) {
          stats[(row * splits + split) * 2] = row_max[r];
          stats[(row * splits + split) * 2 + 1] = row_sum[r];
        }
      }
    }
    __syncthreads();
  }
}

// Merges the splits of `decode_attention`: a thread a feature of a row, over the splits
// that start before n.
template <int DV, int CHUNK, typename LenT>
__device__ void decode_combine(const float* parts, const float* stats, const LenT* length,
                               int rows_per_length, int rows, int splits, int sk, float* out) {
  const long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long long>(rows) * DV) return;
  const long long row = e / DV;
  const int d = static_cast<int>(e % DV);
  long long n = static_cast<long long>(length[row / rows_per_length]);
  n = n < 0 ? 0 : (n > sk ? sk : n);
  const int used = static_cast<int>((n + CHUNK - 1) / CHUNK);
  const float* st = stats + row * splits * 2;
  float m = minus_infinity();
  bool nan_seen = false;
  for (int s = 0; s < used; ++s) {
    m = fmaxf(m, st[2 * s]);
    nan_seen = nan_seen || isnan(st[2 * s + 1]);
  }
  if (nan_seen) {
    out[e] = quiet_nan();
    return;
  }
  float total = 0.f, sum = 0.f;
  if (m != minus_infinity()) {
    for (int s = 0; s < used; ++s) {
      const float ms = st[2 * s];
      const float w = ms == minus_infinity() ? 0.f : __expf(ms - m);
      sum = fmaf(w, st[2 * s + 1], sum);
      total = fmaf(w, parts[(row * splits + s) * DV + d], total);
    }
  }
  out[e] = (m == minus_infinity() || sum == 0.f) ? 0.f : total / sum;
}

}  // namespace rlx_decode

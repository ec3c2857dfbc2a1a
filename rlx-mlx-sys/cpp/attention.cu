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

// ---- The tensor-core kernel: TF32 matrix products (sm_80 and later) ----
//
// The same attention with q kᵀ and p v on tensor cores (mma.sync m16n8k8, TF32 inputs,
// float32 accumulation), flash-attention style: a warp takes 16 query rows, a block four
// warps; key and value tiles of 64 rows are staged in shared memory (rows padded by 4
// floats, so the fragment reads hit 32 different banks). SPLIT makes each product three
// TF32 products of a value's high and low parts (a·b ≈ aₕbₕ + aₕbₗ + aₗbₕ), which keeps
// float32 accuracy ("3xTF32"); without it one TF32 product each (Precision::Tf32).
//
// Fragment layouts (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, t = lane % 4:
//   A (16x8, rows):  a0 (g, t)  a1 (g+8, t)  a2 (g, t+4)  a3 (g+8, t+4)
//   B (8x8, cols):   b0 (k=t, n=g)  b1 (k=t+4, n=g)
//   C (16x8):        c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1)
// The scores come out in C's layout, and feed p v as A without a shuffle by renaming the
// keys of each group of eight: A's column t is key 2t and column t+4 is key 2t+1, so
// value rows are read in that order too.

constexpr int MMA_ROWS = 16;  // query rows per warp
constexpr int MMA_WARPS = 4;
constexpr int MMA_BK = 64;    // keys per tile (halved for wide heads)
constexpr int MMA_THREADS = 32 * MMA_WARPS;

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// x as TF32 high and low parts (the low part zero without SPLIT).
template <bool SPLIT>
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
  hi = to_tf32(x);
  lo = SPLIT ? to_tf32(x - __uint_as_float(hi)) : 0u;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a·b from both operands' parts: the small terms first, as they are the smaller.
template <bool SPLIT>
__device__ __forceinline__ void mma_parts(float (&c)[4], const unsigned (&a_hi)[4],
                                          const unsigned (&a_lo)[4], unsigned b0_hi,
                                          unsigned b0_lo, unsigned b1_hi, unsigned b1_lo) {
  if (SPLIT) {
    mma_tf32(c, a_lo, b0_hi, b1_hi);
    mma_tf32(c, a_hi, b0_lo, b1_lo);
  }
  mma_tf32(c, a_hi, b0_hi, b1_hi);
}

// A score under a mask value in the log2 domain the kernel's softmax works in.
template <typename T>
__device__ __forceinline__ float masked_log2(T m, float score) {
  return score + static_cast<float>(m) * 1.4426950408889634f;
}

template <>
__device__ __forceinline__ float masked_log2<bool>(bool m, float score) {
  return m ? score : minus_infinity();
}

// Stages keys (or values) t0 .. t0 + n of a head whose rows are `stride` floats apart, with
// unit feature stride and 16-byte alignment, as TF32 parts in padded shared-memory rows of
// RS words (zeros past n): one 16-byte load and one or two 16-byte stores per four features.
template <int D, int RS, bool SPLIT>
__device__ __forceinline__ void stage_rows_of_four(const float* head, long long stride, int t0,
                                                   int n, int bk, unsigned* hi_rows,
                                                   unsigned* lo_rows) {
  for (int e = threadIdx.x; e < bk * D / 4; e += MMA_THREADS) {
    const int j = e / (D / 4), d = 4 * (e % (D / 4));
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (j < n) x = *reinterpret_cast<const float4*>(head + static_cast<long long>(t0 + j) * stride + d);
    uint4 hi, lo;
    split_tf32<SPLIT>(x.x, hi.x, lo.x);
    split_tf32<SPLIT>(x.y, hi.y, lo.y);
    split_tf32<SPLIT>(x.z, hi.z, lo.z);
    split_tf32<SPLIT>(x.w, hi.w, lo.w);
    *reinterpret_cast<uint4*>(&hi_rows[j * RS + d]) = hi;
    if (SPLIT) *reinterpret_cast<uint4*>(&lo_rows[j * RS + d]) = lo;
  }
}

template <int DK, int DV, int MASK, int WINDOW, typename MaskT, bool SPLIT>
__device__ __forceinline__ void rlx_attention_mma(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const MaskT* __restrict__ mask, const float* __restrict__ scale_at, int hq, int hk,
    int sq, int sk, long long qb, long long qh, long long qs, long long qd, long long kb,
    long long kh, long long ks, long long kd, long long vb, long long vh, long long vs,
    long long vd, long long mb, long long mh, long long mi, long long mj,
    float* __restrict__ out) {
  static_assert(DK % 8 == 0 && DV % 8 == 0, "features come in groups of eight");
  constexpr int BQ = MMA_ROWS * MMA_WARPS;
  constexpr int KS = DK + 4;  // padded rows: conflict-free fragment reads
  constexpr int VS = DV + 4;
  // Tiles of 64 keys, or 32 where 64 would not fit the 48 KiB of static shared memory.
  constexpr int BK = (KS + VS) * (SPLIT ? 2 : 1) * 4 * MMA_BK <= 48 * 1024 - 512 ? MMA_BK : MMA_BK / 2;
  // Keys and values as TF32 parts, split once per tile rather than once per warp.
  __shared__ __align__(16) unsigned k_hi[BK * KS];
  __shared__ __align__(16) unsigned v_hi[BK * VS];
  __shared__ __align__(16) unsigned k_lo[SPLIT ? BK * KS : 4];
  __shared__ __align__(16) unsigned v_lo[SPLIT ? BK * VS : 4];
  __shared__ MaskT mask_tile[BK];

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int b = blockIdx.z;
  const int h = blockIdx.y;
  const int row0 = blockIdx.x * BQ;
  const int kv_head = h / (hq / hk);
  // The softmax works in base 2 (exp2 is one instruction): scores carry log2(e).
  const float scale = *scale_at * 1.4426950408889634f;
  const int offset = sk - sq;
  const bool mask_per_key = MASK == MASK_ARRAY && mi == 0;

  // This thread's two rows (g and g + 8 of its warp's sixteen).
  int rows[2];
  bool live[2];
  for (int r = 0; r < 2; ++r) {
    rows[r] = row0 + warp * MMA_ROWS + g + 8 * r;
    live[r] = rows[r] < sq;
  }

  int key_begin = 0;
  int key_end = sk;
  if (MASK == MASK_CAUSAL || MASK == MASK_WINDOW) {
    const int last = min(sq, row0 + BQ) - 1;
    key_end = max(0, min(sk, last + offset + 1));
  }
  if (MASK == MASK_WINDOW) key_begin = max(0, row0 + offset - WINDOW + 1);

  // The warp's query rows as A fragments, one per group of eight features.
  unsigned qa_hi[DK / 8][4], qa_lo[DK / 8][4];
  {
    const float* q_head = q + b * qb + h * qh;
#pragma unroll
    for (int s = 0; s < DK / 8; ++s) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i % 2;        // a0, a2: row g; a1, a3: row g + 8
        const int d = s * 8 + t + 4 * (i / 2);
        const float x = live[r] ? q_head[rows[r] * qs + d * qd] : 0.f;
        split_tf32<SPLIT>(x, qa_hi[s][i], qa_lo[s][i]);
      }
    }
  }

  float o[DV / 8][4];
#pragma unroll
  for (int n = 0; n < DV / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[n][i] = 0.f;
  float running_max[2] = {minus_infinity(), minus_infinity()};
  float running_sum[2] = {0.f, 0.f};  // this thread's share; the quad's add up at the end
  bool nan_seen[2] = {false, false};

  const float* k_head = k + b * kb + kv_head * kh;
  const float* v_head = v + b * vb + kv_head * vh;
  // Key and value rows of unit feature stride, 16-byte aligned, go to shared memory four
  // features at a time: the scalar copy below was the kernel's bottleneck (its index
  // arithmetic also cost registers): 1.7x slower at MiniLM's shape on an H100.
  const bool rows_of_four = DK % 4 == 0 && DV % 4 == 0 && kd == 1 && vd == 1 && ks % 4 == 0 &&
                            vs % 4 == 0 && reinterpret_cast<unsigned long long>(k_head) % 16 == 0 &&
                            reinterpret_cast<unsigned long long>(v_head) % 16 == 0;
  const MaskT* mask_rows[2] = {nullptr, nullptr};
  if (MASK == MASK_ARRAY) {
    for (int r = 0; r < 2; ++r) {
      mask_rows[r] = mask + b * mb + h * mh + static_cast<long long>(live[r] ? rows[r] : 0) * mi;
    }
  }

  for (int t0 = key_begin; t0 < key_end; t0 += BK) {
    const int n = min(BK, key_end - t0);
    __syncthreads();
    if (rows_of_four) {
      stage_rows_of_four<DK, KS, SPLIT>(k_head, ks, t0, n, BK, k_hi, k_lo);
      stage_rows_of_four<DV, VS, SPLIT>(v_head, vs, t0, n, BK, v_hi, v_lo);
    } else {
      for (int e = threadIdx.x; e < BK * DK; e += MMA_THREADS) {
        const int j = e / DK, d = e % DK;
        const float x = j < n ? k_head[static_cast<long long>(t0 + j) * ks + d * kd] : 0.f;
        unsigned hi, lo;
        split_tf32<SPLIT>(x, hi, lo);
        k_hi[j * KS + d] = hi;
        if (SPLIT) k_lo[j * KS + d] = lo;
      }
      for (int e = threadIdx.x; e < BK * DV; e += MMA_THREADS) {
        const int j = e / DV, d = e % DV;
        const float x = j < n ? v_head[static_cast<long long>(t0 + j) * vs + d * vd] : 0.f;
        unsigned hi, lo;
        split_tf32<SPLIT>(x, hi, lo);
        v_hi[j * VS + d] = hi;
        if (SPLIT) v_lo[j * VS + d] = lo;
      }
    }
    if (mask_per_key) {
      for (int j = threadIdx.x; j < n; j += MMA_THREADS) mask_tile[j] = mask_rows[0][(t0 + j) * mj];
    }
    __syncthreads();

    // Scores of the warp's 16 rows against the tile's keys, in C layout.
    float s[BK / 8][4];
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[nt][i] = 0.f;
      const int at = (nt * 8 + g) * KS + t;
#pragma unroll
      for (int st = 0; st < DK / 8; ++st) {
        const int i0 = at + st * 8, i1 = i0 + 4;
        mma_parts<SPLIT>(s[nt], qa_hi[st], qa_lo[st], k_hi[i0], SPLIT ? k_lo[i0] : 0u, k_hi[i1],
                         SPLIT ? k_lo[i1] : 0u);
      }
    }

    // Scale, mask, and the tile's maximum per row.
    float tile_max[2] = {minus_infinity(), minus_infinity()};
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i / 2;
        const int j = nt * 8 + 2 * t + (i % 2);
        const int key = t0 + j;
        float score = s[nt][i] * scale;
        bool visible = j < n && live[r];
        if (MASK == MASK_ARRAY && visible) {
          score = masked_log2<MaskT>(mask_per_key ? mask_tile[j] : mask_rows[r][key * mj], score);
        }
        if (MASK == MASK_CAUSAL || MASK == MASK_WINDOW) visible = visible && key <= rows[r] + offset;
        if (MASK == MASK_WINDOW) visible = visible && key > rows[r] + offset - WINDOW;
        score = visible ? score : minus_infinity();
        nan_seen[r] = nan_seen[r] || isnan(score);
        tile_max[r] = fmaxf(tile_max[r], score);
        s[nt][i] = score;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    }
    // The online softmax: rescale what came before when the maximum grows.
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_max = fmaxf(running_max[r], tile_max[r]);
      // Nothing visible so far: no rescale, and exp(-inf - -inf) must not make NaN.
      const float alpha = new_max == minus_infinity() ? 1.f : exp2f(running_max[r] - new_max);
      running_sum[r] *= alpha;
#pragma unroll
      for (int nt = 0; nt < DV / 8; ++nt) {
        o[nt][2 * r] *= alpha;
        o[nt][2 * r + 1] *= alpha;
      }
      running_max[r] = new_max;
      base[r] = new_max == minus_infinity() ? 0.f : new_max;
    }

    // p v, eight keys at a time: p's C fragments are the A fragments of the renamed keys.
#pragma unroll
    for (int kt = 0; kt < BK / 8; ++kt) {
      float p[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        p[i] = exp2f(s[kt][i] - base[i / 2]);
        running_sum[i / 2] += p[i];
      }
      unsigned pa_hi[4], pa_lo[4];
      // A order: (g, key 2t), (g+8, key 2t), (g, key 2t+1), (g+8, key 2t+1).
      split_tf32<SPLIT>(p[0], pa_hi[0], pa_lo[0]);
      split_tf32<SPLIT>(p[2], pa_hi[1], pa_lo[1]);
      split_tf32<SPLIT>(p[1], pa_hi[2], pa_lo[2]);
      split_tf32<SPLIT>(p[3], pa_hi[3], pa_lo[3]);
      const int at = (kt * 8 + 2 * t) * VS + g;
#pragma unroll
      for (int nt = 0; nt < DV / 8; ++nt) {
        const int i0 = at + nt * 8, i1 = i0 + VS;
        mma_parts<SPLIT>(o[nt], pa_hi, pa_lo, v_hi[i0], SPLIT ? v_lo[i0] : 0u, v_hi[i1],
                         SPLIT ? v_lo[i1] : 0u);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    running_sum[r] += __shfl_xor_sync(0xffffffffu, running_sum[r], 1);
    running_sum[r] += __shfl_xor_sync(0xffffffffu, running_sum[r], 2);
    bool nan_any = nan_seen[r];
    nan_any = nan_any || __shfl_xor_sync(0xffffffffu, nan_any, 1);
    nan_any = nan_any || __shfl_xor_sync(0xffffffffu, nan_any, 2);
    if (!live[r]) continue;
    const float inv = running_sum[r] > 0.f ? 1.f / running_sum[r] : 0.f;
    float* out_row = out + ((static_cast<long long>(b) * sq + rows[r]) * hq + h) * DV;
#pragma unroll
    for (int nt = 0; nt < DV / 8; ++nt) {
      const float x0 = nan_any ? quiet_nan() : o[nt][2 * r] * inv;
      const float x1 = nan_any ? quiet_nan() : o[nt][2 * r + 1] * inv;
      out_row[nt * 8 + 2 * t] = x0;
      out_row[nt * 8 + 2 * t + 1] = x1;
    }
  }
}

}  // namespace rlx_attention

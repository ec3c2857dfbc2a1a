// A decoder block's queries, keys and values for the rows of a decoding step, straight from
// the rows and the block's joined q/k/v weight, for NVIDIA GPUs: `q[b, h, s, :]` is the
// rotation (cpp/rope_heads.cu's) of `x[b, s] · w[:, QCOL + h * D ..][..D]`, `k` likewise
// from KCOL, and `v[b, h, s, :]` the product's columns from VCOL unrotated, each written
// heads-first. One kernel in place of the joined product, the rotation kernel and the
// values' column slice, head split and transpose: a decoding step launches one kernel fewer
// a block and builds five fewer MLX nodes (decision 048; RLX_MLX_ROTATED_ROWS=0 turns it
// off).
//
// Each warp owns one unit: a rotated pair of columns of one query or key head (both columns
// read once for all rows, then turned), or one column written as it is (features past the
// rotated ones, and every value column). After the warp's sums every lane holds every row's
// totals; lane r writes row r. No includes: NVRTC compiles it after cpp/columns.cu and
// cpp/rope_heads.cu, through `mx::fast::cuda_kernel`.

namespace rlx_rotated {

// A warp's unit: its column or columns of the whole product, and where they go.
struct Unit {
  int first;       // the first column of the product
  int second;      // the column turned with it, or -1 (the first written as it is)
  int pair;        // the rotated pair's index (where `second` is a column)
  int out;         // 0: q, 1: k, 2: v
  int head;        // the head within its output
  int f_first;     // the features of the head the columns go to
  int f_second;
};

// Unit `u` of HQ query and HK key heads (each DIMS / 2 rotated pairs, then D - DIMS
// features as they are) and HK value heads (D features each); `u` is below their count.
template <int HQ, int HK, int D, int DIMS, int QCOL, int KCOL, int VCOL, bool TRADITIONAL>
__device__ __forceinline__ Unit unit(int u) {
  constexpr int HALF = DIMS / 2, SLOTS = HALF + (D - DIMS);
  Unit at;
  if (u >= (HQ + HK) * SLOTS) {  // a value column
    const int c = u - (HQ + HK) * SLOTS;
    at.out = 2;
    at.head = c / D;
    at.f_first = c % D;
    at.first = VCOL + c;
    at.second = at.f_second = at.pair = -1;
    return at;
  }
  const int slot = u % SLOTS, head = u / SLOTS;
  at.out = head < HQ ? 0 : 1;
  at.head = head < HQ ? head : head - HQ;
  const int start = (head < HQ ? QCOL : KCOL) + at.head * D;
  if (slot >= HALF) {  // a feature past the rotated ones
    at.f_first = DIMS + (slot - HALF);
    at.first = start + at.f_first;
    at.second = at.f_second = at.pair = -1;
    return at;
  }
  at.pair = slot;
  at.f_first = TRADITIONAL ? 2 * slot : slot;
  at.f_second = TRADITIONAL ? 2 * slot + 1 : slot + HALF;
  at.first = start + at.f_first;
  at.second = start + at.f_second;
  return at;
}

// Units of HQ + HK heads and their HK value heads.
template <int HQ, int HK, int D, int DIMS>
__device__ __forceinline__ int unit_count() {
  return (HQ + HK) * (DIMS / 2 + D - DIMS) + HK * D;
}

// The rotation of unit `at` for this lane's row (lane r < ROWS: row r, at position
// `offset + r % seq`), computed before the warp's sums so that its float64 arithmetic
// overlaps their loads; (1, 0) where the unit is not rotated or the lane has no row.
template <int ROWS, int DIMS, bool PER_ROW, bool PERIODS, int BASE_BITS, int SCALE_BITS,
          typename OffT>
__device__ __forceinline__ void lane_turn(const Unit& at, const OffT* offset, const float* periods,
                                          int seq, float* cs, float* sn) {
  const int lane = threadIdx.x % 32;
  *cs = 1.f;
  *sn = 0.f;
  if (at.second < 0 || lane >= ROWS) return;
  const int b = lane / seq, s = lane % seq;
  rlx_rope::turn<DIMS, PERIODS, BASE_BITS, SCALE_BITS>(
      at.pair, static_cast<double>(offset[PER_ROW ? b : 0]) + s, periods, cs, sn);
}

// Sums the warp's partial products of unit `at` (`sums[0]` and, for a pair, `sums[1]`:
// ROWS each) and writes them: lane r row r, at batch row r / seq and position r % seq,
// turned by the lane's rotation (`cs`, `sn`).
template <int ROWS, int HQ, int HK, int D>
__device__ __forceinline__ void write_unit(const Unit& at, const float (*sums)[ROWS], float cs,
                                           float sn, int seq, float* q, float* k, float* v) {
  const int lane = threadIdx.x % 32;
  const int heads = at.out == 0 ? HQ : HK;
  float* base = at.out == 0 ? q : at.out == 1 ? k : v;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const float a = rlx_columns::warp_sum(sums[0][r]);
    const float z = at.second >= 0 ? rlx_columns::warp_sum(sums[1][r]) : 0.f;
    if (lane != r) continue;
    const int b = r / seq, s = r % seq;
    float* out = base + ((static_cast<long long>(b) * heads + at.head) * seq + s) * D;
    if (at.second < 0) {
      out[at.f_first] = a;
      continue;
    }
    out[at.f_first] = a * cs - z * sn;
    out[at.f_second] = a * sn + z * cs;
  }
}

// Float32 weights `w` ([k, n] when K_FIRST, a product's right operand, else [n, k]; any
// strides) and rows `x` ([B, S, k], B * S = ROWS, any strides; its shape and strides as
// MLX passes them). WARPS warps a block, one unit each. q: [B, HQ, S, D], k and v:
// [B, HK, S, D].
template <int ROWS, int WARPS, int HQ, int HK, int D, int DIMS, int QCOL, int KCOL, int VCOL,
          bool TRADITIONAL, bool PER_ROW, bool PERIODS, int BASE_BITS, int SCALE_BITS,
          bool K_FIRST, typename OffT, class XShape, class XStrides, class WStrides>
__device__ void rotated_rows(const float* x, const XShape& x_shape, const XStrides& x_strides,
                             const float* w, const WStrides& w_strides, const OffT* offset,
                             const float* periods, float* q, float* k, float* v) {
  const int u = blockIdx.x * WARPS + threadIdx.x / 32;
  if (u >= unit_count<HQ, HK, D, DIMS>()) return;
  const Unit at = unit<HQ, HK, D, DIMS, QCOL, KCOL, VCOL, TRADITIONAL>(u);
  const int depth = x_shape[2];
  const long long x_step = x_strides[2];
  const long long w_k = K_FIRST ? w_strides[0] : w_strides[1];
  const long long w_n = K_FIRST ? w_strides[1] : w_strides[0];
  long long row[ROWS];
  rlx_columns::row_starts<ROWS>(x_shape, x_strides, 3, row);
  const float* first = w + static_cast<long long>(at.first) * w_n;
  const float* second = w + static_cast<long long>(at.second < 0 ? at.first : at.second) * w_n;
  const bool vector = rlx_columns::vector_rows<ROWS>(x, row, x_step, w_k, depth) &&
                      rlx_columns::aligned16(first) && rlx_columns::aligned16(second);
  float cs, sn;
  lane_turn<ROWS, DIMS, PER_ROW, PERIODS, BASE_BITS, SCALE_BITS>(at, offset, periods, x_shape[1],
                                                                 &cs, &sn);
  const float* columns[2] = {first, second};
  float sums[2][ROWS] = {};
  if (at.second >= 0) {
    rlx_columns::float_columns<ROWS, 2>(x, row, x_step, columns, w_k, depth, vector, sums);
  } else {
    rlx_columns::float_columns<ROWS, 1>(x, row, x_step, columns, w_k, depth, vector, sums);
  }
  write_unit<ROWS, HQ, HK, D>(at, sums, cs, sn, x_shape[1], q, k, v);
}

// Weights in MLX's affine groups of 32 (as cpp/columns.cu reads them), `x`
// contiguous ([B, S, depth], depth a multiple of 32).
template <int ROWS, int BITS, int WARPS, int HQ, int HK, int D, int DIMS, int QCOL, int KCOL,
          int VCOL, bool TRADITIONAL, bool PER_ROW, bool PERIODS, int BASE_BITS, int SCALE_BITS,
          typename OffT>
__device__ void rotated_quantized_rows(const float* x, const unsigned* words, const float* scales,
                                       const float* biases, int seq, int depth, const OffT* offset,
                                       const float* periods, float* q, float* k, float* v) {
  const int u = blockIdx.x * WARPS + threadIdx.x / 32;
  if (u >= unit_count<HQ, HK, D, DIMS>()) return;
  const Unit at = unit<HQ, HK, D, DIMS, QCOL, KCOL, VCOL, TRADITIONAL>(u);
  const bool aligned = rlx_columns::aligned16(x);
  float cs, sn;
  lane_turn<ROWS, DIMS, PER_ROW, PERIODS, BASE_BITS, SCALE_BITS>(at, offset, periods, seq, &cs,
                                                                 &sn);
  const long long columns[2] = {at.first, at.second};
  float sums[2][ROWS] = {};
  if (at.second >= 0) {
    rlx_columns::quantized_columns<ROWS, BITS, 2>(x, words, scales, biases, columns, depth,
                                                  aligned, sums);
  } else {
    rlx_columns::quantized_columns<ROWS, BITS, 1>(x, words, scales, biases, columns, depth,
                                                  aligned, sums);
  }
  write_unit<ROWS, HQ, HK, D>(at, sums, cs, sn, seq, q, k, v);
}

}  // namespace rlx_rotated

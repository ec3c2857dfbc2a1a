// Runs cpp/rotated_rows.cu on the CPU (emulator.h) against float64: a block's queries and
// keys rotated and its values as they are, from rows times a joined q/k/v weight, written
// heads-first. Rows of one or several positions and batch rows, one position or one per
// batch row, both pairings of features, part of the features rotated, periods given and a
// scale; float32 weights stored either way and read either way, activations aligned,
// misaligned and strided; weights in affine groups of 4 and 8 bits. The exit status is the
// number of failures. Built and run by tests/cuda_emulation.rs.
#include <array>
#include <cstdint>
#include <functional>
#include <random>

#include "emulator.h"

#include "../../cpp/columns.cu"
#include "../../cpp/rope_heads.cu"
#include "../../cpp/rotated_rows.cu"

constexpr int kWarps = 8;

constexpr int bits(float f) { return __builtin_bit_cast(int, f); }

// `x`: [batch, seq, k] with value stride `step`, starting `skew` floats into its storage.
struct Rows {
  std::vector<float> storage;
  const float* x;
  int batch, seq, k;
  std::array<int, 3> shape;
  std::array<long long, 3> strides;
  double at(int r, int j) const { return x[r * strides[1] + j * strides[2]]; }
};

Rows rows_of(int batch, int seq, int k, int step, int skew, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  Rows r;
  const long long row_stride = static_cast<long long>(k) * step;
  const int rows = batch * seq;
  r.storage.assign(rows * row_stride + 8, NAN);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < k; ++j) r.storage[skew + i * row_stride + j * step] = uniform(rng);
  r.x = r.storage.data() + skew;
  r.batch = batch;
  r.seq = seq;
  r.k = k;
  r.shape = {batch, seq, k};
  r.strides = {seq * row_stride, row_stride, step};
  return r;
}

// What a case's heads are: the kernel's template arguments as values.
struct Heads {
  int hq, hk, d, dims, qcol, kcol, vcol;
  bool traditional, per_row, given_periods;
  float base, scale;
};

// The largest difference of q, k and v from float64, relative to the sum of the magnitudes
// of the terms of the products that make each output (a rotation's two products' sums, as
// cosine and sine are at most 1). `weight(kk, c)` is W's value at (kk, column c).
double compare(const Rows& x, const Heads& h, const std::vector<long long>& offsets,
               const std::vector<float>& periods, const std::function<double(int, int)>& weight,
               const std::vector<float>& q, const std::vector<float>& k,
               const std::vector<float>& v) {
  double worst = 0;
  auto see = [&](double got, double want, double scale) {
    const double d = std::fabs(got - want) / (scale + 1e-30);
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  };
  const int rows = x.batch * x.seq;
  for (int r = 0; r < rows; ++r) {
    const int b = r / x.seq, s = r % x.seq;
    auto product = [&](int c, double* magnitude) {
      double sum = 0, m = 0;
      for (int i = 0; i < x.k; ++i) {
        sum += x.at(r, i) * weight(i, c);
        m += std::fabs(x.at(r, i) * weight(i, c));
      }
      *magnitude = m;
      return sum;
    };
    auto check = [&](int heads, int col, const std::vector<float>& out, bool rotated) {
      for (int head = 0; head < heads; ++head) {
        const float* got = &out[((static_cast<size_t>(b) * heads + head) * x.seq + s) * h.d];
        const int start = col + head * h.d;
        for (int f = rotated ? h.dims : 0; f < h.d; ++f) {
          double m;
          const double want = product(start + f, &m);
          see(got[f], want, m);
        }
        if (!rotated) continue;
        for (int i = 0; i < h.dims / 2; ++i) {
          const int a = h.traditional ? 2 * i : i, z = h.traditional ? 2 * i + 1 : i + h.dims / 2;
          const double period = h.given_periods ? periods[i] : std::pow(double(h.base), 2.0 * i / h.dims);
          const double angle = (double(offsets[h.per_row ? b : 0]) + s) * h.scale / period;
          double ma, mz;
          const double pa = product(start + a, &ma), pz = product(start + z, &mz);
          see(got[a], pa * std::cos(angle) - pz * std::sin(angle), ma + mz);
          see(got[z], pa * std::sin(angle) + pz * std::cos(angle), ma + mz);
        }
      }
    };
    check(h.hq, h.qcol, q, true);
    check(h.hk, h.kcol, k, true);
    check(h.hk, h.vcol, v, false);
  }
  return worst;
}

// The outputs of one case, NaN until written; the emulated launch over every unit.
struct Outputs {
  std::vector<float> q, k, v;
  Outputs(const Rows& x, const Heads& h)
      : q(static_cast<size_t>(x.batch) * h.hq * x.seq * h.d, NAN),
        k(static_cast<size_t>(x.batch) * h.hk * x.seq * h.d, NAN),
        v(k.size(), NAN) {}
};

template <class Body>
void launch(int units, Body&& body) {
  const int blocks = (units + kWarps - 1) / kWarps;
  gridDim = {blocks, 1, 1};
  for (int b = 0; b < blocks; ++b) run_block({b, 0, 0}, kWarps * 32, body);
}

std::vector<float> periods_of(int dims) {
  std::vector<float> p(dims / 2);
  for (int i = 0; i < dims / 2; ++i) p[i] = std::pow(3.0f + i, 1.5f);
  return p;
}

// Float32 weights of `n` columns stored column by column ([n, k], `by_column`) or row by
// row ([k, n]); the kernel reads them as [k, n] (K_FIRST) or [n, k].
template <int ROWS, int HQ, int HK, int D, int DIMS, int QCOL, int KCOL, int VCOL, bool TRADITIONAL,
          bool PER_ROW, bool PERIODS, int BASE_BITS, int SCALE_BITS, bool K_FIRST>
double run_float(int batch, int k, int n, int step, int skew, bool by_column,
                 std::vector<long long> offsets) {
  static_assert(ROWS >= 1 && ROWS <= 8);
  const Heads h{HQ, HK, D, DIMS, QCOL, KCOL, VCOL, TRADITIONAL, PER_ROW, PERIODS,
                __int_as_float(BASE_BITS), __int_as_float(SCALE_BITS)};
  std::mt19937 rng(static_cast<unsigned>(k * 31 + n * 7 + ROWS + step + skew + by_column));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const Rows x = rows_of(batch, ROWS / batch, k, step, skew, rng);
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (auto& value : w) value = 0.2f * uniform(rng);
  const long long along_k = by_column ? 1 : n, along_n = by_column ? k : 1;
  auto weight = [&](int kk, int c) { return double(w[kk * along_k + c * along_n]); };
  const std::array<long long, 2> w_strides =
      K_FIRST ? std::array<long long, 2>{along_k, along_n} : std::array<long long, 2>{along_n, along_k};
  const std::vector<float> periods = periods_of(DIMS);
  Outputs out(x, h);
  launch(rlx_rotated::unit_count<HQ, HK, D, DIMS>(), [&] {
    rlx_rotated::rotated_rows<ROWS, kWarps, HQ, HK, D, DIMS, QCOL, KCOL, VCOL, TRADITIONAL, PER_ROW,
                              PERIODS, BASE_BITS, SCALE_BITS, K_FIRST, long long>(
        x.x, x.shape, x.strides, w.data(), w_strides, offsets.data(), periods.data(), out.q.data(),
        out.k.data(), out.v.data());
  });
  return compare(x, h, offsets, periods, weight, out.q, out.k, out.v);
}

// Affine groups of 32 over `n` columns.
template <int ROWS, int BITS, int HQ, int HK, int D, int DIMS, int QCOL, int KCOL, int VCOL,
          bool PER_ROW>
double run_quantized(int batch, int k, int n, bool aligned, std::vector<long long> offsets) {
  constexpr int kBase = bits(10000.f), kOne = bits(1.f);
  const Heads h{HQ, HK, D, DIMS, QCOL, KCOL, VCOL, false, PER_ROW, false, 10000.f, 1.f};
  std::mt19937 rng(static_cast<unsigned>(k * 31 + n * 7 + ROWS + BITS));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const int per_word = 32 / BITS;
  std::vector<uint32_t> words(static_cast<size_t>(n) * k / per_word);
  for (auto& word : words) word = static_cast<uint32_t>(rng());
  std::vector<float> scales(static_cast<size_t>(n) * k / 32), biases(scales.size());
  for (auto& s : scales) s = 0.02f * uniform(rng);
  for (auto& b : biases) b = 0.1f * uniform(rng);
  const Rows x = rows_of(batch, ROWS / batch, k, 1, aligned ? 0 : 1, rng);
  auto weight = [&](int kk, int c) {
    const uint32_t word = words[static_cast<size_t>(c) * (k / per_word) + kk / per_word];
    const uint32_t q = (word >> (BITS * (kk % per_word))) & ((1u << BITS) - 1u);
    const size_t g = static_cast<size_t>(c) * (k / 32) + kk / 32;
    return double(scales[g]) * q + biases[g];
  };
  const std::vector<float> periods;
  Outputs out(x, h);
  launch(rlx_rotated::unit_count<HQ, HK, D, DIMS>(), [&] {
    rlx_rotated::rotated_quantized_rows<ROWS, BITS, kWarps, HQ, HK, D, DIMS, QCOL, KCOL, VCOL, false,
                                        PER_ROW, false, kBase, kOne, long long>(
        x.x, words.data(), scales.data(), biases.data(), x.seq, k, offsets.data(), nullptr,
        out.q.data(), out.k.data(), out.v.data());
  });
  return compare(x, h, offsets, periods, weight, out.q, out.k, out.v);
}

int main() {
  int failures = 0;
  // Each term rounds once and the float32 sums over up to 576 terms a few units of float32
  // rounding of the magnitudes' sum; the rotation a few more.
  auto check = [&](const char* name, double worst) { failures += report(name, worst, 1e-5); };
  constexpr int kBase = bits(100000.f), kOne = bits(1.f), kQuarter = bits(0.25f);
  // SmolLM2: 9 query and 3 key heads of 64, the values after them (960 columns).
  check("SmolLM2's decoding step, [k, n] view of [n, k]",
        run_float<1, 9, 3, 64, 64, 0, 576, 768, false, false, false, kBase, kOne, true>(
            1, 576, 960, 1, 0, true, {137}));
  check("8 batch rows at their own positions, [k, n] stored so",
        run_float<8, 2, 1, 16, 16, 0, 32, 48, false, true, false, kBase, kOne, true>(
            8, 96, 64, 1, 0, false, {0, 5, 17, 100, 3, 4000, 9, 1}));
  check("3 positions, adjacent pairs, half rotated, periods and a scale, [n, k]",
        run_float<3, 3, 1, 16, 8, 0, 48, 64, true, false, true, kBase, kQuarter, false>(
            1, 40, 80, 1, 0, true, {11}));
  check("2 batch rows of 2 positions, strided rows, columns not at the start",
        run_float<4, 2, 2, 8, 8, 8, 24, 40, false, true, false, kBase, kOne, false>(
            2, 33, 56, 2, 0, true, {7, 70}));
  check("misaligned rows, [k, n] view of [n, k]",
        run_float<2, 2, 1, 8, 6, 0, 16, 24, false, false, false, kBase, kOne, true>(
            1, 64, 32, 1, 1, true, {2}));
  check("SmolLM2's decoding step, 4 bits",
        run_quantized<1, 4, 9, 3, 64, 64, 0, 576, 768, false>(1, 576, 960, true, {300}));
  check("4 batch rows at their own positions, 8 bits, misaligned",
        run_quantized<4, 8, 2, 1, 16, 16, 0, 32, 48, true>(4, 64, 64, false, {1, 2, 30, 400}));
  return failures;
}

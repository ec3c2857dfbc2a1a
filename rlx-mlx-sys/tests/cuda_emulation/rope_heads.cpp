// Runs cpp/rope_heads.cu on the CPU (emulator.h) against a float64 reference of the IR's
// rotation, read from rows of a joined q/k/v product and written heads-first. The exit
// status is the number of failures. Built and run by tests/cuda_emulation.rs.
#include <random>

#include "emulator.h"

#include "../../cpp/rope_heads.cu"

constexpr int bits(float f) {
  return __builtin_bit_cast(int, f);
}

struct Case {
  int batch, seq, width;
  std::vector<long long> offsets;  // one, or one per batch row
};

// Every output of the kernel at these template arguments for `c`, against float64; returns
// the largest difference relative to the pair's magnitude (infinity when a copied feature
// or an untouched output differs).
template <int HQ, int HK, int D, int DIMS, int QCOL, int KCOL, bool TRADITIONAL, bool PER_ROW,
          bool PERIODS, int BASE_BITS, int SCALE_BITS>
double run(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.batch * 977 + c.seq * 31 + c.width + DIMS));
  std::uniform_real_distribution<float> uniform(-2.f, 2.f);
  std::vector<float> x(static_cast<size_t>(c.batch) * c.seq * c.width);
  for (auto& v : x) v = uniform(rng);
  std::vector<float> periods(DIMS / 2);
  for (int i = 0; i < DIMS / 2; ++i) periods[i] = std::pow(3.0f + i, 1.5f);
  std::vector<float> q(static_cast<size_t>(c.batch) * HQ * c.seq * D, NAN);
  std::vector<float> k(static_cast<size_t>(c.batch) * HK * c.seq * D, NAN);
  const long long total = static_cast<long long>(c.batch) * c.seq * (HQ + HK) * (DIMS / 2 + D - DIMS);
  constexpr int threads = 256;
  blockDim = {threads, 1, 1};
  for (long long block = 0; block * threads < total + threads; ++block) {
    blockIdx = {static_cast<int>(block), 0, 0};
    for (int t = 0; t < threads; ++t) {
      threadIdx = {t, 0, 0};
      rlx_rope::rope_heads<HQ, HK, D, DIMS, QCOL, KCOL, TRADITIONAL, PER_ROW, PERIODS, BASE_BITS,
                           SCALE_BITS, long long>(x.data(), c.offsets.data(), periods.data(),
                                                  c.batch, c.seq, c.width, q.data(), k.data());
    }
  }
  const double base = __int_as_float(BASE_BITS), scale = __int_as_float(SCALE_BITS);
  double worst = 0;
  auto check = [&](int heads, int col, const std::vector<float>& out) {
    for (int b = 0; b < c.batch; ++b) {
      for (int h = 0; h < heads; ++h) {
        for (int s = 0; s < c.seq; ++s) {
          const float* in = &x[(static_cast<size_t>(b) * c.seq + s) * c.width + col + h * D];
          const float* got = &out[((static_cast<size_t>(b) * heads + h) * c.seq + s) * D];
          for (int f = DIMS; f < D; ++f) {
            if (got[f] != in[f]) worst = INFINITY;
          }
          for (int i = 0; i < DIMS / 2; ++i) {
            const int a = TRADITIONAL ? 2 * i : i, z = TRADITIONAL ? 2 * i + 1 : i + DIMS / 2;
            const double period = PERIODS ? periods[i] : std::pow(base, 2.0 * i / DIMS);
            const double angle = (static_cast<double>(c.offsets[PER_ROW ? b : 0]) + s) * scale / period;
            const double want_a = in[a] * std::cos(angle) - in[z] * std::sin(angle);
            const double want_z = in[a] * std::sin(angle) + in[z] * std::cos(angle);
            const double size = std::fabs(in[a]) + std::fabs(in[z]) + 1e-30;
            if (std::isnan(got[a]) || std::isnan(got[z])) return void(worst = INFINITY);
            worst = std::max(worst, std::fabs(got[a] - want_a) / size);
            worst = std::max(worst, std::fabs(got[z] - want_z) / size);
          }
        }
      }
    }
  };
  check(HQ, QCOL, q);
  check(HK, KCOL, k);
  return worst;
}

int main() {
  int failures = 0;
  auto report = [&](const char* name, double worst) {
    // Each output is two float32 products and a difference of float32 values within 2 of
    // the pair's magnitude, from a float64 angle: a few float32 roundings.
    const bool ok = worst <= 4e-7;
    std::printf("%s %s: largest relative difference %g\n", ok ? "ok" : "FAILED", name, worst);
    failures += ok ? 0 : 1;
  };
  constexpr int kBase = bits(100000.f), kOne = bits(1.f), kQuarter = bits(0.25f);
  // SmolLM2: 9 query and 3 key heads of 64, values after them (width 960).
  report("SmolLM2's decoding step",
         run<9, 3, 64, 64, 0, 576, false, false, false, kBase, kOne>({1, 1, 960, {137}}));
  report("a prefill of 5 positions",
         run<9, 3, 64, 64, 0, 576, false, false, false, kBase, kOne>({1, 5, 960, {0}}));
  report("adjacent pairs", run<4, 2, 16, 16, 0, 64, true, false, false, kBase, kOne>({2, 3, 128, {9}}));
  report("a rotation of half the features",
         run<4, 2, 16, 8, 0, 64, false, false, false, bits(10000.f), kOne>({1, 2, 100, {3}}));
  report("one position per batch row",
         run<2, 1, 8, 8, 0, 16, false, true, false, kBase, kOne>({3, 2, 32, {0, 40, 1000}}));
  report("periods given and positions scaled",
         run<2, 2, 8, 8, 0, 16, false, false, true, kBase, kQuarter>({1, 3, 40, {5000}}));
  report("columns not at the start",
         run<3, 1, 8, 8, 8, 40, true, false, false, kBase, kOne>({2, 2, 56, {7}}));
  return failures;
}

// Runs cpp/residual_norm.cu on the CPU (emulator.h) against a float64 reference: the sum
// bit for bit (one float add), the norm within float32 rounding. The exit status is the
// number of failures. Built and run by tests/cuda_emulation.rs.
#include <random>

#include "emulator.h"

#include "../../cpp/residual_norm.cu"

// 1e-5f, as its bits (the kernel takes epsilon as a template argument).
constexpr int kEpsBits = 0x3727c5ac;

// Rows of `width` through the kernel at THREADS threads a block; returns the largest
// relative difference of the norm from float64, or infinity when a sum is not a + b.
template <int THREADS, int PER>
double run(int rows, int width, float scale) {
  std::mt19937 rng(static_cast<unsigned>(rows * 131 + width));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> a(rows * width), b(rows * width), w(width);
  for (auto& x : a) x = uniform(rng) * scale;
  for (auto& x : b) x = uniform(rng) * scale;
  for (auto& x : w) x = 1.f + uniform(rng);
  const float eps = __int_as_float(kEpsBits);
  std::vector<float> sum(rows * width, -7.f), out(rows * width, -7.f);
  gridDim = {rows, 1, 1};
  for (int r = 0; r < rows; ++r) {
    run_block({r, 0, 0}, THREADS, [&] {
      rlx_norm::add_rms_norm<THREADS, PER, kEpsBits>(a.data(), b.data(), w.data(), width,
                                                     sum.data(), out.data());
    });
  }
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    double squares = 0;
    for (int i = 0; i < width; ++i) {
      const float s = a[r * width + i] + b[r * width + i];
      if (sum[r * width + i] != s) return INFINITY;
      squares += double(s) * s;
    }
    const double scale_back = 1.0 / std::sqrt(squares / width + eps);
    for (int i = 0; i < width; ++i) {
      const double want = double(sum[r * width + i]) * scale_back * w[i];
      const double got = out[r * width + i];
      worst = std::max(worst, std::fabs(got - want) / (std::fabs(want) + 1e-30));
    }
  }
  return worst;
}

int main() {
  int failures = 0;
  auto check = [&](const char* name, double worst) {
    // A few float32 roundings of a product and a sum of squares over at most 2,049 terms.
    const bool ok = worst <= 2e-6;
    std::printf("%s %s: largest relative difference %g\n", ok ? "ok" : "FAILED", name, worst);
    failures += ok ? 0 : 1;
  };
  // PER as the shim picks it: the values a thread keeps in registers, 0 to loop.
  check("SmolLM2's width, one row", run<128, 5>(1, 576, 1.f));
  check("SmolLM2's width, looping", run<128, 0>(1, 576, 1.f));
  check("eight rows", run<128, 5>(8, 576, 1.f));
  check("a width not a multiple of the block", run<128, 0>(3, 2049, 1.f));
  check("the widest row kept in registers", run<128, 8>(2, 1024, 1.f));
  check("fewer columns than threads", run<128, 1>(2, 5, 1.f));
  check("a block of 32", run<32, 4>(2, 100, 1.f));
  check("large values", run<128, 5>(2, 576, 1e15f));
  check("tiny values, eps decides", run<128, 5>(2, 576, 1e-6f));
  return failures;
}

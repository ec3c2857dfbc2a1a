// Runs cpp/quantized_rows.cu on the CPU (emulator.h) against a float64 product of the same
// quantized weights: 1, 3 and 8 rows, 4 and 8 bits, columns that fill whole blocks of warps
// and columns that leave most of a block idle, the shortest row (one group) and SmolLM2's,
// activations 16-byte aligned (vector loads) and not. The exit status is the number of
// failures. Built and run by tests/cuda_emulation.rs.
#include <cstdint>
#include <random>

#include "emulator.h"

#include "../../cpp/columns.cu"
#include "../../cpp/quantized_rows.cu"

constexpr int kWarps = 8;

// Largest difference from float64, relative to the sum of the terms' magnitudes.
template <int ROWS, int BITS>
double run(int n, int k, bool aligned) {
  std::mt19937 rng(static_cast<unsigned>(n * 7919 + k * 31 + ROWS * 3 + BITS));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const int per_word = 32 / BITS;
  std::vector<uint32_t> words(static_cast<size_t>(n) * k / per_word);
  for (auto& w : words) w = static_cast<uint32_t>(rng());
  std::vector<float> scales(static_cast<size_t>(n) * k / 32), biases(scales.size());
  for (auto& s : scales) s = 0.1f * uniform(rng);
  for (auto& b : biases) b = uniform(rng);
  // A float in front of the rows makes them misaligned for the vector loads.
  std::vector<float> storage(ROWS * k + 4);
  float* x = storage.data() + (aligned ? 0 : 1);
  for (int i = 0; i < ROWS * k; ++i) x[i] = uniform(rng);
  std::vector<float> out(static_cast<size_t>(ROWS) * n, NAN);
  const int blocks = (n + kWarps - 1) / kWarps;
  gridDim = {blocks, 1, 1};
  for (int b = 0; b < blocks; ++b) {
    run_block({b, 0, 0}, kWarps * 32, [&] {
      rlx_qrows::quantized_rows<ROWS, BITS, kWarps>(x, words.data(), scales.data(), biases.data(),
                                                     n, k, out.data());
    });
  }
  double worst = 0;
  for (int r = 0; r < ROWS; ++r) {
    for (int c = 0; c < n; ++c) {
      double want = 0, magnitude = 0;
      for (int i = 0; i < k; ++i) {
        const uint32_t word = words[static_cast<size_t>(c) * (k / per_word) + i / per_word];
        const uint32_t q = (word >> (BITS * (i % per_word))) & ((1u << BITS) - 1u);
        const size_t g = static_cast<size_t>(c) * (k / 32) + i / 32;
        const double term = double(x[r * k + i]) * (double(scales[g]) * q + biases[g]);
        want += term;
        magnitude += std::fabs(term);
      }
      const double got = out[static_cast<size_t>(r) * n + c];
      const double difference = std::fabs(got - want) / magnitude;
      if (!(difference <= worst)) worst = std::isnan(difference) ? INFINITY : difference;
    }
  }
  return worst;
}

int main() {
  int failures = 0;
  // Each weight rounds once (scale * q + bias), each term once, and the float32 sums over
  // 576 terms a few units of float32 rounding of the magnitudes' sum.
  auto check = [&](const char* name, double worst) { failures += report(name, worst, 1e-5); };
  for (bool aligned : {true, false}) {
    auto named = [&](const char* what, double worst) {
      char name[128];
      std::snprintf(name, sizeof name, "%s, %s", what, aligned ? "aligned" : "misaligned");
      check(name, worst);
    };
    named("1 row, 4 bits, SmolLM2's width", run<1, 4>(200, 576, aligned));
    named("1 row, 8 bits, one group, 9 columns", run<1, 8>(9, 32, aligned));
    named("3 rows, 4 bits, one group, 9 columns", run<3, 4>(9, 32, aligned));
    named("3 rows, 8 bits, SmolLM2's width", run<3, 8>(200, 576, aligned));
    named("8 rows, 4 bits, SmolLM2's width", run<8, 4>(200, 576, aligned));
    named("8 rows, 8 bits, 9 columns", run<8, 8>(9, 576, aligned));
  }
  return failures;
}

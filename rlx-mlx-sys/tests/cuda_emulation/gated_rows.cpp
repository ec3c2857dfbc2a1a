// Runs cpp/gated_rows.cu on the CPU (emulator.h) against float64: act(x · gate) * (x · up)
// for 1, 3 and 8 rows, SiLU and tanh GELU, float32 weights stored [k, n] (a product's right
// operand, the gate and up columns side by side) and [n, k], activations contiguous and
// aligned (vector loads), contiguous and misaligned, and strided (every other float), and
// weights in affine groups of 4 and 8 bits. The exit status is the number of failures.
// Built and run by tests/cuda_emulation.rs.
#include <array>
#include <cstdint>
#include <random>

#include "emulator.h"

#include "../../cpp/columns.cu"
#include "../../cpp/gated_rows.cu"

constexpr int kWarps = 8;

double activate(int act, double g) {
  if (act == 0) return g / (1.0 + std::exp(-g));
  return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
}

// Largest difference from float64 of the outputs, relative to |act(g)| * (sum of |up|'s
// terms) + |u| * (sum of |gate|'s terms) (each dot product rounds relative to its terms'
// magnitudes; the activation's slope is at most about 1.1).
struct Worst {
  double value = 0;
  void see(double got, double want, double scale) {
    const double d = std::fabs(got - want) / scale;
    if (!(d <= value)) value = std::isnan(d) ? INFINITY : d;
  }
};

// The emulated launch of `width / kWarps` blocks (rounded up).
template <class Body>
void launch(int width, Body&& body) {
  const int blocks = (width + kWarps - 1) / kWarps;
  gridDim = {blocks, 1, 1};
  for (int b = 0; b < blocks; ++b) run_block({b, 0, 0}, kWarps * 32, body);
}

// `x`: ROWS rows as [1, ROWS, k] with row stride `row_stride` and value stride `step`,
// starting `skew` floats into its storage.
struct Rows {
  std::vector<float> storage;
  const float* x;
  std::array<int, 3> shape;
  std::array<long long, 3> strides;
};

Rows rows_of(int rows, int k, int step, int skew, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  Rows r;
  const long long row_stride = static_cast<long long>(k) * step;
  r.storage.assign(rows * row_stride + 8, NAN);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < k; ++j) r.storage[skew + i * row_stride + j * step] = uniform(rng);
  r.x = r.storage.data() + skew;
  r.shape = {1, rows, k};
  r.strides = {rows * row_stride, row_stride, step};
  return r;
}

double value(const Rows& r, int row, int j) { return r.x[row * r.strides[1] + j * r.strides[2]]; }

// The largest difference of `out` ([rows, width]) from float64's act(x · W[:, gate + c]) *
// (x · W[:, up + c]), W's value at (k, column) given by `weight`.
template <class Weight>
double compare(const Rows& x, int rows, int k, int width, int act, int gate, int up,
               const Weight& weight, const std::vector<float>& out) {
  Worst worst;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < width; ++c) {
      double g = 0, u = 0, gm = 0, um = 0;
      for (int i = 0; i < k; ++i) {
        const double xv = value(x, r, i);
        g += xv * weight(i, gate + c);
        u += xv * weight(i, up + c);
        gm += std::fabs(xv * weight(i, gate + c));
        um += std::fabs(xv * weight(i, up + c));
      }
      const double scale = std::fabs(activate(act, g)) * um + 1.2 * std::fabs(u) * gm + 1e-30;
      worst.see(out[static_cast<size_t>(r) * width + c], activate(act, g) * u, scale);
    }
  }
  return worst.value;
}

// Float32 weights, the gate at column 3 and up after it, stored column by column ([n, k],
// `by_column`) or row by row ([k, n]); the kernel reads them as [k, n] (K_FIRST, a
// product's right operand: the transposed view of [n, k] storage) or as [n, k].
template <int ROWS, int ACT, bool K_FIRST>
double run_float(int width, int k, int step, int skew, bool by_column) {
  std::mt19937 rng(static_cast<unsigned>(width * 7919 + k * 31 + ROWS * 3 + ACT + step + skew + by_column));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const Rows x = rows_of(ROWS, k, step, skew, rng);
  const int n = 2 * width + 3, gate = 3, up = 3 + width;
  std::vector<float> w(static_cast<size_t>(n) * k);
  for (auto& v : w) v = 0.2f * uniform(rng);
  // Strides of (k, n) and their order as the kernel's view has them.
  const long long along_k = by_column ? 1 : n, along_n = by_column ? k : 1;
  auto weight = [&](int kk, int c) { return w[kk * along_k + c * along_n]; };
  const std::array<long long, 2> w_strides =
      K_FIRST ? std::array<long long, 2>{along_k, along_n} : std::array<long long, 2>{along_n, along_k};
  std::vector<float> out(static_cast<size_t>(ROWS) * width, NAN);
  launch(width, [&] {
    rlx_gated::gated_rows<ROWS, kWarps, ACT, K_FIRST>(x.x, x.shape, x.strides, 3, w.data(), w_strides,
                                                      gate, up, width, out.data());
  });
  return compare(x, ROWS, k, width, ACT, gate, up, weight, out);
}

// Affine groups of 32: the gate at columns [0, width), up at [width, 2 * width).
template <int ROWS, int BITS, int ACT>
double run_quantized(int width, int k, bool aligned) {
  std::mt19937 rng(static_cast<unsigned>(width * 7919 + k * 31 + ROWS * 3 + BITS + ACT));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const int n = 2 * width, per_word = 32 / BITS;
  std::vector<uint32_t> words(static_cast<size_t>(n) * k / per_word);
  for (auto& v : words) v = static_cast<uint32_t>(rng());
  std::vector<float> scales(static_cast<size_t>(n) * k / 32), biases(scales.size());
  for (auto& s : scales) s = 0.02f * uniform(rng);
  for (auto& b : biases) b = 0.1f * uniform(rng);
  const Rows x = rows_of(ROWS, k, 1, aligned ? 0 : 1, rng);
  auto weight = [&](int kk, int c) {
    const uint32_t word = words[static_cast<size_t>(c) * (k / per_word) + kk / per_word];
    const uint32_t q = (word >> (BITS * (kk % per_word))) & ((1u << BITS) - 1u);
    const size_t g = static_cast<size_t>(c) * (k / 32) + kk / 32;
    return double(scales[g]) * q + biases[g];
  };
  std::vector<float> out(static_cast<size_t>(ROWS) * width, NAN);
  launch(width, [&] {
    rlx_gated::gated_quantized_rows<ROWS, BITS, kWarps, ACT>(x.x, words.data(), scales.data(),
                                                             biases.data(), 0, width, width, k,
                                                             out.data());
  });
  return compare(x, ROWS, k, width, ACT, 0, width, weight, out);
}

int main() {
  int failures = 0;
  // Each term rounds once and the float32 sums over up to 576 terms a few units of float32
  // rounding of the magnitudes' sum; the activation and product a few more.
  auto check = [&](const char* name, double worst) { failures += report(name, worst, 1e-5); };
  check("1 row, SiLU, [k, n] view of [n, k], SmolLM2's width", run_float<1, 0, true>(40, 576, 1, 0, true));
  check("3 rows, GELU, [k, n] view of [n, k], misaligned", run_float<3, 1, true>(13, 96, 1, 1, true));
  check("8 rows, SiLU, [k, n] stored so", run_float<8, 0, true>(40, 576, 1, 0, false));
  check("8 rows, SiLU, [n, k], aligned", run_float<8, 0, false>(40, 576, 1, 0, true));
  check("1 row, GELU, [n, k], strided rows", run_float<1, 1, false>(9, 100, 2, 0, true));
  check("3 rows, SiLU, [n, k], k not in fours", run_float<3, 0, false>(17, 90, 1, 0, true));
  check("1 row, 4 bits, SiLU, SmolLM2's width", run_quantized<1, 4, 0>(40, 576, true));
  check("3 rows, 8 bits, GELU, misaligned", run_quantized<3, 8, 1>(13, 64, false));
  check("8 rows, 4 bits, GELU, one group", run_quantized<8, 4, 1>(9, 32, true));
  return failures;
}

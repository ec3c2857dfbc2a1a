// Checks rlx-mlx-sys/cpp/quantized_rows.cu on the CPU, without a GPU: the kernel's own source
// is compiled as C++ with the few CUDA names it uses stood in for (each lane of a warp is a
// thread; a warp shuffle is a barrier around a shared slot per lane), run for every row
// count, both bit widths, columns that fill and that do not fill a block, and activations
// that are and are not 16-byte aligned, against a float64 product of the same quantized
// weights. From the repository root:
//
//   g++ -O1 -std=c++20 -pthread scripts/quantized_rows_check.cpp -o /tmp/quantized_rows_check
//   /tmp/quantized_rows_check
//
// It prints one line per configuration and exits 1 on the first mismatch. What it cannot see
// is what only a GPU shows (timing, memory ordering across warps: the kernel has none).
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#define __device__
#define __forceinline__ inline

struct alignas(16) float4 {
  float x, y, z, w;
};
struct Index {
  int x = 0, y = 0, z = 0;
};
thread_local Index threadIdx;
thread_local Index blockIdx;

// One warp runs at a time: its 32 lanes meet at `warp_barrier` around each shuffle.
std::barrier<> warp_barrier(32);
float warp_slots[32];

float __shfl_xor_sync(unsigned, float v, int offset) {
  const int lane = threadIdx.x % 32;
  warp_slots[lane] = v;
  warp_barrier.arrive_and_wait();
  const float other = warp_slots[lane ^ offset];
  warp_barrier.arrive_and_wait();
  return other;
}

#include "../rlx-mlx-sys/cpp/quantized_rows.cu"

namespace {

constexpr int WARPS = 8;

template <int ROWS, int BITS>
void launch(const float* x, const uint32_t* words, const float* scales, const float* biases,
            int n, int k, float* out) {
  const int blocks = (n + WARPS - 1) / WARPS;
  for (int block = 0; block < blocks; ++block) {
    for (int warp = 0; warp < WARPS; ++warp) {
      std::vector<std::thread> lanes;
      for (int lane = 0; lane < 32; ++lane) {
        lanes.emplace_back([=] {
          threadIdx.x = warp * 32 + lane;
          blockIdx.x = block;
          rlx_qrows::quantized_rows<ROWS, BITS, WARPS>(x, words, scales, biases, n, k, out);
        });
      }
      for (auto& t : lanes) t.join();
    }
  }
}

template <int ROWS, int BITS>
bool check(int n, int k, bool aligned, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const int per_word = 32 / BITS;
  std::vector<uint32_t> words(static_cast<size_t>(n) * k / per_word);
  for (auto& w : words) w = static_cast<uint32_t>(rng());
  std::vector<float> scales(static_cast<size_t>(n) * k / 32), biases(scales.size());
  for (auto& s : scales) s = uniform(rng) * 0.1f;
  for (auto& b : biases) b = uniform(rng);
  // One float of padding in front makes the misaligned operand.
  std::vector<float4> storage((ROWS * k + 4) / 4 + 1);
  float* x = reinterpret_cast<float*>(storage.data()) + (aligned ? 0 : 1);
  for (int i = 0; i < ROWS * k; ++i) x[i] = uniform(rng);
  std::vector<float> out(static_cast<size_t>(ROWS) * n, NAN);
  launch<ROWS, BITS>(x, words.data(), scales.data(), biases.data(), n, k, out.data());
  for (int r = 0; r < ROWS; ++r) {
    for (int c = 0; c < n; ++c) {
      double want = 0, magnitude = 0;
      for (int i = 0; i < k; ++i) {
        const uint32_t word = words[static_cast<size_t>(c) * (k / per_word) + i / per_word];
        const uint32_t q = (word >> (BITS * (i % per_word))) & ((1u << BITS) - 1u);
        const size_t g = static_cast<size_t>(c) * (k / 32) + i / 32;
        const double w = static_cast<double>(scales[g]) * q + biases[g];
        want += static_cast<double>(x[r * k + i]) * w;
        magnitude += std::fabs(static_cast<double>(x[r * k + i]) * w);
      }
      const double got = out[static_cast<size_t>(r) * n + c];
      // float32 products summed in float32: a few units of rounding per term, at most.
      if (!(std::fabs(got - want) <= 1e-5 * magnitude + 1e-6)) {
        std::printf("MISMATCH rows=%d bits=%d n=%d k=%d aligned=%d: out[%d, %d] = %.9g, want %.9g\n",
                    ROWS, BITS, n, k, aligned, r, c, got, want);
        return false;
      }
    }
  }
  std::printf("ok rows=%d bits=%d n=%d k=%d aligned=%d\n", ROWS, BITS, n, k, aligned);
  return true;
}

template <int ROWS>
bool all_shapes(std::mt19937& rng) {
  for (int n : {1, 9, 200}) {
    for (int k : {32, 96, 576}) {
      for (bool aligned : {true, false}) {
        if (!check<ROWS, 4>(n, k, aligned, rng) || !check<ROWS, 8>(n, k, aligned, rng)) return false;
      }
    }
  }
  return true;
}

}  // namespace

int main() {
  std::mt19937 rng(7);
  const bool ok = all_shapes<1>(rng) && all_shapes<2>(rng) && all_shapes<3>(rng) &&
                  all_shapes<5>(rng) && all_shapes<8>(rng);
  std::printf(ok ? "quantized_rows: every configuration matches\n" : "quantized_rows: MISMATCH\n");
  return ok ? 0 : 1;
}

// Runs cpp/decode_attention.cu on the CPU: one thread per CUDA thread of a block, a barrier
// for __syncthreads and one per warp for its exchanges, the blocks one after another. Each
// case is compared with a float64 reference; the exit status is the number of failures.
// Built and run by tests/cuda_emulation.rs (the shim's own build needs g++ anyway).
#include <random>

#include "emulator.h"

#include "../../cpp/decode_attention.cu"

struct Case {
  const char* name;
  int batch, hq, hk, sq, sk;
  long long n;
  bool nan_key;
  // When not negative, the odd batch rows' length (lengths per batch row).
  long long n_odd = -1;
};

// Runs one case (q [B, Hq, Sq, D], k [B, Hk, Sk, D], v [B, Hk, Sk, DV], contiguous) and
// returns the largest difference from float64, or infinity when a NaN is misplaced.
template <int D, int DV, int ROWS, int CHUNK, int MASK, int WINDOW>
double run(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.sk * 7 + c.n));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> q(c.batch * c.hq * c.sq * D), k(c.batch * c.hk * c.sk * D),
      v(c.batch * c.hk * c.sk * DV);
  for (auto* a : {&q, &k, &v})
    for (auto& x : *a) x = uniform(rng);
  if (c.nan_key) k[0] = NAN;
  const float scale = 0.3f;
  const bool per_batch = c.n_odd >= 0;
  std::vector<long long> lengths(c.batch);
  for (int b = 0; b < c.batch; ++b) lengths[b] = per_batch && b % 2 == 1 ? c.n_odd : c.n;
  const int splits = (c.sk + CHUNK - 1) / CHUNK, rows = c.batch * c.sq * c.hq;
  std::vector<float> out(rows * DV, -7.f), parts(rows * splits * DV), stats(rows * splits * 2);
  gridDim = {splits, c.hk, c.batch};
  for (int b = 0; b < c.batch; ++b)
    for (int g = 0; g < c.hk; ++g)
      for (int s = 0; s < splits; ++s) {
        run_block({s, g, b}, rlx_decode::THREADS, [&] {
          auto call = [&](auto final_tag, float* o, float* st) {
            rlx_decode::decode_attention<D, DV, ROWS, CHUNK, MASK, WINDOW, long long,
                                         decltype(final_tag)::value>(
                q.data(), k.data(), v.data(), lengths.data(), per_batch ? 1 : 0, &scale,
                c.hq, c.hk, c.sq, c.sk,
                1LL * c.hq * c.sq * D, 1LL * c.sq * D, D, 1, 1LL * c.hk * c.sk * D,
                1LL * c.sk * D, D, 1, 1LL * c.hk * c.sk * DV, 1LL * c.sk * DV, DV, 1, o, st);
          };
          if (splits == 1) call(std::true_type{}, out.data(), nullptr);
          else call(std::false_type{}, parts.data(), stats.data());
        });
      }
  if (splits > 1) {
    blockDim = {128, 1, 1};
    for (int block = 0; block * 128 < rows * DV; ++block) {
      blockIdx = {block, 0, 0};
      for (int t = 0; t < 128; ++t) {
        threadIdx = {t, 0, 0};
        rlx_decode::decode_combine<DV, CHUNK, long long>(
            parts.data(), stats.data(), lengths.data(), per_batch ? c.sq * c.hq : rows, rows,
            splits, c.sk, out.data());
      }
    }
  }
  double worst = 0;
  const int group = c.hq / c.hk;
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.hq; ++h)
      for (int i = 0; i < c.sq; ++i) {
        std::vector<double> scores;
        std::vector<long long> keys;
        const long long n = lengths[b];
        const long long pos = i + n - c.sq;
        for (long long j = 0; j < std::min<long long>(n, c.sk); ++j) {
          if (MASK >= 1 && j > pos) continue;
          if (MASK == 2 && j <= pos - WINDOW) continue;
          double dot = 0;
          for (int f = 0; f < D; ++f)
            dot += double(q[((b * c.hq + h) * c.sq + i) * D + f]) *
                   k[((b * c.hk + h / group) * c.sk + j) * D + f];
          scores.push_back(dot * scale);
          keys.push_back(j);
        }
        double m = -INFINITY, sum = 0;
        for (double s : scores) m = std::max(m, s);
        for (double s : scores) sum += std::exp(s - m);
        bool nan_row = false;
        for (double s : scores) nan_row = nan_row || std::isnan(s);
        for (int f = 0; f < DV; ++f) {
          double o = 0;
          for (size_t t = 0; t < scores.size(); ++t)
            o += std::exp(scores[t] - m) * v[((b * c.hk + h / group) * c.sk + keys[t]) * DV + f];
          o = scores.empty() ? 0 : o / sum;
          const float got = out[((b * c.sq + i) * c.hq + h) * DV + f];
          if (nan_row != std::isnan(got)) return INFINITY;
          if (!nan_row) worst = std::max(worst, std::fabs(o - got));
        }
      }
  return worst;
}

int main() {
  int failures = 0;
  auto check = [&](const Case& c, double worst) {
    const bool ok = worst <= 1e-5;
    std::printf("%s %s: largest difference %g\n", ok ? "ok" : "FAILED", c.name, worst);
    failures += ok ? 0 : 1;
  };
  // One chunk: SmolLM2's decoding shape (9 heads over 3 key heads), some keys filled.
  Case a{"one row, 3 heads a key head, 130 of 300 keys, causal", 1, 9, 3, 1, 300, 130, false};
  check(a, run<64, 64, 3, 1024, 1, 0>(a));
  Case b{"two batches, no keys filled, no mask", 2, 6, 2, 1, 300, 0, false};
  check(b, run<64, 64, 3, 1024, 0, 0>(b));
  Case c{"every key filled", 1, 9, 3, 1, 300, 300, false};
  check(c, run<64, 64, 3, 1024, 1, 0>(c));
  // Several chunks, merged by the second kernel.
  Case d{"3 rows, 4 heads a key head, 700 of 1100 keys, causal, chunks", 1, 4, 1, 3, 1100, 700, false};
  check(d, run<64, 64, 12, 256, 1, 0>(d));
  Case e{"window of 5 over 1100 keys, chunks", 1, 4, 1, 3, 1100, 1100, false};
  check(e, run<64, 64, 12, 256, 2, 5>(e));
  Case f{"a row before the first key sees nothing; 8 and 4 features", 1, 2, 2, 2, 40, 1, false};
  check(f, run<8, 4, 2, 1024, 1, 0>(f));
  Case g{"a NaN key makes its rows NaN", 1, 9, 3, 1, 300, 130, true};
  check(g, run<64, 64, 3, 1024, 1, 0>(g));
  Case h{"a NaN key through the merge", 1, 4, 1, 3, 1100, 700, true};
  check(h, run<64, 64, 12, 256, 1, 0>(h));
  // Lengths per batch row: a batch of sequences at positions of their own.
  Case i{"lengths per batch row, one chunk", 3, 9, 3, 1, 300, 130, false, 7};
  check(i, run<64, 64, 3, 1024, 1, 0>(i));
  Case j{"lengths per batch row through the merge", 2, 4, 1, 3, 1100, 700, false, 260};
  check(j, run<64, 64, 12, 256, 1, 0>(j));
  return failures;
}

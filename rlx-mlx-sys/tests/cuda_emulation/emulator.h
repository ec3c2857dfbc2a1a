// What NVRTC provides, emulated on the CPU for RLX's CUDA kernels (tests/cuda_emulation/*.cpp,
// built and run by tests/cuda_emulation.rs): one std::thread per CUDA thread of a block, a
// barrier for __syncthreads and one per warp for its exchanges, the blocks one after
// another (`run_block`).
#pragma once

#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __forceinline__ inline
#define __shared__ static
struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float __int_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
struct Dim3 {
  int x = 0, y = 0, z = 0;
};
thread_local Dim3 threadIdx;
Dim3 blockIdx, gridDim, blockDim;
constexpr int kMaxThreads = 1024;
std::barrier<>* block_barrier = nullptr;
std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
float warp_slots[kMaxThreads];
inline void __syncthreads() { block_barrier->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float x, int mask) {
  const int t = threadIdx.x, warp = t / 32;
  warp_slots[t] = x;
  warp_barriers[warp]->arrive_and_wait();
  const float y = warp_slots[(t & ~31) | ((t % 32) ^ mask)];
  warp_barriers[warp]->arrive_and_wait();
  return y;
}
inline bool __any_sync(unsigned, bool x) {
  const int t = threadIdx.x, warp = t / 32;
  warp_slots[t] = x ? 1.f : 0.f;
  warp_barriers[warp]->arrive_and_wait();
  bool any = false;
  for (int i = 0; i < 32; ++i) any = any || warp_slots[warp * 32 + i] != 0.f;
  warp_barriers[warp]->arrive_and_wait();
  return any;
}
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
using std::fmaf;
using std::fmaxf;
using std::isnan;

// Runs `body` (the kernel's call) as block `block` of `threads` threads (a multiple of 32).
template <class Body>
void run_block(Dim3 block, int threads, Body&& body) {
  blockIdx = block;
  blockDim = {threads, 1, 1};
  std::barrier<> barrier(threads);
  block_barrier = &barrier;
  warp_barriers.clear();
  for (int w = 0; w < threads / 32; ++w) warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&body, t] {
      threadIdx = {t, 0, 0};
      body();
    });
  }
  for (auto& t : running) t.join();
}

// Prints whether a case's largest difference from float64 relative to its terms' magnitude,
// `worst`, is within `bound` ("ok NAME: ..." or "FAILED NAME: ..."), and returns 1 if it is
// not: an emulator's exit status counts its failures.
inline int report(const char* name, double worst, double bound) {
  const bool ok = worst <= bound;
  std::printf("%s %s: largest difference / magnitude %g\n", ok ? "ok" : "FAILED", name, worst);
  return ok ? 0 : 1;
}
